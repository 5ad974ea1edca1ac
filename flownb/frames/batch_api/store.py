"""Provider batches remembered in ``FLOWNB_HOME/batches/``: one JSON file per batch, written the
moment the batch is created, so whatever process asks for the same calls next (a new kernel, the
next day) picks the batch up instead of submitting it again.

A record is first written *before* the provider is asked to create the batch (status
``submitting``, with the digest of its lines), then replaced by the batch's own record when the
provider answers: a process killed in between leaves the first one, and the next run finds the
batch at the provider by that digest instead of submitting it again.

A record holds what the batch asks for (the cache key of every request, which is also the
request's ``custom_id``), where it went (provider, base URL, endpoint, model), what the API last
said of it, and, once its results were read into the cache, which requests failed and why.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from ...errors import ConfigError
from ...infra.private import private_dir

__all__ = [
    "BATCHES_DIR",
    "SUBMITTING",
    "BatchRecord",
    "delete_record",
    "load_records",
    "save_record",
]

BATCHES_DIR = "batches"
SCHEMA_VERSION = 1
# The status of a record written before the provider is asked to create its batch.
SUBMITTING = "submitting"


class BatchRecord(BaseModel):
    """One submitted batch (see the module docstring)."""

    version: int = SCHEMA_VERSION
    id: str
    provider: str
    base_url: str
    endpoint: str
    model: str
    flow: str = ""
    created: float = Field(default_factory=time.time)
    status: str = "validating"
    total: int = 0
    completed: int = 0
    failed: int = 0
    keys: list[str]
    collected: bool = False  # its results were read into the cache
    failures: dict[str, str] = Field(default_factory=dict)  # key -> why it has no answer
    cancelled: bool = False
    # What the batch's lines hash to (SHA-256 of the JSONL), sent with it where the API keeps
    # metadata: a crash between asking for the batch and hearing its id is recovered by it.
    digest: str = ""
    # Set while the batch is being created (status SUBMITTING, id "pending-..."): which process
    # on which host is asking, so another process can tell a live submission from a dead one.
    pid: int = 0
    host: str = ""
    # Whether the run log has shown its answers as paid calls (records made before the run log
    # learnt of batches: True, so their answers are not counted twice).
    logged: bool = True


def _folder(home: Path) -> Path:
    return Path(home) / BATCHES_DIR


def save_record(record: BatchRecord, home: Path) -> None:
    """Write ``record`` to ``home/batches/<id>.json`` atomically (a crash leaves the old one).

    Raises:
        ConfigError: the folder cannot be written (names it, and what to do).
    """
    folder = _folder(home)
    path = folder / f"{record.id}.json"
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    try:
        private_dir(folder, home)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(record.model_dump_json())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise ConfigError(
            f"cannot record provider batch {record.id} in {folder} ({exc.strerror or exc}); "
            "make that folder writable or set FLOWNB_HOME to one that is. The batch itself is "
            "submitted: `flownb batches` on a writable home will not see it"
        ) from exc


def delete_record(record: BatchRecord, home: Path) -> None:
    """Remove ``record``'s file (gone already: nothing to do)."""
    with contextlib.suppress(FileNotFoundError):
        (_folder(home) / f"{record.id}.json").unlink()


def load_records(home: Path) -> list[BatchRecord]:
    """Return every remembered batch, oldest first; unreadable files are skipped."""
    folder = _folder(home)
    if not folder.is_dir():
        return []
    records = []
    for path in folder.glob("*.json"):
        try:
            records.append(BatchRecord.model_validate_json(path.read_bytes()))
        except (OSError, ValidationError):
            continue  # a file someone else put there, or half a write from an old crash
    return sorted(records, key=lambda r: r.created)
