"""The provider batches remembered in ``FLOWNB_HOME``: list them (refreshing their state from
the provider), and cancel one. ``flownb.batches()`` and ``flownb batches`` are these."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING

from ...config.settings import RunConfig, resolve_run_config
from ...errors import ConfigError
from ...providers.base import FINAL_STATES, BatchAPI
from ...providers.registry import make_provider
from .store import SUBMITTING, BatchRecord, load_records, save_record

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["cancel_batch", "list_batches"]

COLUMNS = [
    "id", "flow", "provider", "model", "requests", "status", "completed", "failed", "collected",
    "created",
]  # fmt: skip


def _api(record: BatchRecord, config: RunConfig) -> BatchAPI | None:
    """Return the batch API the record's batch lives on, when this process is set up for it."""
    try:
        api = make_provider(config, name=record.provider).batch_api()
    except ConfigError:
        return None
    return api if api is not None and api.base_url == record.base_url else None


def list_batches(*, home: str | Path | None = None, refresh: bool = False) -> pd.DataFrame:
    """Return one row per remembered provider batch, newest first: id, flow, provider, model,
    requests, status, completed, failed, collected (its answers are in the cache), created.
    ``refresh=True`` asks the provider for the state of those that have not ended (where this
    process is set up for their endpoint).

    Raises:
        ProviderError: refreshing, the provider could not be asked.
    """
    import pandas as pd

    config = resolve_run_config(home=home)
    records = load_records(config.home)
    if refresh:
        for record in records:
            if record.collected or record.status in (*FINAL_STATES, SUBMITTING):
                continue  # ended, or not created yet (the next run looks for it by its digest)
            api = _api(record, config)
            if api is not None:
                state = api.status(record.id)
                record.status, record.completed, record.failed = (
                    state.status,
                    state.completed,
                    state.failed,
                )
                save_record(record, config.home)
    rows = [
        {
            "id": r.id,
            "flow": r.flow,
            "provider": r.provider,
            "model": r.model,
            "requests": len(r.keys),
            "status": r.status,
            "completed": r.completed,
            "failed": r.failed,
            "collected": r.collected,
            "created": dt.datetime.fromtimestamp(r.created).isoformat(timespec="seconds"),
        }
        for r in reversed(records)
    ]
    return pd.DataFrame(rows, columns=COLUMNS)


def cancel_batch(batch_id: str, *, home: str | Path | None = None) -> str:
    """Ask the provider to cancel a remembered batch; returns its new status. What it finished
    before stopping is still read into the cache by the next run that needs it.

    Raises:
        ConfigError: no remembered batch has that id, or this process cannot reach its endpoint.
        ProviderError: the provider refused.
    """
    config = resolve_run_config(home=home)
    found = [r for r in load_records(config.home) if r.id == batch_id]
    if not found:
        raise ConfigError(f"no provider batch {batch_id!r} in {config.home} (see flownb batches)")
    record = found[0]
    if record.status == SUBMITTING:
        raise ConfigError(
            f"{batch_id} is a batch being submitted, with no provider id yet; the next run "
            "of its frame finds it at the provider (or submits it), then it can be cancelled"
        )
    api = _api(record, config)
    if api is None:
        raise ConfigError(
            f"batch {batch_id} lives at {record.base_url} ({record.provider}); set this process "
            "up for that endpoint (its base URL and key) to cancel it"
        )
    state = api.cancel(batch_id)
    record.status, record.cancelled = state.status, True
    save_record(record, config.home)
    return state.status
