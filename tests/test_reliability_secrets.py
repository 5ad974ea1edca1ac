"""Secrets: no key — a flownb API key or the OpenAI key — in FLOWNB_HOME in plain text, in a
server's logs, in an error body, in CLI output, in an exception's text, or in notebook outputs.

This file sorts last among the reliability suites: besides its own run (a server at debug log
level hit with good, near-miss, revoked and misplaced keys; an upstream that echoes the OpenAI
key in its 401, the way OpenAI's own "Incorrect API key provided" does; the CLI and the Python
client; the server-and-client notebook executed in a real kernel), it scans everything the load,
faults and interrupt suites registered when they ran in the same session.
"""

from __future__ import annotations

import json
import os
import re
import threading
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import nbformat
import pytest
from nbclient import NotebookClient

import flownb
from flownb.testing.fake_openai import FakeOpenAI
from tests.conftest import FLOWS, ROOT
from tests.kernels import isolated
from tests.reliability.exposure import Exposure, find_leaks, recorded
from tests.reliability.procs import create_key, flownb_cli, serve

pytestmark = pytest.mark.timeout(150)

OPENAI_KEY = "sk-proj-secretsuite" + "Vb4" * 14
# Shapes of real keys, for files we did not generate the keys of (committed notebooks).
KEY_SHAPES = re.compile(r"fnb_[A-Za-z0-9_-]{20,}|sk-(?:proj-)?[A-Za-z0-9_-]{20,}")


