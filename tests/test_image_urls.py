# ruff: noqa: F811  (pytest fixtures imported from openai_fake are parameters here)
"""Image URLs a vendor's answer names (issue 38.2 and 38.3): fetched only from public addresses,
the endpoint's own origin or FLOWNB_MEDIA_ALLOW, checked at every redirect by the addresses a
name resolves to, kept only when the bytes are an image; and a generation paid for whose image
cannot be fetched is recorded, not bought again. The fake OpenAI server answers image requests;
a recording server (another port, or another loopback host) plays the place the URL names."""

from __future__ import annotations

import base64
import io
import ipaddress
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

import flownb
from flownb.errors import ImageNotFetched
from flownb.infra.media import content_type
from flownb.providers.download import Places
from flownb.testing.fake_openai import FakeOpenAI, image_bytes
from tests.cli_inprocess import run_cli
from tests.conftest import make_flow, write_flow
from tests.openai_fake import KEY, fake, fake_server  # noqa: F401 (fixtures)
from tests.recorder import Answer, Recorder

MARKER = "PICTURE"
PNG = image_bytes("a picture")


def _jpeg() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 10, 10)).save(out, format="JPEG")
    return out.getvalue()


def _flow() -> dict:
    flow = make_flow({"pic": f"{MARKER} of {{topic}}"}, ["topic"], images=("pic",))
    for node in flow["nodes"]:
        if node["type"] == "imageNode":
            node["data"]["modelParams"] = {"model": "dall-e-2", "size": "256x256"}
    return flow


def _answer_with_url(fake: FakeOpenAI, url: str) -> None:
    fake.configure(answers={MARKER: {"data": [{"url": url}]}})


def _media(home: Path) -> list[Path]:
    folder = home / "media"
    return sorted(folder.iterdir()) if folder.exists() else []


def _image_requests(fake: FakeOpenAI) -> int:
    return sum(path.endswith("/images/generations") for path in fake.state.paths)


def _not_fetched(flow: flownb.LocalFlow) -> ImageNotFetched:
    with pytest.raises(ImageNotFetched) as caught:
        flow.run(topic="owls")
    message = str(caught.value)
    assert "paid for" in message and KEY not in message
    return caught.value


@pytest.fixture
def png_elsewhere() -> Iterator[Recorder]:
    """A server on 127.0.0.2 answering an image to anything."""
    with Recorder(Answer(200, {"Content-Type": "image/png"}, PNG)) as server:
        yield server


def test_a_url_on_another_loopback_port_is_never_requested(
    fake: FakeOpenAI, flownb_env: Path
) -> None:
    with Recorder(Answer(200, {"Content-Type": "image/png"}, PNG), host="127.0.0.1") as other:
        _answer_with_url(fake, other.url + "/secret.png")
        flow = flownb.load_flow(_flow(), cache=False)
        error = _not_fetched(flow)
        assert other.received == []  # 0 requests there
        assert f"127.0.0.1:{other.port}" in str(error) and "/secret.png" not in str(error)
    assert _media(flownb_env) == []  # no such bytes in the media store
    assert _image_requests(fake) == 1  # bought once, not again for the download


def test_a_name_is_checked_by_the_addresses_it_resolves_to(
    fake: FakeOpenAI, png_elsewhere: Recorder, flownb_env: Path
) -> None:
    """``localhost`` is not the endpoint's origin (127.0.0.1) by name, and resolves to loopback:
    refused by its address, before any connection."""
    with Recorder(Answer(200, {"Content-Type": "image/png"}, PNG), host="127.0.0.1") as local:
        _answer_with_url(fake, f"http://localhost:{local.port}/x.png")
        error = _not_fetched(flownb.load_flow(_flow(), cache=False))
        assert "not public" in str(error) and local.received == []
    assert _media(flownb_env) == []


