"""``import flownb`` and ``flownb --help`` stay cheap: checked in fresh interpreters, where what a
test session imported before cannot hide an eager import."""

from __future__ import annotations

import json
import subprocess
import sys

import flownb

HEAVY = ("pandas", "aiohttp", "opentelemetry", "requests", "pydantic", "tenacity", "genai_prices")


def _imported_after(code: str) -> list[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    return [m for m in json.loads(out.stdout.splitlines()[-1]) if m.split(".")[0] in HEAVY]


def test_import_flownb_imports_none_of_the_heavy_packages() -> None:
    assert _imported_after("import flownb") == []


def test_flownb_help_imports_none_of_the_heavy_packages() -> None:
    code = (
        "import sys\nfrom flownb.cli.main import cli\n"
        "try:\n    cli.main(['--help'], standalone_mode=False)\nexcept SystemExit:\n    pass"
    )
    assert _imported_after(code) == []


def test_the_public_api_is_still_all_there() -> None:
    """Every name of ``__all__`` resolves (imported on first use) and ``dir`` shows exactly it."""
    assert dir(flownb) == sorted(flownb.__all__)
    for name in flownb.__all__:
        assert getattr(flownb, name) is not None, name
    assert flownb.batches is flownb.frames.batch_api.list_batches