class _EchoingUpstream(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint that refuses every key and quotes it back in full."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        key = (self.headers.get("authorization") or "").removeprefix("Bearer ")
        body = json.dumps(
            {
                "error": {
                    "message": f"Incorrect API key provided: {key}. Find your key at ...",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "invalid_api_key",
                }
            }
        ).encode()
        self.send_response(401)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:  # quiet
        pass


@contextmanager
def echoing_upstream() -> Iterator[str]:
    """Serve :class:`_EchoingUpstream` on loopback; yields its ``/v1`` base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _EchoingUpstream)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def _exception_text(exc: BaseException) -> str:
    """Everything a user could see of an exception: str, repr, the whole traceback chain."""
    return "\n".join([str(exc), repr(exc), *traceback.format_exception(exc)])


def test_server_cli_and_client_never_show_a_key(
    tmp_path: Path, flownb_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flows = tmp_path / "flows"
    flows.mkdir()
    (flows / "blog-intro.json").write_bytes((FLOWS / "blog-intro.json").read_bytes())
    logs = tmp_path / "logs"
    texts: list[str] = []  # every body, header block and output we saw
    env = dict(os.environ)
    key = create_key(env, "secrets")
    revoked = create_key(env, "revoked")
    done = flownb_cli(["keys", "revoke", "revoked"], env)
    assert done.returncode == 0, done.stderr
    listing = flownb_cli(["keys", "list"], env)
    assert listing.returncode == 0 and "secrets" in listing.stdout, listing.stderr
    texts += [done.stdout, done.stderr, listing.stdout, listing.stderr]
    near_miss = key[:-3] + "abc"  # shares all but 3 characters with the real key
    secrets = {key, revoked, near_miss, OPENAI_KEY, key[4:], OPENAI_KEY[3:]}

    good = {"topic": "owls", "tone": "dry"}
    with FakeOpenAI(latency=0.001, fail_markers={"500": "BOOM"}) as fake:
        served_env = {
            **env,
            "OPENAI_BASE_URL": fake.url,
            "OPENAI_API_KEY": OPENAI_KEY,
            "FLOWNB_RETRIES": "1",  # the failing row gives up quickly
        }
        with serve(flows, served_env, logs, provider="openai", extra=["--log-level", "debug"]) as s:
            run_url = f"{s.url}/api/flows/run/blog-intro"
            info_url = f"{s.url}/api/flows/getFlowInfo/blog-intro"
            with httpx.Client(timeout=30) as http:
                answers = [
                    http.post(run_url, json={"variables": good}, headers={"x-api-key": key}),
                    http.post(  # a provider failure, whole and partial
                        run_url,
                        json={"variables": [good, {"topic": "BOOM", "tone": "x"}]},
                        headers={"x-api-key": key},
                    ),
                    http.get(info_url, headers={"x-api-key": near_miss}),
                    http.get(info_url, headers={"x-api-key": revoked}),
                    http.get(info_url, headers={"authorization": f"Bearer {key}"}),
                    http.get(f"{info_url}?api_key={key}"),
                    http.get(f"{info_url}?x-api-key={key}&key={key}"),
                    http.post(run_url, content=b"{oops", headers={"x-api-key": key}),
                ]  # fmt: skip
            statuses = [a.status_code for a in answers]
            # The last body is not JSON and says nothing of its type: 415 (issue 20).
            assert statuses == [200, 502, 401, 401, 401, 401, 401, 415], statuses
            texts += [a.text + "\n" + str(a.headers) for a in answers]

            # The Python client against the same server: results, then a refused key.
            client = flownb.Client(s.url, api_key=key)
            assert client.flow("blog-intro").run(good)["intro"].startswith("echo: ")
            texts.append(repr(client) + repr(client.flow("blog-intro")))
            with pytest.raises(flownb.AuthError) as refused:
                flownb.Client(s.url, api_key=near_miss).flow("blog-intro")
            texts.append(_exception_text(refused.value))

            # The CLI, remote: a refused key must not be printed back.
            remote_env = {**env, "FLOWNB_BASE_URL": s.url, "FLOWNB_API_KEY": near_miss}
            cli = flownb_cli(
                ["run", "blog-intro", "--var", "topic=a", "--var", "tone=b"], remote_env
            )
            assert cli.returncode != 0
            texts += [cli.stdout, cli.stderr]

    # An upstream that quotes the OpenAI key back: the server, the CLI and the Python API must
    # mask it in what they show.
    with echoing_upstream() as upstream:
        leaky_env = {**env, "OPENAI_BASE_URL": upstream, "OPENAI_API_KEY": OPENAI_KEY}
        with serve(flows, leaky_env, logs, provider="openai", extra=["--log-level", "debug"]) as s:
            r = httpx.post(
                f"{s.url}/api/flows/run/blog-intro",
                json={"variables": good},
                headers={"x-api-key": key},
                timeout=30,
            )
            assert r.status_code == 502, r.text
            texts.append(r.text)
        cli = flownb_cli(
            ["run", str(flows / "blog-intro.json"), "--provider", "openai",
             "--var", "topic=a", "--var", "tone=b"],
            leaky_env,
        )  # fmt: skip
        assert cli.returncode != 0 and "Incorrect API key" in cli.stderr, cli.stderr
        texts += [cli.stdout, cli.stderr]
        monkeypatch.setenv("OPENAI_BASE_URL", upstream)
        monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
        flow = flownb.load_flow(flows / "blog-intro.json", provider="openai")
        texts.append(repr(flow) + repr(flow.provider))
        with pytest.raises(flownb.ProviderError) as failed:
            flow.run(good)
        assert "Incorrect API key" in str(failed.value)
        texts.append(_exception_text(failed.value))

    assert "secrets" in listing.stdout and key[:8] in listing.stdout  # prefix shown, key not
    leaks = find_leaks(Exposure("secrets", secrets, [flownb_env, logs], texts))
    assert not leaks, "keys leaked:\n" + "\n".join(leaks)
    # The server's access log did record the requests (so "not in the log" means something).
    assert "getFlowInfo" in "".join(p.read_text() for p in logs.iterdir())


def test_committed_notebooks_hold_no_key() -> None:
    notebooks = sorted((ROOT / "notebooks").glob("*.ipynb"))
    assert notebooks, "no notebooks found"
    found = [
        f"{nb.name}: {m.group(0)[:8]}..."
        for nb in notebooks
        for m in KEY_SHAPES.finditer(nb.read_text(encoding="utf-8"))
    ]
    assert not found, f"key-shaped strings in committed notebooks: {found}"


def test_server_notebook_outputs_do_not_show_the_key_it_creates(
    tmp_path: Path, flownb_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Executes 04-server-and-client in a real kernel; probe cells (removed before the scan)
    read the key the notebook created and the server log it wrote, before its cleanup."""
    work = tmp_path / "notebooks"
    work.mkdir()
    for sub in ("flows", "data"):
        (work / sub).symlink_to(ROOT / "notebooks" / sub)
    nb = nbformat.read(ROOT / "notebooks" / "04-server-and-client.ipynb", as_version=4)
    create_at = next(
        i for i, c in enumerate(nb.cells) if c.cell_type == "code" and "create" in c.source
    )
    probe_key = nbformat.v4.new_code_cell('print("PROBE", os.environ["FLOWNB_API_KEY"])')
    probe_log = nbformat.v4.new_code_cell(
        'print("PROBE", (home / "serve.log").read_text(), sep="\\n")'
    )
    cells = list(nb.cells)
    nb.cells = [
        *cells[: create_at + 1],
        probe_key,
        *cells[create_at + 1 : -1],
        probe_log,
        cells[-1],
    ]
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)  # present in the kernel's environment
    with isolated(dict(os.environ)) as own:  # no IPython history or runtime folder shared
        for name in ("IPYTHONDIR", "JUPYTER_RUNTIME_DIR"):
            monkeypatch.setenv(name, own[name])
        client = NotebookClient(
            nb,
            timeout=90,
            startup_timeout=300,
            kernel_name="python3",
            resources={"metadata": {"path": str(work)}},
        )
        client.execute()

    def printed(cell: Any) -> str:
        return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")

    key = printed(probe_key).removeprefix("PROBE ").strip()
    server_log = printed(probe_log).removeprefix("PROBE").strip()
    assert key.startswith("fnb_"), f"the probe did not read a key: {key[:8]!r}"
    assert "POST /api/flows/run/" in server_log, "the probe did not read the server log"
    nb.cells = [c for c in nb.cells if c is not probe_key and c is not probe_log]
    outputs = nbformat.writes(nb)
    assert "Traceback" not in outputs, "the notebook raised an error"
    leaks = find_leaks(
        Exposure("notebook", {key, key[4:], OPENAI_KEY}, [flownb_env], [outputs, server_log])
    )
    assert not leaks, "keys leaked:\n" + "\n".join(leaks)


def test_what_the_other_reliability_suites_left_holds_no_key() -> None:
    exposures = recorded()
    if not exposures:
        pytest.skip("no other reliability suite ran in this session")
    leaks = [leak for e in exposures for leak in find_leaks(e)]
    assert not leaks, "keys leaked:\n" + "\n".join(leaks)
    scanned = sum(1 for e in exposures for p in e.paths if p.exists())
    assert scanned, "the registered folders and logs are gone: nothing was scanned"
