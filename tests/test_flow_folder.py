"""Issue 20, item 5: the server serves only regular files inside its flows folder (or symlinks
resolving inside it), a broken flow answers with its id and "see the server log" (the details
go to the log, never a string from the file to the caller), and a run body must be sent as JSON.

A real uvicorn server on 127.0.0.1 (``tests/serving.py``).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.conftest import make_flow, write_flow
from tests.serving import Running, run_server, sample_flows

pytestmark = pytest.mark.timeout(120)

SECRET = "SECRET_VALUE_123"


@pytest.fixture
def server(tmp_path: Path, flownb_env: Path) -> Iterator[Running]:
    flows = sample_flows(tmp_path)
    outside = tmp_path / "private"
    outside.mkdir()
    # A valid flow outside the folder, whose output name would show if it were served.
    write_flow(outside / "theirs.json", make_flow({SECRET: "x"}, []))
    (flows / "escape.json").symlink_to(outside / "theirs.json")
    (flows / "dots.json").symlink_to(Path("..") / "private" / "theirs.json")
    (flows / "zero.json").symlink_to("/dev/zero")
    os.mkfifo(flows / "fifo.json")
    (flows / "alias.json").symlink_to("echo.json")  # inside the folder: served
    broken = make_flow({"out": "x"}, [])
    broken["nodes"][0]["type"] = SECRET
    write_flow(flows / "broken.json", broken)
    with run_server(flows, flownb_env) as running:
        yield running


def describe(server: Running, flow_id: str) -> requests.Response:
    return requests.get(
        f"{server.url}/api/flows/getFlowInfo/{flow_id}",
        headers={"x-api-key": server.key},
        timeout=20,
    )


def test_only_regular_files_inside_the_folder_are_served(
    server: Running, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="flownb.server")
    for flow_id in ("escape", "dots", "zero", "fifo"):
        r = describe(server, flow_id)
        assert r.status_code == 404, (flow_id, r.text)
        assert r.json()["code"] == "flow_not_found" and SECRET not in r.text
    assert any("outside the flows folder" in r.getMessage() for r in caplog.records)
    assert any("not a regular file" in r.getMessage() for r in caplog.records)
    alias = describe(server, "alias")
    assert alias.status_code == 200 and alias.json() == describe(server, "echo").json()
    ids = server.config.store.ids()
    assert "alias" in ids and "echo" in ids and "broken" in ids
    assert not {"escape", "dots", "zero", "fifo"} & set(ids)


def test_a_broken_flow_answers_with_its_id_and_the_log_has_the_details(
    server: Running, caplog: pytest.LogCaptureFixture
) -> None:
    for r in (
        describe(server, "broken"),
        requests.post(
            f"{server.url}/api/flows/run/broken",
            json={"variables": {}},
            headers={"x-api-key": server.key},
            timeout=20,
        ),
    ):
        assert r.status_code == 500
        body = r.json()
        assert body["code"] == "internal_error"
        assert body["message"] == "flow 'broken' cannot be loaded; see the server log"
        assert SECRET not in r.text
    # Logged once per version of the file: when the server started and loaded the folder's
    # flows (the fixture's set-up: no request pays for a load), not again for either request.
    logged = [r.getMessage() for r in caplog.get_records("setup") if SECRET in r.getMessage()]
    assert len(logged) == 1 and "flow 'broken'" in logged[0]
    assert not [r for r in caplog.records if SECRET in r.getMessage()]


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
def test_a_body_not_sent_as_json_is_415(server: Running, content_type: str | None) -> None:
    headers = {"x-api-key": server.key}
    if content_type is not None:
        headers["content-type"] = content_type
    body = json.dumps({"variables": {"a": "1", "b": "2"}}).encode()
    r = requests.post(f"{server.url}/api/flows/run/echo", data=body, headers=headers, timeout=20)
    assert r.status_code == 415, r.text
    data = r.json()
    assert data["code"] == "unsupported_media_type"
    assert "Content-Type: application/json" in data["message"]
    # The same body as JSON runs; a charset parameter is fine.
    for ok_type in ("application/json", "application/json; charset=utf-8"):
        headers["content-type"] = ok_type
        r = requests.post(
            f"{server.url}/api/flows/run/echo", data=body, headers=headers, timeout=20
        )
        assert r.status_code == 200 and r.json()[0]["output"] == "A=1 B=2"