def test_a_redirect_into_a_disallowed_address_is_refused_at_that_hop(
    fake: FakeOpenAI, png_elsewhere: Recorder, monkeypatch: pytest.MonkeyPatch, flownb_env: Path
) -> None:
    with Recorder(
        Answer(302, {"Location": png_elsewhere.url + "/inside.png"}, b""), host="127.0.0.1"
    ) as hop:
        monkeypatch.setenv("FLOWNB_MEDIA_ALLOW", hop.url)  # the first hop is allowed
        _answer_with_url(fake, hop.url + "/start.png")
        error = _not_fetched(flownb.load_flow(_flow(), cache=False))
        assert len(hop.received) == 1  # the allowed hop was asked, once
    assert png_elsewhere.received == []  # the hop it pointed to, never
    assert "127.0.0.2" in str(error)
    assert _media(flownb_env) == []


def test_bytes_that_are_not_an_image_are_refused_by_url_and_by_b64(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, flownb_env: Path
) -> None:
    page = b"<html><body>internal dashboard</body></html>"
    with Recorder(Answer(200, {"Content-Type": "image/png"}, page)) as liar:
        monkeypatch.setenv("FLOWNB_MEDIA_ALLOW", liar.url)
        _answer_with_url(fake, liar.url + "/pic.png")
        error = _not_fetched(flownb.load_flow(_flow(), cache=False))
        assert "not an image" in str(error) and len(liar.received) == 1
    fake.configure(answers={MARKER: {"data": [{"b64_json": base64.b64encode(page).decode()}]}})
    assert "not an image" in str(_not_fetched(flownb.load_flow(_flow(), cache=False)))
    assert _media(flownb_env) == []


@pytest.mark.parametrize("how", ["origin", "range"])
def test_an_origin_or_range_allowed_by_the_setting_is_fetched(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, flownb_env: Path, how: str
) -> None:
    jpeg = _jpeg()
    # The server says PNG; the bytes are a JPEG: kept as what they are.
    with Recorder(Answer(200, {"Content-Type": "image/png"}, jpeg)) as allowed:
        monkeypatch.setenv("FLOWNB_MEDIA_ALLOW", allowed.url if how == "origin" else "127.0.0.2/32")
        _answer_with_url(fake, allowed.url + "/ok.png")
        result = flownb.load_flow(_flow(), cache=False).run(topic="owls")
        assert len(allowed.received) == 1
        assert "Authorization" not in allowed.received[0]["headers"]  # never the key
    stored = _media(flownb_env)
    assert [p.read_bytes() for p in stored] == [jpeg]
    assert stored[0].suffix == ".jpg" and content_type(stored[0]) == "image/jpeg"
    assert result["pic"].endswith(".jpg")


def test_the_endpoints_own_origin_is_fetched_as_before(fake: FakeOpenAI, flownb_env: Path) -> None:
    result = flownb.load_flow(_flow(), cache=False).run(topic="owls")
    assert result["pic"].startswith("file://")
    assert [p.read_bytes() for p in _media(flownb_env)] == [image_bytes(f"{MARKER} of owls")]
    assert content_type(_media(flownb_env)[0]) == "image/png"


def test_a_bad_setting_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLOWNB_MEDIA_ALLOW", "10.0.0.0/8, ftp://files.example")
    with pytest.raises(flownb.ConfigError, match=r"FLOWNB_MEDIA_ALLOW: 'ftp://files\.example'"):
        flownb.load_flow(_flow(), provider="openai", cache=False)


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("8.8.8.8", True),
        ("2001:4860:4860::8888", True),
        ("127.0.0.1", False),
        ("10.1.2.3", False),
        ("192.168.0.1", False),
        ("172.16.0.1", False),
        ("169.254.169.254", False),  # the cloud's metadata address: link-local
        ("100.64.0.1", False),  # shared address space
        ("224.0.0.1", False),
        ("240.0.0.1", False),
        ("0.0.0.0", False),
        ("::1", False),
        ("::", False),
        ("fe80::1", False),
        ("fc00::1", False),
        ("::ffff:127.0.0.1", False),  # IPv4-mapped loopback
        ("::ffff:8.8.8.8", True),
    ],
)
def test_which_addresses_are_public(address: str, public: bool) -> None:
    assert Places().address_allowed(address) is public
    if not public:  # a listed range lets it in
        net = ipaddress.ip_network(address)
        assert Places(networks=(net,)).address_allowed(address)


