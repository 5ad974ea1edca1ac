# ruff: noqa: F811  (pytest fixtures imported from openai_fake and vendor_fakes are parameters)
"""Judges of image outputs and few-shot judges, against the loopback fakes of each vendor: the
image goes in the vendor's own message format (OpenAI ``image_url`` data URL, Anthropic base64
``image`` block, Gemini ``inlineData``), the test reads it back out of the recorded request and
compares it with the generated image's bytes, and the fake's verdict follows the image. Labelled
examples reach the judge's prompt."""

from __future__ import annotations

import base64
import io
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from PIL import Image, ImageChops, ImageStat

import flownb
from flownb import scorers as S
from flownb.errors import ConfigError
from flownb.evaluation.html.compare import THUMB
from flownb.providers.images import ImagePart, image_ref, prompt_parts
from flownb.show.display import image_bytes
from flownb.testing.fake_openai import (
    FakeOpenAI,
    data_url_bytes,
    judge_score,
    seen_image,
)
from tests.conftest import make_flow
from tests.openai_fake import fake, fake_server  # noqa: F401 (fixtures)
from tests.serving import ScriptedProvider
from tests.vendor_fakes import (  # noqa: F401 (fixtures)
    anthropic_fake,
    anthropic_server,
    flow_with,
    gemini_fake,
    gemini_server,
)

pytestmark = pytest.mark.timeout(120)

PICS = make_flow({"pic": "a picture of {topic}"}, ["topic"], images=("pic",))
RUBRIC = "Does the picture show {topic}?"


def topics(n: int) -> pd.DataFrame:
    return pd.DataFrame({"topic": [f"t{i}" for i in range(n)]}, index=[f"r{i}" for i in range(n)])


def images_of(report: flownb.EvalReport, output: str = "pic") -> list[bytes]:
    """Return the bytes of every generated image of the report, in results order."""
    found = [image_bytes(url) for url in report.results[output]]
    assert all(f is not None for f in found)
    return [f[0] for f in found if f is not None]


def verdicts(images: list[bytes]) -> list[float]:
    """What the fakes score each image: judge_score of how they read it."""
    return [judge_score(seen_image(data)) for data in images]


def judge_bodies(fake: Any) -> list[dict[str, Any]]:
    return [body for body in fake.requests if S.JUDGE_MARKER in str(body)]


def test_openai_judge_sends_the_image_as_a_data_url_and_a_rerun_is_free(
    fake: FakeOpenAI,
) -> None:
    fake.configure(image_format="b64_json")
    flow = flownb.load_flow(PICS)  # the fake draws the images; the judge borrows its provider
    report = flownb.evaluate(flow, topics(3), [S.judge("pic", RUBRIC)], progress=False)
    assert report.kinds["pic"] == "image"
    made = images_of(report)
    assert len(set(made)) == 3  # three different images, so three different verdicts below
    bodies = judge_bodies(fake)
    assert len(bodies) == 3
    sent = []
    for body in bodies:
        parts = body["messages"][-1]["content"]
        assert isinstance(parts, list)
        urls = [p["image_url"]["url"] for p in parts if p["type"] == "image_url"]
        assert len(urls) == 1 and urls[0].startswith("data:image/png;base64,")
        text = "".join(p["text"] for p in parts if p["type"] == "text")
        assert text.startswith(S.JUDGE_MARKER) and "[[flownb-image:" not in text
        assert "file://" not in text  # the model sees the image, never a local path
        sent.append(data_url_bytes(urls[0]))
    assert sorted(sent) == sorted(made)  # type: ignore[type-var]
    assert report.results["judge_pic"].tolist() == verdicts(made)
    # The image's bytes are in the prompt's cache key (by the media name made from them):
    # the same evaluation again pays no judge call, and the preview says so.
    fake.reset()
    preview = flownb.evaluate(flow, topics(3), [S.judge("pic", RUBRIC)], dry_run=True)
    assert preview.n_calls == 0 and preview.n_cached == 6  # 3 images, 3 judge calls
    again = flownb.evaluate(flow, topics(3), [S.judge("pic", RUBRIC)], progress=False)
    assert fake.requests == []
    assert again.results["judge_pic"].tolist() == report.results["judge_pic"].tolist()


