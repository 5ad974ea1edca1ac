"""An evaluation logged to MLflow (``pip install flownb[mlflow]``): one run per variant with
its set-up as parameters, its summary figures as metrics, and its results and the HTML report
as artifacts. MLflow is imported only here, when asked for; where the runs go is MLflow's own
choice (``mlflow.set_tracking_uri`` or ``MLFLOW_TRACKING_URI``): nothing else is contacted.
With neither, MLflow 3 uses ``sqlite:///mlflow.db`` in the working folder, which the ``mlflow``
extra makes work (it brings sqlalchemy and alembic, which ``mlflow-skinny`` leaves out).
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

from ...errors import ConfigError

if TYPE_CHECKING:
    from ..record.shape import ReportView

__all__ = ["to_mlflow"]

# MLflow keeps a parameter's value up to this many characters; longer prompts are cut there
# (and kept whole in the run's prompts.json artifact).
_PARAM_CHARS = 6000
_UNSAFE = re.compile(r"[^0-9A-Za-z_\-. /]")


def _key(name: str) -> str:
    """Return ``name`` as an MLflow key (letters, digits, ``_ - . /`` and spaces)."""
    return _UNSAFE.sub("_", name)[:250]


def _params(report: ReportView, variant: str) -> dict[str, str]:
    params = {
        "flownb.evaluation": report.id,
        "flownb.variant": variant,
        "rows": str(len(report.results) // max(len(report.variants), 1)),
        "scorers": ",".join(s.name for s in report.scorers),
    }
    for key, value in report.variant_params.get(variant, {}).items():
        params[_key(key)] = value if len(value) <= _PARAM_CHARS else value[: _PARAM_CHARS - 1] + "…"
    return params


def _metrics(report: ReportView, variant: str) -> dict[str, float]:
    """Return every finite number of the variant's summary row (means, pass rates, intervals,
    p-values, latency, tokens, cost and label counts where the summary has them)."""
    row = report.summary.loc[variant]
    found = {}
    for name, value in row.items():
        if isinstance(value, bool) or value is None:
            continue
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        if math.isfinite(number):
            found[_key(str(name))] = number
    return found


def _mlflow() -> Any:
    try:
        import mlflow
    except ImportError:
        raise ConfigError("report.to_mlflow() needs MLflow: pip install flownb[mlflow]") from None
    return mlflow


def _why(exc: Exception) -> str:
    text = str(exc)
    if "MLFLOW_ALLOW_FILE_STORE" in text:
        return (
            "this MLflow refuses a file store (file: or a folder) unless MLFLOW_ALLOW_FILE_STORE"
            "=true is set; set it, or use another tracking URI"
        )
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


def to_mlflow(report: ReportView, experiment: str | None = None) -> dict[str, str]:
    """Log ``report`` to MLflow: one run per variant (named after it, tagged with the
    evaluation's id) in ``experiment`` (created when missing; default: MLflow's active
    experiment), with parameters, metrics, and the artifacts ``results.csv`` (the variant's
    rows), ``prompts.json`` (its whole set-up) and ``report.html`` (the whole report, one
    self-contained file). A run already active becomes their parent. Returns variant -> run id.

    Raises:
        ConfigError: MLflow is not installed, or cannot log where it is pointed.
    """
    import orjson

    from ..html.report import page_html

    mlflow = _mlflow()
    try:
        experiment_id = None
        if experiment is not None:
            client = mlflow.MlflowClient()
            found = client.get_experiment_by_name(experiment)
            experiment_id = (
                found.experiment_id if found is not None else client.create_experiment(experiment)
            )
        page = page_html(report)
        runs: dict[str, str] = {}
        for variant in report.variants:
            rows = report.results[report.results["variant"] == variant]
            with mlflow.start_run(
                experiment_id=experiment_id,
                run_name=variant,
                nested=mlflow.active_run() is not None,
                tags={"flownb.evaluation": report.id, "flownb.variant": variant},
            ) as run:
                mlflow.log_params(_params(report, variant))
                mlflow.log_metrics(_metrics(report, variant))
                mlflow.log_text(rows.to_csv(index=False), "results.csv")
                setup = report.variant_params.get(variant, {})
                mlflow.log_text(
                    orjson.dumps(setup, option=orjson.OPT_INDENT_2).decode(), "prompts.json"
                )
                mlflow.log_text(page, "report.html")
                runs[variant] = run.info.run_id
    except ConfigError:
        raise
    except Exception as exc:  # MLflow's store or server refused: one line, not its traceback
        raise ConfigError(f"MLflow could not log the evaluation: {_why(exc)}") from exc
    return runs
