"""The server's flows: a folder of ``<flow_id>.json`` exports, re-read when a file changes.

Each file is served by the same runnable core a notebook's flow is composed from (a
:class:`~flownb.core.local.LocalCore`: its plan, provider, run configuration and runner, made by
the server's ``make_flow``), kept until the file's
modification time, size or inode change. A loaded flow's file is looked at (one ``stat``) at most
every :data:`RECHECK_EVERY` seconds, not on every request: a flow file dropped in is served on its
first request, and one edited or removed while the server runs within a second, with no restart.
A file that fails to load is remembered the same way: a broken file costs one load per version,
not one per request.

Only regular files inside the folder are served, or symlinks that resolve to one inside it: a
symlink leading out of the folder, a FIFO or a device is no flow (404), the reason going to the
server log. A file over :data:`MAX_FLOW_BYTES` (5 MiB) is not read. A flow that fails to load
answers with its id and "see the server log" only: what is wrong (which can quote the file) is
logged, never sent to callers. :meth:`FlowStore.peek` answers from memory; :meth:`FlowStore.get`
may read and parse the file, so the server calls it in a worker thread.
"""

from __future__ import annotations

import logging
import math
import os
import re
import stat
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.local import LocalCore
from ..errors import ConfigError, FlowFileError, FlownbError, FlowNotFound
from ..flowfile.model import MAX_FLOW_BYTES, FlowGraph, parse_flow, read_flow_file
from ..runtime.engine import Plan
from .keys import KEY_PREFIX

# How the server makes the flow it serves from a file: flow id, parsed graph, exported JSON.
MakeFlow = Callable[[str, FlowGraph, Mapping[str, Any]], LocalCore]

__all__ = ["FLOW_ID", "MAX_FLOW_BYTES", "FlowStore", "StoredFlow"]

# What a flow id may look like; anything else is unknown without touching the disk.
FLOW_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")

log = logging.getLogger("flownb.server")

# How often a loaded flow's file is looked at for a change (seconds): a stat per request was a
# measurable share of the server's time.
RECHECK_EVERY = 1.0


@dataclass(frozen=True, slots=True)
class StoredFlow:
    """A loaded flow: its id, the flow that runs it (a :class:`LocalCore`, as a notebook's
    :class:`flownb.LocalFlow` is; ``None`` for a store that only describes flows), its plan and
    runner (the flow's own, kept beside it for the routes' fast paths), and the file state it
    was read from."""

    flow_id: str
    plan: Plan
    runner: Any  # the flow's Runner (None without a flow)
    stamp: tuple[int, int, int]
    image_outputs: str  # positions (among outputs) of image outputs, "1,3"; "" when none
    name: str = ""  # the export's "name" when it has one, else the flow id
    flow: LocalCore | None = None


def not_found(flow_id: str) -> FlowNotFound:
    """Return the error for an unknown flow; the id is echoed only when it is a valid id that
    does not look like an API key (a key pasted into the URL must not come back in a body)."""
    if flow_id.startswith(KEY_PREFIX):
        return FlowNotFound(
            "no such flow; the flow id looks like an API key: keys go in the x-api-key header"
        )
    if FLOW_ID.fullmatch(flow_id):
        return FlowNotFound(f"no flow with id {flow_id!r}")
    return FlowNotFound("no such flow: flow ids are 1-128 letters, digits, '_' or '-'")


