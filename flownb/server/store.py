"""The server's flows: a folder of ``<flow_id>.json`` exports, re-read when a file changes.

Each request stats the flow's file (cheap); the parsed graph and its :class:`~flownb.engine.Plan`
are kept until the file's modification time, size or inode change, so a flow file dropped in or
edited while the server runs is served on the next request, with no restart.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..engine import Plan
from ..errors import FlowFileError, FlowNotFound
from ..model import parse_flow, read_flow_file
from .keys import KEY_PREFIX

__all__ = ["FLOW_ID", "FlowStore", "StoredFlow"]

# What a flow id may look like; anything else is unknown without touching the disk.
FLOW_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")


@dataclass(frozen=True, slots=True)
class StoredFlow:
    """A loaded flow: its id, its plan and runner, and the file state it was read from."""

    flow_id: str
    plan: Plan
    runner: Any  # what the store's ``make_runner`` built for the plan (a Runner, or None)
    stamp: tuple[int, int, int]
    image_outputs: str  # positions (among outputs) of image outputs, "1,3"; "" when none


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

    def __init__(
        self, directory: str | Path, make_runner: Callable[[str, Plan], Any] | None = None
    ) -> None:
        self.directory = Path(directory)
        self._dir = str(self.directory)
        # Built once per version of a flow file: an engine's pacing spans requests. A provider
        # that cannot run the flow (images, params) raises ConfigError here, as a local load does.
        self._make_runner = make_runner
        self._flows: dict[str, StoredFlow] = {}
        self._lock = threading.Lock()

    def ids(self) -> list[str]:
        """Return the ids of the flow files in the folder, sorted (valid or not)."""
        try:
            names = os.listdir(self.directory)
        except OSError:
            return []
        return sorted(n[:-5] for n in names if n.endswith(".json") and FLOW_ID.fullmatch(n[:-5]))

    def unservable(self) -> list[str]:
        """Return the names of ``.json`` files in the folder whose names are not flow ids."""
        try:
            names = os.listdir(self.directory)
        except OSError:
            return []
        return sorted(n for n in names if n.endswith(".json") and not FLOW_ID.fullmatch(n[:-5]))

    def get(self, flow_id: str) -> StoredFlow:
        """Return the flow ``flow_id``, reloading it if its file changed.

        Raises:
            FlowNotFound: the id is not a valid flow id (checked before touching the disk), or
                there is no such file.
            FlowFileError: the file exists but is not a valid flow (the message names the flow
                id and the node or edge, not the server's paths).
        """
        if not FLOW_ID.fullmatch(flow_id):
            raise not_found(flow_id)
        path = os.path.join(self._dir, flow_id + ".json")
        try:
            st = os.stat(path)
        except OSError:
            self._flows.pop(flow_id, None)
            raise not_found(flow_id) from None
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        cached = self._flows.get(flow_id)
        if cached is not None and cached.stamp == stamp:
            return cached
        with self._lock:
            cached = self._flows.get(flow_id)
            if cached is not None and cached.stamp == stamp:
                return cached
            loaded = self._load(flow_id, Path(path), stamp)
            self._flows[flow_id] = loaded
            return loaded

    def _load(self, flow_id: str, path: Path, stamp: tuple[int, int, int]) -> StoredFlow:
        where = f"flow {flow_id!r}"
        try:
            data = read_flow_file(path, label=where)
        except FlowFileError:
            if not path.exists():  # deleted since the stat
                raise not_found(flow_id) from None
            raise
        plan = Plan(parse_flow(data, where))
        images = ",".join(
            str(i) for i, name in enumerate(plan.outputs) if plan.output_kinds.get(name) == "image"
        )
        runner = self._make_runner(flow_id, plan) if self._make_runner is not None else None
        return StoredFlow(flow_id, plan, runner, stamp, images)