def test_anthropic_judge_sends_a_base64_image_block(anthropic_fake: Any) -> None:
    flow = flownb.load_flow(PICS, provider="offline")  # placeholder images drawn offline
    judge = S.judge("pic", RUBRIC, provider="anthropic")
    report = flownb.evaluate(flow, topics(2), [judge], progress=False, log=False)
    made = images_of(report)
    bodies = judge_bodies(anthropic_fake)
    assert len(bodies) == 2
    sent = []
    for body in bodies:
        blocks = body["messages"][-1]["content"]
        images = [b for b in blocks if b["type"] == "image"]
        assert len(images) == 1 and images[0]["source"]["type"] == "base64"
        assert images[0]["source"]["media_type"] == "image/png"
        sent.append(base64.b64decode(images[0]["source"]["data"]))
    assert sorted(sent) == sorted(made)
    assert report.results["judge_pic"].tolist() == verdicts(made)


def test_gemini_judge_sends_the_image_inline(gemini_fake: Any) -> None:
    # Placeholder images drawn offline: big enough that their base64 holds the characters in
    # which the two alphabets differ (google-genai sends the URL-safe one).
    flow = flownb.load_flow(flow_with({"pic": {}}, images=("pic",)), provider="offline")
    judge = S.judge("pic", RUBRIC, provider="gemini")
    report = flownb.evaluate(flow, topics(2), [judge], progress=False, log=False)
    made = images_of(report)
    bodies = judge_bodies(gemini_fake)
    assert len(bodies) == 2
    sent = []
    for body in bodies:
        parts = body["contents"][-1]["parts"]
        inline = [p["inlineData"] for p in parts if "inlineData" in p]
        assert len(inline) == 1
        # The SDK names the field in either case, as the API accepts both.
        assert (inline[0].get("mimeType") or inline[0].get("mime_type")) == "image/png"
        data = inline[0]["data"]
        assert set(data) & set("-_+/")  # an encoding in which the alphabets differ
        sent.append(base64.urlsafe_b64decode(data.replace("+", "-").replace("/", "_")))
    assert sorted(sent) == sorted(made)
    assert report.results["judge_pic"].tolist() == verdicts(made)


def test_a_model_that_reads_no_images_is_refused_before_any_call(fake: FakeOpenAI) -> None:
    flow = flownb.load_flow(PICS, provider="offline")
    judge = S.judge("pic", RUBRIC, provider="openai", model="gpt-3.5-turbo")
    refused = re.escape("'gpt-3.5-turbo', a model that reads no images")
    with pytest.raises(ConfigError, match=refused):
        flownb.evaluate(flow, topics(2), [judge], progress=False, log=False)
    assert fake.requests == []