class FlowStore:
    """Flows served from one folder."""

    def __init__(self, directory: str | Path, make_flow: MakeFlow | None = None) -> None:
        self.directory = Path(directory)
        self._dir = str(self.directory)
        self._real_dir = os.path.realpath(self._dir)
        # Built once per version of a flow file: an engine's pacing spans requests. A provider
        # that cannot run the flow (images, params) raises ConfigError here, as a local load does.
        self._make_flow = make_flow
        self._flows: dict[str, StoredFlow] = {}
        # Failed loads, by flow id: the file's stamp and the error message.
        self._failed: dict[str, tuple[tuple[int, int, int], str]] = {}
        self._lock = threading.Lock()
        # When each loaded flow's file was last looked at (time.monotonic()).
        self._looked: dict[str, float] = {}

    def ids(self) -> list[str]:
        """Return the ids of the flow files the folder serves, sorted (loadable or not): files
        named ``<flow_id>.json`` that are regular files inside it (or symlinks to one)."""
        try:
            names = os.listdir(self.directory)
        except OSError:
            return []
        return sorted(
            n[:-5]
            for n in names
            if n.endswith(".json")
            and FLOW_ID.fullmatch(n[:-5])
            and self._outside(os.path.join(self._dir, n)) is None
        )

    def _outside(self, path: str) -> str | None:
        """Return why ``path`` is not served (a symlink leading out of the folder, not a
        regular file, gone), or ``None`` when it is a regular file inside the folder."""
        try:
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                real = os.path.realpath(path)
                if os.path.commonpath([real, self._real_dir]) != self._real_dir:
                    return "a symlink to a file outside the flows folder"
                st = os.stat(real)
        except (OSError, ValueError):
            return "gone"
        return None if stat.S_ISREG(st.st_mode) else "not a regular file"

    def loadable(self) -> tuple[list[StoredFlow], dict[str, str]]:
        """Return every flow of the folder that loads, in id order, and the problem of each
        that does not (flow id -> message). Reads and parses files not loaded yet."""
        flows: list[StoredFlow] = []
        failed: dict[str, str] = {}
        for flow_id in self.ids():
            try:
                flows.append(self.get(flow_id))
            except FlowNotFound:  # deleted meanwhile
                continue
            except FlownbError as exc:  # a broken file, or a flow the provider cannot run
                failed[flow_id] = exc.message
        return flows, failed

    def unservable(self) -> list[str]:
        """Return the names of ``.json`` files in the folder whose names are not flow ids."""
        try:
            names = os.listdir(self.directory)
        except OSError:
            return []
        return sorted(n for n in names if n.endswith(".json") and not FLOW_ID.fullmatch(n[:-5]))

    def _stat(self, flow_id: str) -> tuple[str, tuple[int, int, int]]:
        if not FLOW_ID.fullmatch(flow_id):
            raise not_found(flow_id)
        path = os.path.join(self._dir, flow_id + ".json")
        try:
            st = os.lstat(path)  # one call for the usual case, a regular file
        except OSError:
            st = None
        if st is not None and not stat.S_ISREG(st.st_mode):
            why = self._outside(path)
            if why is None:  # a symlink to a regular file inside the folder
                try:
                    st = os.stat(path)
                except OSError:
                    st = None
            else:
                if why != "gone":
                    log.warning("flow %r is not served: %s is %s", flow_id, path, why)
                st = None
        if st is None:
            self._flows.pop(flow_id, None)
            self._failed.pop(flow_id, None)
            raise not_found(flow_id)
        return path, (st.st_mtime_ns, st.st_size, st.st_ino)

    def _remembered(self, flow_id: str, stamp: tuple[int, int, int]) -> StoredFlow | None:
        cached = self._flows.get(flow_id)
        if cached is not None and cached.stamp == stamp:
            return cached
        failed = self._failed.get(flow_id)
        if failed is not None and failed[0] == stamp:
            raise FlowFileError(failed[1])  # a new exception: re-raising one grows its traceback
        return None

    def peek(self, flow_id: str) -> StoredFlow | None:
        """Return the flow when its current version is loaded already, ``None`` when the file
        must be read (call :meth:`get`, off the event loop). Costs one ``stat`` when the file
        was last looked at over :data:`RECHECK_EVERY` seconds ago, else nothing.

        Raises:
            FlowNotFound: as :meth:`get`.
            FlowFileError: this version of the file failed to load before.
        """
        now = time.monotonic()
        loaded = self._flows.get(flow_id)
        if loaded is not None and now - self._looked.get(flow_id, -math.inf) < RECHECK_EVERY:
            return loaded
        _, stamp = self._stat(flow_id)
        found = self._remembered(flow_id, stamp)
        if found is not None:
            self._looked[flow_id] = now
        return found

    def get(self, flow_id: str) -> StoredFlow:
        """Return the flow ``flow_id``, reloading it if its file changed.

        Raises:
            FlowNotFound: the id is not a valid flow id (checked before touching the disk), or
                there is no such file, or it is not a regular file inside the folder (nor a
                symlink to one).
            FlowFileError: the file is not a valid flow, is over :data:`MAX_FLOW_BYTES`, or the
                provider cannot run it; the message names the flow id and the server log, which
                has the details.
        """
        path, stamp = self._stat(flow_id)
        hit = self._remembered(flow_id, stamp)
        if hit is not None:
            return hit
        with self._lock:
            hit = self._remembered(flow_id, stamp)
            if hit is not None:
                return hit
            try:
                loaded = self._load(flow_id, path, stamp)
            except (FlowFileError, ConfigError) as exc:
                # What is wrong can quote the file (a node name, a value): the log has it, and
                # callers get the id alone. Logged once per version of the file.
                log.error("flow %r cannot be loaded: %s", flow_id, exc.message)
                message = f"flow {flow_id!r} cannot be loaded; see the server log"
                self._failed[flow_id] = (stamp, message)
                self._flows.pop(flow_id, None)
                raise FlowFileError(message) from None
            self._flows[flow_id] = loaded
            self._failed.pop(flow_id, None)
            return loaded

    def _load(self, flow_id: str, path: str, stamp: tuple[int, int, int]) -> StoredFlow:
        where = f"flow {flow_id!r}"
        try:
            data = read_flow_file(path, label=where)
        except FileNotFoundError:  # deleted since the stat
            raise not_found(flow_id) from None
        try:
            graph = parse_flow(data, where)
            flow = self._make_flow(flow_id, graph, data) if self._make_flow is not None else None
            plan = flow.plan if flow is not None else Plan(graph)
        except RecursionError:
            raise FlowFileError(f"{where}: the flow is nested too deeply") from None
        images = ",".join(
            str(i) for i, name in enumerate(plan.outputs) if plan.output_kinds.get(name) == "image"
        )
        runner = flow.runner if flow is not None else None
        name = data.get("name") if isinstance(data, dict) else None
        if not isinstance(name, str) or not name.strip():
            name = flow_id
        return StoredFlow(flow_id, plan, runner, stamp, images, name, flow)
