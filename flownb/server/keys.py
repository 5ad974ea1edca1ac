"""API keys for ``flownb serve``: created, listed and revoked by the CLI, checked by the server.

Keys live in ``FLOWNB_HOME/keys.json`` as SHA-256 digests only: the key itself is shown once, when
it is created, and never stored. The server re-reads the file when it changes on disk, looking
at it (one ``stat``) at most every :data:`RECHECK_EVERY` seconds, and at once for a key it does
not know: a key created while it runs is accepted on its first request, a revoked one refused
within a second. When a key was last used is
kept in a separate file (``keys-used.json``) that only servers write, so a server never rewrites
the file the CLI edits.

A key may carry a spend cap (``flownb keys create --max-spend 20``, or ``flownb keys cap NAME
20``; ``max_spend`` in US dollars). What each capped key has spent is kept in
``keys-spent.json``, written by the server as each call settles (not batched: a server killed
and restarted must not find room that was already paid for), so the cap holds across restarts.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import math
import os
import secrets
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..infra.private import private_dir
from ..infra.writable import unwritable

try:  # POSIX: serialise writers; elsewhere atomic replace alone has to do.
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["KEY_PREFIX", "KeyRecord", "KeyStore", "Verdict"]

KEY_PREFIX = "fnb_"
# How much of the key is stored and shown so a user can tell keys apart: "fnb_" + 8 characters.
SHOWN = len(KEY_PREFIX) + 8
# How often a running server writes last-used times (seconds): not on every request, and at most
# this stale in `flownb keys list` (it also writes them when it stops).
FLUSH_EVERY = 30.0
# How often a running server looks whether the key file changed (seconds): not on every request
# (a stat per request was a measurable share of the server's time), and an unknown key looks at
# once, so only a revocation waits for it.
RECHECK_EVERY = 1.0


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def digest(key: str) -> str:
    """Return the hex SHA-256 digest under which ``key`` is stored."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(slots=True)
