"""The committed demo notebooks: all there, executed top to bottom with their outputs saved (so
nbval has something to compare), free of errors and secrets. nbval itself re-runs them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
NAMES = [
    "01-quickstart.ipynb",
    "02-batch-evaluation.ipynb",
    "03-forms-and-magics.ipynb",
    "04-server-and-client.ipynb",
    "05-evaluation.ipynb",
    "06-scale-out.ipynb",
    "07-vendors.ipynb",
    "08-batch-api.ipynb",
]
# An API key from `flownb keys create` or an OpenAI key; a few leading characters are fine.
SECRET = re.compile(r"\b(fnb_[A-Za-z0-9_-]{8,}|sk-[A-Za-z0-9_-]{16,})")


def test_the_demo_notebooks_exist() -> None:
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_notebook_was_run_in_order_with_outputs_and_no_errors(name: str) -> None:
    nb = json.loads((NOTEBOOKS / name).read_text(encoding="utf-8"))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    counts = [c["execution_count"] for c in code]
    assert counts == list(range(1, len(code) + 1)), "run it top to bottom in a fresh kernel"
    assert sum(bool(c["outputs"]) for c in code) >= len(code) // 2
    errors = [o for c in code for o in c["outputs"] if o["output_type"] == "error"]
    assert not errors
    stderr = [o["text"] for c in code for o in c["outputs"] if o.get("name") == "stderr"]
    assert not stderr
    assert nb["metadata"]["kernelspec"]["name"] == "python3"


@pytest.mark.parametrize("name", NAMES)
def test_no_keys_in_notebooks(name: str) -> None:
    text = (NOTEBOOKS / name).read_text(encoding="utf-8")
    assert not SECRET.search(text)
    assert "FLOWNB_API_KEY=" not in text


# Where a machine keeps its files: temporary folders (Linux, macOS, Windows), file URLs, homes.
MACHINE_PATHS = re.compile(
    r"/tmp/|file://|/var/folders/|/home/[^/\s]+/|/Users/|/root/|[A-Za-z]:\\Users\\|\\Temp\\"
)
EMBEDDED = re.compile(r"data:image/[a-z+.-]+;base64,[A-Za-z0-9+/=]+")


def _strings(value: object) -> list[str]:
    """Every string inside a notebook's JSON, keys included, in document order."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _saved_text(path: Path) -> str:
    """Every text a saved notebook holds (sources, outputs, metadata), but embedded image bytes
    (base64, in which any short word may occur by chance)."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        for output in cell.get("outputs", []):
            for kind in list(output.get("data", {})):
                if kind.startswith("image/"):
                    del output["data"][kind]
    return EMBEDDED.sub("DATA", "\n".join(_strings(nb)))


def _host_named(text: str, host: str) -> bool:
    return re.search(rf"(?<![\w.-]){re.escape(host)}(?![\w-])", text) is not None


SAVED = sorted(
    [*(NOTEBOOKS.glob("*.ipynb")), *(NOTEBOOKS.parent / "docs").rglob("*.ipynb")],
    key=lambda p: p.name,
)


@pytest.mark.parametrize("path", SAVED, ids=[p.name for p in SAVED])
def test_saved_notebooks_name_no_path_or_host_of_the_machine_that_ran_them(path: Path) -> None:
    # A saved notebook is read elsewhere: an image reads as its size and digest, never as the
    # file its author's run left in a temporary FLOWNB_HOME.
    import socket

    text = _saved_text(path)
    found = MACHINE_PATHS.search(text)
    assert found is None, text[max(0, found.start() - 80) : found.end() + 80]
    assert str(Path.home()) + "/" not in text
    assert not _host_named(text, socket.gethostname())


def test_the_machine_path_check_finds_what_it_looks_for(tmp_path: Path) -> None:
    nb = json.loads((NOTEBOOKS / NAMES[0]).read_text(encoding="utf-8"))
    leaks = [
        "[image] file:///tmp/x/a.png",
        "/home/ana/x.png",
        "/Users/ana/x.png",
        "C:\\Users\\ana\\x.png",
        "/var/folders/q1/T/a.png",
    ]
    for leak in leaks:
        output = {"output_type": "stream", "name": "stdout", "text": [f"saved: {leak}\n"]}
        nb["cells"][-1]["outputs"] = [output]
        dirty = tmp_path / "dirty.ipynb"
        dirty.write_text(json.dumps(nb), encoding="utf-8")
        assert MACHINE_PATHS.search(_saved_text(dirty)), leak
    assert _host_named("served by build-07 at noon", "build-07")
    assert not _host_named("served by build-070", "build-07")
    assert not _host_named("avm", "vm")


PARAMETERS = ("flow_file", "data_file", "provider", "rows")


def _parameters(nb: dict) -> tuple[int, dict]:
    """Return the position and the cell of the notebook's one ``parameters``-tagged cell."""
    tagged = [
        (i, c)
        for i, c in enumerate(nb["cells"])
        if "parameters" in c.get("metadata", {}).get("tags", [])
    ]
    assert len(tagged) == 1, "one cell tagged parameters (papermill's -p targets it)"
    return tagged[0]


