"""schemathesis against a running server's ``/openapi.json``: no 5xx, no undocumented status, no
response that breaks its documented schema or headers, negative data rejected, auth enforced.

Two bounded runs with a fixed seed: flow ids as generated (mostly unknown ids, bad characters,
path tricks) and the flow id pinned to a real flow so bodies reach validation and the engine.
``positive_data_acceptance`` is left out: the body schema cannot know each flow's variables, so a
schema-valid body for the wrong variables is rightly answered 422.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.serving import Running, run_server, sample_flows

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    root = tmp_path_factory.mktemp("schemathesis")
    flows = sample_flows(root)
    with run_server(flows, root / "home", max_batch=20) as running:
        yield running


def _schemathesis(server: Running, tmp_path: Path, config: str = "") -> None:
    config_file = tmp_path / "schemathesis.toml"
    config_file.write_text(config, encoding="utf-8")
    done = subprocess.run(
        [
            sys.executable, "-m", "schemathesis.cli", "--config-file", str(config_file), "run",
            f"{server.url}/openapi.json",
            "--header", f"x-api-key: {server.key}",
            "--checks", "all", "--exclude-checks", "positive_data_acceptance",
            "--max-examples", "25", "--seed", "20261122", "--workers", "1",
        ],
        capture_output=True, text=True, timeout=220, check=False, cwd=tmp_path,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    assert " passed" in output


def test_generated_flow_ids(server: Running, tmp_path: Path) -> None:
    _schemathesis(server, tmp_path)


def test_real_flow_id(server: Running, tmp_path: Path) -> None:
    _schemathesis(server, tmp_path, '[parameters]\n"path.flow_id" = "echo"\n')