class KeyRecord:
    """One key as stored: never the key itself, only its digest and the first characters."""

    name: str
    prefix: str
    digest: str
    created: str
    revoked: str | None = None
    last_used: str | None = None
    max_spend: float | None = None  # US dollars this key may spend in all (None: no cap)

    @property
    def active(self) -> bool:
        """Whether the key is accepted (not revoked)."""
        return self.revoked is None


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of checking a presented key: ``ok``, or a machine code and a message."""

    ok: bool
    code: str = ""
    message: str = ""
    name: str | None = None
    prefix: str = ""  # the accepted key's shown prefix (fnb_ and 8 characters)
    digest: str = ""
    max_spend: float | None = None  # the accepted key's spend cap, US dollars (None: none)


HOW_TO_CREATE = "create one with: flownb keys create --name NAME"


class KeyStore:
    """The key file of one FLOWNB_HOME."""

    def __init__(self, home: str | Path) -> None:
        self.home = Path(home)
        self.path = self.home / "keys.json"
        self.used_path = self.home / "keys-used.json"
        self.spent_path = self.home / "keys-spent.json"
        self._lock_path = self.home / "keys.lock"
        # Server-side view: digests -> record, refreshed when the file's stat changes.
        self._stamp: tuple[int, int, int] | None = None
        self._looked = -math.inf  # time.monotonic() of the last stat: never yet
        self._records: list[KeyRecord] = []
        self._digests: list[tuple[bytes, KeyRecord]] = []
        self._used: dict[str, float] = {}
        self._used_lock = threading.Lock()  # requests record, a worker thread flushes

    # -- file access -------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            try:
                private_dir(self.home)
                fh = (
                    stack.enter_context(
                        os.fdopen(
                            os.open(self._lock_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600),
                            "a",
                        )
                    )
                    if fcntl
                    else None
                )
            except OSError as exc:  # a read-only home, or one under a file: one line, no trace
                raise self._unwritable(exc) from None
            if fh is None:  # pragma: no cover
                yield
                return
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _unwritable(self, exc: OSError) -> ConfigError:
        return unwritable(self.home, exc, "the API key file")

    def _read_json(self, path: Path) -> Any:
        try:
            text = path.read_text(encoding="utf-8")
        except (FileNotFoundError, NotADirectoryError):  # none yet (a home under a file: never)
            return None
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path} is not valid JSON ({exc.msg}); fix or delete it") from None

    def _write_json(self, path: Path, data: Any) -> None:
        try:
            fd, tmp = tempfile.mkstemp(dir=self.home, prefix=".tmp-keys-")
        except OSError as exc:
            raise self._unwritable(exc) from None
        try:
            os.chmod(tmp, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(data, fh, indent=2)
                fh.write("\n")
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def load(self) -> list[KeyRecord]:
        """Return every key record (active and revoked), with last-used times merged in.

        Raises:
            ConfigError: the key file is corrupt.
        """
        data = self._read_json(self.path) or {"keys": []}
        try:
            records = [KeyRecord(**{**r, "last_used": None}) for r in data["keys"]]
        except (TypeError, KeyError) as exc:
            raise ConfigError(f"{self.path} is not a flownb key file ({exc})") from None
        used = self._read_json(self.used_path) or {}
        for r in records:
            r.last_used = used.get(r.digest)
        return records

    def _save(self, records: list[KeyRecord]) -> None:
        keys = [
            {
                k: v
                for k, v in asdict(r).items()
                if k != "last_used" and (v is not None or k != "max_spend")
            }
            for r in records
        ]
        self._write_json(self.path, {"version": 1, "keys": keys})
        self._looked = -math.inf  # this store's own change is seen on its next check

    # -- CLI operations ----------------------------------------------------------------------

    def create(self, name: str, max_spend: float | None = None) -> str:
        """Create a key named ``name`` (``max_spend``: its spend cap in US dollars) and return
        it; this is the only time it is available.

        Raises:
            ConfigError: the name is empty or already names an active key, or the cap is
                negative.
        """
        _check_cap(max_spend)
        name = name.strip()
        if not name:
            raise ConfigError("a key needs a name (--name NAME)")
        with self._locked():
            records = self.load()
            if any(r.name == name and r.active for r in records):
                raise ConfigError(
                    f"an active key named {name!r} exists; revoke it first or pick another name"
                )
            key = KEY_PREFIX + secrets.token_urlsafe(32)
            records.append(KeyRecord(name, key[:SHOWN], digest(key), _now(), max_spend=max_spend))
            self._save(records)
        return key

    def set_cap(self, name: str, max_spend: float | None) -> KeyRecord:
        """Set (``None``: remove) the spend cap of the active key named ``name``; what it spent
        so far still counts.

        Raises:
            ConfigError: no active key has that name, or the cap is negative.
        """
        _check_cap(max_spend)
        with self._locked():
            records = self.load()
            hits = [r for r in records if r.active and r.name == name.strip()]
            if not hits:
                raise ConfigError(f"no active key named {name.strip()!r}")
            hits[0].max_spend = max_spend
            self._save(records)
        return hits[0]

    def spent(self) -> dict[str, float]:
        """Return what each capped key has spent, in US dollars, by digest."""
        data = self._read_json(self.spent_path) or {}
        return {k: float(v) for k, v in data.items() if isinstance(v, int | float)}

    def record_spent(self, key_digest: str, spent: float) -> None:
        """Keep ``spent`` (US dollars, in all) as what the key with ``key_digest`` has spent
        (never less than what is kept already: another server process may have spent more)."""
        with self._locked():
            data = self.spent()
            data[key_digest] = max(spent, data.get(key_digest, 0.0))
            self._write_json(self.spent_path, data)

    def revoke(self, name_or_prefix: str) -> list[KeyRecord]:
        """Revoke the active keys whose name is ``name_or_prefix`` or whose key starts with it.

        Returns:
            The records revoked.

        Raises:
            ConfigError: nothing matches, or a prefix matches several keys of different names.
        """
        target = name_or_prefix.strip()
        with self._locked():
            records = self.load()
            active = [r for r in records if r.active]
            hits = [r for r in active if r.name == target]
            if not hits and len(target) >= len(KEY_PREFIX) + 4:
                # A prefix of the shown part, or the whole key pasted in.
                hits = [
                    r
                    for r in active
                    if r.prefix.startswith(target)
                    or (
                        target.startswith(r.prefix)
                        and hmac.compare_digest(digest(target), r.digest)
                    )
                ]
            if not hits:
                raise ConfigError(f"no active key named or starting with {target!r}")
            if len({r.name for r in hits}) > 1:
                names = ", ".join(sorted({r.name for r in hits}))
                raise ConfigError(f"{target!r} matches several keys ({names}); give the name")
            stamp = _now()
            for r in hits:
                r.revoked = stamp
            self._save(records)
        return hits

    # -- server side -------------------------------------------------------------------------

    def _refresh(self, *, now: bool = False) -> bool:
        """Re-read the key file when its stat changed; stat it only when ``now`` or when the
        last look is over :data:`RECHECK_EVERY` seconds old. Return whether it looked."""
        looked = time.monotonic()
        if not now and looked - self._looked < RECHECK_EVERY:
            return False
        self._looked = looked
        try:
            st = os.stat(self.path)
        except (FileNotFoundError, NotADirectoryError):
            stamp = None
        else:
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        if stamp == self._stamp:
            return True
        try:
            records = self.load() if stamp is not None else []
        except ConfigError:
            self._looked = -math.inf  # look again next time: refused until it is mended
            raise
        self._records = records
        self._digests = [(bytes.fromhex(r.digest), r) for r in records]
        self._stamp = stamp
        return True

    def active_count(self) -> int:
        """Return how many keys are accepted right now."""
        self._refresh(now=True)
        return sum(r.active for r in self._records)

    def check(self, key: str | None) -> Verdict:
        """Check a presented key (the ``x-api-key`` header) against the stored digests.

        Every stored digest is compared, in constant time, whatever matches: how long the check
        takes says nothing about which key, or how much of one, was right.
        """
        looked = self._refresh()
        if not key:
            if not self._records:
                return Verdict(
                    False,
                    "missing_api_key",
                    f"this server has no API keys yet; {HOW_TO_CREATE}, "
                    "then send it in the x-api-key header",
                )
            return Verdict(False, "missing_api_key", "send your API key in the x-api-key header")
        presented = hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()
        found = self._match(presented)
        if found is None and not looked:
            # Not known as of the last look: a key created since is accepted at once.
            self._refresh(now=True)
            found = self._match(presented)
        if found is None:
            if not self._records:
                return Verdict(
                    False, "invalid_api_key", f"this server has no API keys yet; {HOW_TO_CREATE}"
                )
            return Verdict(False, "invalid_api_key", "invalid API key")
        if not found.active:
            return Verdict(False, "invalid_api_key", "this API key was revoked")
        # Formatted and written by flush_used, which the server calls every FLUSH_EVERY seconds
        # from a worker thread and at shutdown: no disk write on a request's path.
        with self._used_lock:
            self._used[found.digest] = time.time()
        return Verdict(
            True,
            name=found.name,
            prefix=found.prefix,
            digest=found.digest,
            max_spend=found.max_spend,
        )

    def _match(self, presented: bytes) -> KeyRecord | None:
        found: KeyRecord | None = None
        for stored, record in self._digests:
            if hmac.compare_digest(stored, presented):
                found = record
        return found

    def flush_used(self) -> None:
        """Write the last-used times seen by this process (merged with other writers')."""
        with self._used_lock:
            if not self._used:
                return
            pending, self._used = self._used, {}
        try:
            with self._locked():
                used = self._read_json(self.used_path) or {}
                for d, seen in pending.items():
                    when = datetime.fromtimestamp(seen, UTC).isoformat(timespec="seconds")
                    used[d] = max(when, used.get(d, ""))
                self._write_json(self.used_path, used)
        except (OSError, ConfigError):
            # Last-used times are a convenience; never fail a request over them.
            pass


def _check_cap(max_spend: float | None) -> None:
    if max_spend is not None and not max_spend >= 0:
        raise ConfigError(f"a key's spend cap is US dollars >= 0, got {max_spend!r}")