def test_labelled_examples_reach_the_judge_prompt(fake: FakeOpenAI) -> None:
    flow = flownb.load_flow(make_flow({"say": "say {topic}"}, ["topic"]), provider="offline")
    data = topics(4)
    plain = S.judge("say", "Is it polite?", provider="openai")
    report = flownb.evaluate({"a": flow}, data, [plain], progress=False)
    report.label("r1", "a", passed=True, note="short and kind")
    report.label("r2", "a", passed=False, note="rude")
    report.label("r3", "a", score=4)
    labels = report.labels
    assert labels[["row", "topic", "say"]].values.tolist() == [
        ["r1", "t1", "say t1"],
        ["r2", "t2", "say t2"],
        ["r3", "t3", "say t3"],
    ]
    fake.reset()
    shot = S.judge("say", "Is it polite?", provider="openai", examples=labels, max_examples=2)
    assert len(shot.examples) == 2 and shot.labels_given == 3
    again = flownb.evaluate({"a": flow}, data, [shot], progress=False)
    bodies = judge_bodies(fake)
    assert len(bodies) == 4  # other examples, another prompt: no cache hit on the plain judge
    prompt = bodies[0]["messages"][-1]["content"]
    # One pass and one fail (the cap, both verdicts shown), each with its input and note.
    assert "Example 1\nInput: topic: t1\nOutput:\n<<<\nsay t1\n>>>" in prompt
    assert 'Human label: pass, note: "short and kind"' in prompt
    assert 'Human label: fail, note: "rude"' in prompt
    assert "say t3" not in prompt.split("Output to grade:")[0]
    # The verdict still follows the graded output, not the examples.
    assert again.results["judge_say"].tolist() == [judge_score(f"say t{i}") for i in range(4)]
    info = next(s for s in again.scorers if s.name == "judge_say")
    assert "examples=<3 labels>" in info.definition
    assert "[few-shot: 2 of 3 labels]" in info.definition


def test_examples_without_a_usable_label_are_refused() -> None:
    with pytest.raises(ConfigError, match="examples= takes a labels frame"):
        S.judge("say", "ok?", examples=[{"passed": True}])
    frame = pd.DataFrame({"row": ["r0"], "variant": ["a"], "passed": [pd.NA], "say": ["x"]})
    with pytest.raises(ConfigError, match="no label with passed= or score="):
        S.judge("say", "ok?", examples=frame)
    with pytest.raises(ConfigError, match="no column 'other'"):
        S.judge("other", "ok?", examples=frame)


def test_image_outputs_are_a_grid_of_embedded_thumbnails(tmp_path: Path) -> None:
    flow = flownb.load_flow(PICS, provider="offline")
    other = flow.with_prompts({"pic": "a drawing of {topic}"})
    report = flownb.evaluate({"a": flow, "b": other}, topics(3), progress=False, log=False)
    page = report.save(tmp_path / "r.html").read_text(encoding="utf-8")
    assert "file://" not in page
    grid = re.search(
        r"<table class='flownb-eval flownb-grid' data-output='pic'>(.*?)</table>", page
    )
    assert grid is not None
    head = re.findall(r"<th>(\w+)</th>", grid.group(1).split("</thead>")[0])
    assert head == ["pic", "a", "b"]  # variants across
    rows = grid.group(1).split("</thead>")[1].split("<tr>")[1:]
    assert len(rows) == 3  # input rows down
    res = report.results
    for i, row in enumerate(rows):
        cells = re.findall(
            r'<td data-variant="(\w+)" data-row="(\w+)"><img src="data:image/(png|jpeg);base64,'
            r'([^"]+)"',
            row,
        )
        assert [(v, r) for v, r, _, _ in cells] == [("a", f"r{i}"), ("b", f"r{i}")]
        for v, r, _, data in cells:
            url = res[(res["variant"] == v) & (res[report.index_name] == r)]["pic"].item()
            original = image_bytes(url)
            assert original is not None
            with (
                Image.open(io.BytesIO(base64.b64decode(data))) as thumb,
                Image.open(io.BytesIO(original[0])) as full,
            ):
                # Downscaled to at most THUMB pixels, and a picture of this very image.
                assert max(thumb.size) <= THUMB < max(full.size)
                small = full.convert("RGB").resize(thumb.size)
                assert _distance(thumb.convert("RGB"), small) < 12
    assert len(page) < 6 * 40_000  # six thumbnails and the page around them


def _distance(a: Image.Image, b: Image.Image) -> float:
    """Mean absolute difference of two same-sized RGB images' pixel values (0..255)."""
    bands = ImageStat.Stat(ImageChops.difference(a, b)).mean
    return sum(bands) / len(bands)