# -- a paid generation whose image cannot be fetched (38.3) -------------------------------


def test_an_image_url_answering_404_is_bought_once_and_its_cost_recorded(
    fake: FakeOpenAI, flownb_env: Path
) -> None:
    _answer_with_url(fake, fake.origin + "/_fake/images/gone.png")  # own origin: 404
    flow = flownb.load_flow(_flow(), cache=False)
    error = _not_fetched(flow)
    assert "HTTP 404" in str(error) and f"127.0.0.1:{fake.port}" in str(error)
    assert _image_requests(fake) == 1  # the generation, bought exactly once
    assert len(fake.state.image_headers) == 1  # a 404 cannot change: downloaded once
    assert error.paid_usd is not None and error.paid_usd > 0
    runs = flownb.runs()
    assert len(runs) == 1 and runs["cost_usd"].iloc[0] == pytest.approx(error.paid_usd)
    assert "paid for" in runs["error"].iloc[0]


def test_the_cli_cost_line_counts_an_image_paid_for_but_not_fetched(
    fake: FakeOpenAI, flownb_env: Path, tmp_path: Path
) -> None:
    _answer_with_url(fake, fake.origin + "/_fake/images/gone.png")
    path = write_flow(tmp_path / "pic.json", _flow())
    once = run_cli("run", str(path), "--var", "topic=owls", "--no-cache")
    assert once.returncode == 1 and "paid for" in once.stderr
    assert "cost: $0.0160 for 1 run(s)" in once.stderr  # dall-e-2 at 256x256
    rows = tmp_path / "rows.csv"
    rows.write_text("topic\nowls\nbats\n")
    many = run_cli("run", str(path), "--csv", str(rows), "--no-cache")
    assert many.returncode == 1 and "cost: $0.0320 for 2 run(s)" in many.stderr
    assert _image_requests(fake) == 3  # one generation per run, none bought again


def test_a_file_url_is_not_fetched_nor_bought_again(
    fake: FakeOpenAI, flownb_env: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.png"
    secret.write_bytes(PNG)
    _answer_with_url(fake, secret.as_uri())
    error = _not_fetched(flownb.load_flow(_flow(), cache=False))
    assert "not http(s)" in str(error) and _image_requests(fake) == 1
    assert _media(flownb_env) == []


def test_a_download_failing_with_5xx_is_retried_alone(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, flownb_env: Path
) -> None:
    with Recorder(
        Answer(503, {}, b"busy"), Answer(200, {"Content-Type": "image/png"}, PNG)
    ) as flaky:
        monkeypatch.setenv("FLOWNB_MEDIA_ALLOW", flaky.url)
        _answer_with_url(fake, flaky.url + "/pic.png")
        result = flownb.load_flow(_flow(), cache=False).run(topic="owls")
        assert len(flaky.received) == 2  # the download, tried again
    assert _image_requests(fake) == 1  # the generation, once
    assert result["pic"].startswith("file://")
    assert [p.read_bytes() for p in _media(flownb_env)] == [PNG]


def test_a_download_slower_than_the_call_time_limit_does_not_buy_again(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, flownb_env: Path
) -> None:
    """The time limit is the paid call's: the download comes after it, so a slow image server
    never turns into a timed-out (and retried, so bought again) generation."""
    with Recorder(Answer(200, {"Content-Type": "image/png"}, PNG, delay=6.0)) as slow:
        monkeypatch.setenv("FLOWNB_MEDIA_ALLOW", slow.url)
        _answer_with_url(fake, slow.url + "/pic.png")
        result = flownb.load_flow(_flow(), cache=False, timeout=4).run(topic="owls")
        assert len(slow.received) == 1
    assert _image_requests(fake) == 1
    assert result["pic"].startswith("file://")
