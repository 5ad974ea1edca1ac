"""What of the Binder setup can be checked here: ``binder/requirements.txt`` is met by the
packages Binder's image layer holds (here, the test environment's), ``postBuild`` installs flownb
from a copy of the repository into a fresh virtual environment, and
``binder/start`` brings ``flownb serve`` up (with a key in the environment) and hands over to its
command with ``exec``."""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import textwrap
import time
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.serving import free_port

ROOT = Path(__file__).resolve().parent.parent
BINDER = ROOT / "binder"

pytestmark = pytest.mark.timeout(600)

_IGNORE = shutil.ignore_patterns(
    ".git",
    "__pycache__",
    "*.egg-info",
    "build",
    "dist",
    ".pytest_cache",
    ".ruff_cache",
    ".ipynb_checkpoints",
    ".venv",
    "venv",
    "node_modules",
    ".hypothesis",
    ".mypy_cache",
    "test-artifacts",
)


def _unmet(requirements: Path) -> list[str]:
    """Return the lines of pip requirements file ``requirements`` that the installed packages do
    not meet (each line must be a plain requirement or a comment)."""
    unmet = []
    for line in requirements.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        req = Requirement(line)  # raises on anything but a plain requirement (no pip options)
        if req.marker is not None and not req.marker.evaluate():
            continue
        try:
            version = importlib.metadata.version(req.name)
        except importlib.metadata.PackageNotFoundError:
            unmet.append(f"{line} (not installed)")
            continue
        if not req.specifier.contains(version, prereleases=True):
            unmet.append(f"{line} (installed: {version})")
    return unmet


@pytest.fixture(scope="module")
def binder_env(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A fresh venv where ``binder/postBuild`` ran, as on Binder, from a copy of the repository,
    without the network: the venv sees this test environment's packages (a ``.pth`` file, as
    Binder's image layer holds ``binder/requirements.txt`` already), pip may not reach an index,
    and flownb is built with the setuptools found there (no build isolation, which would
    download it). Returns (the copy, the venv's bin folder)."""
    base = tmp_path_factory.mktemp("binder")
    repo = base / "repo"
    shutil.copytree(ROOT, repo, ignore=_IGNORE)
    venv = base / "venv"
    # No pip of its own: ensurepip would install one (a third of this fixture's CPU), and with
    # it a seed setuptools that would shadow the locked one the build needs. The venv runs this
    # test environment's pip (seen through the .pth file below), into its own prefix.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    bin_dir = venv / "bin"
    python = str(bin_dir / "python")
    where = "import sysconfig; print(sysconfig.get_path('purelib'))"
    purelib = subprocess.run([python, "-c", where], capture_output=True, text=True, check=True)
    ours = sysconfig.get_path("purelib")
    (Path(purelib.stdout.strip()) / "flownb-test-env.pth").write_text(ours + "\n")
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "VIRTUAL_ENV": str(venv),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_NO_INDEX": "1",
        "PIP_NO_BUILD_ISOLATION": "0",  # pip reads this one inverted: 0 = --no-build-isolation
    }
    subprocess.run([str(repo / "binder" / "postBuild")], cwd=repo, check=True, env=env)
    return repo, bin_dir


def _end_group(pgid: int) -> None:
    """End the process group the start script ran in (its background server is in it)."""
    for sig in (signal.SIGINT, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, sig)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


def test_binder_files_are_in_place() -> None:
    assert os.access(BINDER / "start", os.X_OK) and os.access(BINDER / "postBuild", os.X_OK)
    assert (BINDER / "start").read_text().rstrip().endswith('exec "$@"')
    assert (BINDER / "runtime.txt").read_text().strip() == "python-3.11"


def test_the_requirements_are_met_by_the_image_layer() -> None:
    # What ``pip install -r binder/requirements.txt`` does here, without the index and with
    # every package already in the layer: check each line against what is installed (a pip
    # process for it cost about 3.5 CPU-s).
    assert _unmet(BINDER / "requirements.txt") == []


def test_postbuild_installs_flownb_from_the_repository(binder_env: tuple[Path, Path]) -> None:
    _, bin_dir = binder_env
    code = "import flownb, sys; print(flownb.__file__); print(flownb.__version__)"
    out = subprocess.run(
        [str(bin_dir / "python"), "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
    ).stdout.split()
    # Imported from the venv's own site-packages, not from the system's editable install.
    assert out[0].startswith(str(bin_dir.parent)) and out[0].endswith("flownb/__init__.py")
    assert (bin_dir / "flownb").exists()  # the console script


def test_start_serves_the_flows_and_execs_its_command(
    binder_env: tuple[Path, Path], tmp_path: Path
) -> None:
    repo, bin_dir = binder_env
    port = free_port()
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLOWNB_", "OPENAI_"))}
    env.update(
        {"PATH": f"{bin_dir}{os.pathsep}{env['PATH']}", "HOME": str(home), "FLOWNB_PORT": str(port)}
    )
    probe = textwrap.dedent(
        """
        import os, sys
        import flownb
        print("pid", os.getpid())
        print("args", sys.argv[1:])
        print("base", os.environ["FLOWNB_BASE_URL"])
        print("key", bool(os.environ.get("FLOWNB_API_KEY")))
        remote = flownb.Client().flow("blog-intro")
        print("intro", remote.run(topic="kelp", tone="calm")["intro"])
        """
    )
    proc = subprocess.Popen(
        [str(repo / "binder" / "start"), str(bin_dir / "python"), "-c", probe, "two words"],
        cwd=repo,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        _end_group(proc.pid)
    assert proc.returncode == 0, err + (home / ".flownb" / "serve.log").read_text()
    lines = dict(line.split(" ", 1) for line in out.splitlines())
    assert lines["pid"] == str(proc.pid)  # exec: the command replaced the script's process
    assert lines["args"] == "['two words']"
    assert lines["base"] == f"http://127.0.0.1:{port}"
    assert lines["key"] == "True"
    assert lines["intro"] == "Write a calm two-sentence intro for a blog post about kelp."
    assert (home / ".flownb" / "serve.pid").read_text().strip().isdigit()
    assert "listening on" in (home / ".flownb" / "serve.log").read_text()
