"""API keys: the key store, the ``flownb keys`` commands as a user runs them, and a running server
seeing keys created and revoked without a restart."""

from __future__ import annotations

import hashlib
import json
import stat
import time
from pathlib import Path

import pytest
import requests

from flownb.errors import ConfigError
from flownb.server import KeyStore
from flownb.server.keys import KEY_PREFIX
from tests.cli_inprocess import CliResult, run_cli
from tests.conftest import make_flow, write_flow
from tests.serving import run_server

pytestmark = pytest.mark.timeout(60)


def _cli(*args: str, home: Path) -> CliResult:
    return run_cli(*args, env={"FLOWNB_HOME": str(home)})


def test_keys_are_prefixed_high_entropy_and_stored_as_digests_only(tmp_path: Path) -> None:
    store = KeyStore(tmp_path)
    keys = {store.create(f"k{i}") for i in range(5)}
    assert len(keys) == 5
    for key in keys:
        assert key.startswith(KEY_PREFIX) and len(key) >= 40
    text = store.path.read_text()
    data = json.loads(text)
    digests = {r["digest"] for r in data["keys"]}
    assert digests == {hashlib.sha256(k.encode()).hexdigest() for k in keys}
    for key in keys:
        assert key not in text and key[len(KEY_PREFIX) + 8 :] not in text
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600


def test_check_accepts_active_keys_and_refuses_the_rest(tmp_path: Path) -> None:
    store = KeyStore(tmp_path)
    assert store.check(None).code == "missing_api_key"
    assert "flownb keys create" in store.check("x").message  # no keys at all yet
    key = store.create("laptop")
    assert store.check(key).ok and store.check(key).name == "laptop"
    assert store.check(key + "x").code == "invalid_api_key"
    assert store.check(key[:-1]).code == "invalid_api_key"
    assert store.check("").code == "missing_api_key"
    store.revoke("laptop")
    verdict = store.check(key)
    assert not verdict.ok and verdict.code == "invalid_api_key" and "revoked" in verdict.message


def test_revoke_by_name_or_prefix(tmp_path: Path) -> None:
    store = KeyStore(tmp_path)
    a = store.create("a")
    store.create("b")
    with pytest.raises(ConfigError, match="active key named 'a'"):
        store.create("a")
    [revoked] = store.revoke(a[:12])
    assert revoked.name == "a"
    with pytest.raises(ConfigError, match="no active key"):
        store.revoke("a")
    store.create("c")
    # The name is free again once revoked.
    store.create("a")
    assert [r.name for r in store.load() if r.active] == ["b", "c", "a"]


def test_revoke_with_a_too_short_prefix_matches_nothing(tmp_path: Path) -> None:
    store = KeyStore(tmp_path)
    store.create("only")
    with pytest.raises(ConfigError, match="no active key"):
        store.revoke("fnb")


def test_last_used_is_recorded(tmp_path: Path) -> None:
    store = KeyStore(tmp_path)
    key = store.create("ci")
    assert store.load()[0].last_used is None
    assert store.check(key).ok
    store.flush_used()
    assert store.load()[0].last_used is not None
    assert key not in store.used_path.read_text()


def test_cli_key_lifecycle(tmp_path: Path) -> None:
    home = tmp_path / "home"
    created = _cli("keys", "create", "--name", "ci", home=home)
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    assert created.stdout == key + "\n"  # the key alone on stdout
    assert key.startswith(KEY_PREFIX)
    assert "shown only now" in created.stderr and key not in created.stderr

    listed = _cli("keys", "list", home=home)
    assert listed.returncode == 0
    assert "ci" in listed.stdout and key[:12] in listed.stdout and key not in listed.stdout
    assert "never" in listed.stdout  # not used yet

    again = _cli("keys", "create", "--name", "ci", home=home)
    assert again.returncode == 2 and "exists" in again.stderr

    revoked = _cli("keys", "revoke", "ci", home=home)
    assert revoked.returncode == 0, revoked.stderr
    listed = _cli("keys", "list", home=home)
    row = next(line for line in listed.stdout.splitlines() if line.startswith("ci"))
    assert row.split()[-1] != "-"  # a revocation time

    missing = _cli("keys", "revoke", "ci", home=home)
    assert missing.returncode == 2 and "no active key" in missing.stderr


def test_running_server_sees_keys_created_and_revoked_by_the_cli(tmp_path: Path) -> None:
    flows = tmp_path / "flows"
    flows.mkdir()
    write_flow(flows / "echo.json", make_flow({"say": "{a}"}, ["a"]))
    home = tmp_path / "home"
    with run_server(flows, home, create_key=False) as server:
        url = f"{server.url}/api/flows/getFlowInfo/echo"
        refused = requests.get(url, timeout=10)
        assert refused.status_code == 401
        assert "flownb keys create --name" in refused.json()["message"]

        key = _cli("keys", "create", "--name", "late", home=home).stdout.strip()
        assert requests.get(url, headers={"x-api-key": key}, timeout=10).status_code == 200

        assert _cli("keys", "revoke", "late", home=home).returncode == 0
        # Refused once the server next looks at the key file (about a second); the deadline
        # only stops a server that never does.
        deadline = time.monotonic() + 30
        resp = requests.get(url, headers={"x-api-key": key}, timeout=10)
        while resp.status_code == 200 and time.monotonic() < deadline:
            time.sleep(0.05)
            resp = requests.get(url, headers={"x-api-key": key}, timeout=10)
        assert resp.status_code == 401 and resp.json()["code"] == "invalid_api_key"