def test_pick_best_sees_every_variant_s_image(fake: FakeOpenAI) -> None:
    flow = flownb.load_flow(PICS, provider="offline")
    variants = {"a": flow, "b": flow.with_prompts({"pic": "a drawing of {topic}"})}
    picker = S.pick_best("pic", "Which shows {topic} best?", provider="openai")
    report = flownb.evaluate(variants, topics(2), [picker], progress=False, log=False)
    res = report.results
    made = images_of(report)  # a's rows, then b's
    # Per input row, candidate 1 is a's image and candidate 2 is b's (calls may come in any order).
    wanted = {i: [made[i], made[i + 2]] for i in range(2)}
    bodies = [b for b in fake.requests if S.PICK_MARKER in str(b)]
    seen = []
    for body in bodies:
        parts = body["messages"][-1]["content"]
        seen.append(
            [data_url_bytes(p["image_url"]["url"]) for p in parts if p["type"] == "image_url"]
        )
    assert sorted(seen) == sorted(wanted.values())  # type: ignore[type-var]
    for i, pair in wanted.items():
        best = 0 if verdicts(pair)[0] >= verdicts(pair)[1] else 1
        got = res[res[report.index_name] == f"r{i}"]["pick_best_pic"].tolist()
        assert got == [1.0 if k == best else 0.0 for k in range(2)]


def test_a_provider_that_shows_no_images_is_refused_before_any_call() -> None:
    flow = flownb.load_flow(PICS, provider="offline")
    blind = ScriptedProvider()  # a provider that does not declare supports_vision
    judge = S.judge("pic", RUBRIC, provider=blind)
    with pytest.raises(ConfigError, match="shows a model no images"):
        flownb.evaluate(flow, topics(2), [judge], progress=False, log=False)
    assert not blind.calls


def test_images_by_url_go_as_urls_in_each_vendor_s_format() -> None:
    from flownb.providers.anthropic.provider import _block
    from flownb.providers.gemini import _part
    from flownb.providers.openai.request import _content_parts

    url = "https://example.invalid/cat.jpg"
    prompt = f"Grade:\n{image_ref(url)}\nnow"
    parts = prompt_parts(prompt, None)
    assert parts[0] == "Grade:\n" and parts[2] == "\nnow"
    assert parts[1] == ImagePart(None, "image/jpeg", url)
    assert _content_parts(prompt, None)[1] == {"type": "image_url", "image_url": {"url": url}}  # type: ignore[arg-type]
    assert _block(parts[1]) == {"type": "image", "source": {"type": "url", "url": url}}
    gemini = _part(parts[1])
    assert gemini.file_data.file_uri == url and gemini.file_data.mime_type == "image/jpeg"
    # Text that only looks like a reference stays text; a local path is never one.
    assert prompt_parts("[[flownb-image:/etc/passwd]]", None) == ["[[flownb-image:/etc/passwd]]"]
    with pytest.raises(ConfigError, match="by media name or http"):
        image_ref("file:///etc/passwd")


def test_image_examples_are_shown_as_images(fake: FakeOpenAI) -> None:
    flow = flownb.load_flow(PICS, provider="offline")
    first = flownb.evaluate(flow, topics(2), progress=False)
    first.label("r0", first.variants[0], passed=True, note="clear")
    judge = S.judge("pic", RUBRIC, provider="openai", examples=first.labels)
    report = flownb.evaluate(flow, topics(2), [judge], progress=False)
    made = images_of(report)
    for body in judge_bodies(fake):
        parts = body["messages"][-1]["content"]
        sent = [data_url_bytes(p["image_url"]["url"]) for p in parts if p["type"] == "image_url"]
        assert sent[0] == made[0]  # the labelled example's image, before the one graded
        assert len(sent) == 2 and sent[1] in made
        text = "".join(p["text"] for p in parts if p["type"] == "text")
        assert text.index('Human label: pass, note: "clear"') < text.index("Output to grade:")
    assert report.results["judge_pic"].tolist() == verdicts(made)
