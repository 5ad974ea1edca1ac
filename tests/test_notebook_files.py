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