@pytest.mark.parametrize("name", NAMES)
def test_each_notebook_has_a_parameters_cell_the_rest_uses(name: str) -> None:
    import ast

    nb = json.loads((NOTEBOOKS / name).read_text(encoding="utf-8"))
    at, cell = _parameters(nb)
    source = "".join(cell["source"])
    assigned = {
        t.id
        for node in ast.parse(source).body
        if isinstance(node, ast.Assign)
        for t in node.targets
        if isinstance(t, ast.Name)
    }
    assert assigned == set(PARAMETERS)
    before = [c for c in nb["cells"][:at] if c["cell_type"] == "code"]
    assert not before, "the parameters come before any code (papermill injects after them)"
    later = "".join("".join(c["source"]) for c in nb["cells"][at + 1 :] if c["cell_type"] == "code")
    # Each parameter reaches the notebook's flow or data, or its cell says it is not used
    # (07 compares three vendors; one set of parameters serves every notebook).
    for name_ in PARAMETERS:
        used = re.search(rf"\b{name_}\b", later) is not None
        said = re.search(rf"^{name_} = .*# not used by this notebook", source, re.M) is not None
        assert used or said, f"{name_} is neither used nor said to be unused"
    assert re.search(r"\bflow_file\b", later)


def test_injected_parameters_drive_a_notebook(tmp_path: Path) -> None:
    # What papermill -p does: a cell after the parameters cell with the new values; the
    # notebook then runs over 2 rows of another data file, through nbclient in a real kernel.
    import shutil

    import nbformat
    from nbclient import NotebookClient

    from tests.kernels import isolated

    for part in ("flows", "data"):
        shutil.copytree(NOTEBOOKS / part, tmp_path / part)
    (tmp_path / "data" / "few.csv").write_text(
        "topic,tone\nkelp,calm\nmoss,dry\nlichen,wry\n", encoding="utf-8"
    )
    nb = nbformat.read(NOTEBOOKS / "02-batch-evaluation.ipynb", as_version=4)
    at, _ = _parameters(json.loads((NOTEBOOKS / "02-batch-evaluation.ipynb").read_text()))
    injected = nbformat.v4.new_code_cell('data_file = "data/few.csv"\nrows = 2')
    injected.metadata["tags"] = ["injected-parameters"]
    cells = [*nb.cells[: at + 1], injected]
    # Up to the run over the data: the rest of the notebook works on frames of its own.
    for cell in nb.cells[at + 1 :]:
        cells.append(cell)
        if "flow.run_dataframe(topics)" in cell.source:
            break
    nb.cells = cells
    import os

    with isolated(dict(os.environ)) as env:
        env["FLOWNB_HOME"] = str(tmp_path / "home")
        client = NotebookClient(
            nb, timeout=180, startup_timeout=300, resources={"metadata": {"path": str(tmp_path)}}
        )
        previous = dict(os.environ)
        os.environ.update(env)
        try:
            client.execute()
        finally:
            os.environ.clear()
            os.environ.update(previous)
    shown = "".join(o.get("data", {}).get("text/plain", "") for o in nb.cells[-1].outputs)
    assert "kelp" in shown and "moss" in shown and "lichen" not in shown, shown
