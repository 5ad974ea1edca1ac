"""``import flownb`` and ``flownb --help`` stay cheap: checked in fresh interpreters, where what a
test session imported before cannot hide an eager import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import flownb
from tests.conftest import make_flow, write_flow

HEAVY = ("pandas", "aiohttp", "opentelemetry", "requests", "pydantic", "tenacity", "genai_prices")


def _imported_after(
    code: str, heavy: tuple[str, ...] = HEAVY, env: dict[str, str] | None = None
) -> list[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env=env,
    )
    return [m for m in json.loads(out.stdout.splitlines()[-1]) if m.split(".")[0] in heavy]


def test_import_flownb_imports_none_of_the_heavy_packages() -> None:
    assert _imported_after("import flownb") == []


def test_flownb_help_imports_none_of_the_heavy_packages() -> None:
    code = (
        "import sys\nfrom flownb.cli.main import cli\n"
        "try:\n    cli.main(['--help'], standalone_mode=False)\nexcept SystemExit:\n    pass"
    )
    assert _imported_after(code) == []


def test_flownb_help_through_the_console_script_imports_no_more_than_import_flownb() -> None:
    # What `flownb --help` runs (the console script's entry): the kept help text, with neither
    # click nor any command module, nor the settings (see tests/test_cli_help.py).
    code = (
        "from flownb.cli.entry import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass"
    )
    heavy = (*HEAVY, "click", "flownb.cli.main", "flownb.config.settings", "flownb.cli.inputs")
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    loaded = json.loads(out.stdout.splitlines()[-1])
    assert [m for m in loaded if m in heavy or m.split(".")[0] in heavy] == []
    assert out.stdout.startswith("Usage: flownb [OPTIONS] COMMAND [ARGS]...")


def test_a_one_row_text_run_imports_neither_pandas_nor_pillow(tmp_path: Path) -> None:
    """``flownb run FLOW --var ...`` makes no frame (only ``--out`` does) and draws no image:
    pandas and Pillow are most of a cold start, so they are left unimported."""
    flow = write_flow(tmp_path / "f.json", make_flow({"said": "About {topic}."}, ["topic"]))
    code = (
        "from flownb.cli.main import cli\n"
        f"args = ['run', {str(flow)!r}, '--var', 'topic=owls']\n"
        "try:\n    cli.main(args, standalone_mode=False)\n"
        "except SystemExit:\n    pass"
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("FLOWNB_", "OPENAI_"))},
        "FLOWNB_HOME": str(tmp_path / "home"),
        "FLOWNB_PROVIDER": "offline",
    }
    assert _imported_after(code, ("pandas", "PIL", "numpy"), env) == []
    # The probe sees a real run: with --out, the same command does import pandas.
    out = tmp_path / "out.csv"
    with_out = code.replace("'topic=owls'", f"'topic=owls', '--out', {str(out)!r}")
    assert "pandas" in _imported_after(with_out, ("pandas",), env)
    assert "About owls." in out.read_text(encoding="utf-8")


def test_the_public_api_is_still_all_there() -> None:
    """Every name of ``__all__`` resolves (imported on first use) and ``dir`` shows exactly it."""
    assert dir(flownb) == sorted(flownb.__all__)
    for name in flownb.__all__:
        assert getattr(flownb, name) is not None, name
    assert flownb.batches is flownb.frames.batch_api.list_batches
