"""A flow run by a flow execution service (:class:`RemoteFlow`), with the same interface as a
local flow; :meth:`flownb.Client.flow` returns one. It sends its runs through the client that
made it (what it uses of it is :class:`Service`), and reads the items a run returns into a
:class:`~flownb.runtime.result.RunResult`.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from typing import Any, Protocol
from urllib.parse import urlsplit

from ..errors import ApiError, FlownbError
from ..flowfile.validate import VariableSpec
from ..runtime.events import StreamEvent
from ..runtime.result import OnResult, RunResult
from .base import BaseFlow
from .client_stream import error_of

__all__ = ["Items", "RemoteFlow", "Service"]

_IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".webp", ".gif")
Items = list[dict[str, str]]  # a run's output items, as the contract returns them


class Service(Protocol):
    """What a remote flow uses of the :class:`~flownb.flows.client.Client` that made it (named
    here so this module does not import the client back)."""

    base_url: str
    max_parallel: int

    def run_elements(
        self,
        flow_id: str,
        batch: Sequence[Mapping[str, Any]],
        on_element: Callable[[int, Items | None, FlownbError | None], None],
        parallel: int,
    ) -> None:
        """Run ``batch``, reporting every element to ``on_element`` as its request ends."""

    def stream_run(
        self, flow_id: str, variables: Mapping[str, Any]
    ) -> Generator[tuple[str, Any], None, None]:
        """Yield a streamed run's server-sent events as ``(name, data)``."""


class RemoteFlow(BaseFlow):
    """A flow run by a flow execution service; same interface as a local flow."""

    def __init__(
        self,
        client: Service,
        flow_id: str,
        info: list[dict[str, str]],
        image_outputs: str | None = None,
    ) -> None:
        self.client = client
        self.flow_id = flow_id
        self.name = flow_id
        self._spec = VariableSpec([i["name"] for i in info if i.get("type") == "variable"])
        self._outputs = [i["name"] for i in info if i.get("type") == "output"]
        # The server says which outputs are images; another service may not (then: by value).
        self._image_outputs: set[str] | None = None
        if image_outputs is not None:
            positions = {int(p) for p in image_outputs.split(",") if p.strip().isdigit()}
            self._image_outputs = {n for k, n in enumerate(self._outputs) if k in positions}

    @property
    def spec(self) -> VariableSpec:
        """The flow's variables, for validation (checked locally before anything is sent)."""
        return self._spec

    @property
    def outputs(self) -> list[str]:
        """The names of the outputs a run yields, in node order."""
        return list(self._outputs)

    def __repr__(self) -> str:
        return (
            f"<RemoteFlow {self.flow_id!r} at {self.client.base_url} "
            f"variables={self.variables!r} outputs={self.outputs!r}>"
        )

    def _result(self, items: Items, latency: float) -> RunResult:
        pairs = [(str(i.get("name", "")), str(i.get("output", ""))) for i in items]
        outputs: dict[str, str] = {}
        for name, value in pairs:
            outputs.setdefault(name, value)
        if self._image_outputs is not None:
            kinds = {n: "image" if n in self._image_outputs else "text" for n in outputs}
        else:
            kinds = {n: "image" if _looks_like_image(v) else "text" for n, v in outputs.items()}
        result = RunResult(outputs, kinds=kinds, provider="remote", latency=latency)
        if len(pairs) != len(outputs):  # two output nodes share a name: keep both, in order
            result = RunResult(
                outputs, kinds=kinds, provider="remote", latency=latency, entries=pairs
            )
        return result

    def _execute(
        self, batch: Sequence[Mapping[str, str]], on_result: OnResult, concurrency: int | None
    ) -> None:
        started = time.perf_counter()

        def on_element(i: int, items: Items | None, exc: FlownbError | None) -> None:
            if exc is not None:
                on_result(i, None, exc)
                return
            try:
                result = self._result(items or [], time.perf_counter() - started)
            except Exception as err:  # a malformed item: this element failed, not the batch
                on_result(i, None, ApiError(f"unexpected run output: {err}", status=200))
            else:
                on_result(i, result, None)

        self.client.run_elements(
            self.flow_id, batch, on_element, concurrency or self.client.max_parallel
        )

    async def _stream_run(
        self, values: Mapping[str, str], emit: Callable[[StreamEvent], None]
    ) -> RunResult:
        """Run validated ``values`` once on the service, streaming (see
        :meth:`Client.stream_run`): ``emit`` gets each event as it arrives; return the result.
        The HTTP exchange runs in a worker thread; cancelling stops it at its next event.

        Raises:
            What :meth:`run` raises.
        """
        loop = asyncio.get_running_loop()
        stop = threading.Event()

        def work() -> RunResult:
            started = time.perf_counter()
            events = self.client.stream_run(self.flow_id, values)
            streamed = False
            try:
                for name, data in events:
                    if stop.is_set():
                        raise KeyboardInterrupt  # the caller is gone: stop reading
                    if name == "result":
                        result = self._result(_items(data), time.perf_counter() - started)
                        if not streamed:  # answered whole (no streaming there): each output
                            for whole in _whole(result):
                                loop.call_soon_threadsafe(emit, whole)
                        return result
                    if name == "error":
                        raise error_of(data)
                    event = _event_of(name, data)
                    if event is not None:
                        streamed = True
                        loop.call_soon_threadsafe(emit, event)
            finally:
                events.close()  # closes the response, whatever ended the loop
            raise ApiError("the service's event stream ended without a result", status=200)

        try:
            return await asyncio.to_thread(work)
        finally:
            stop.set()


def _items(data: Any) -> Items:
    """Return a streamed ``result``'s items: the object body's list, or an array's only one."""
    if isinstance(data, list) and len(data) == 1 and isinstance(data[0], list):
        data = data[0]
    if not isinstance(data, list) or not all(isinstance(i, dict) for i in data):
        raise ApiError("unexpected run output in the service's event stream", status=200)
    return data


def _whole(result: RunResult) -> list[StreamEvent]:
    """Return the events of a result that came whole: one per output, text or image."""
    return [
        StreamEvent("image", name, (name,), url=value)
        if result.is_image(name)
        else StreamEvent("text", name, (name,), value)
        for name, value in result.entries
        if value or result.is_image(name)
    ]


def _event_of(name: str, data: Any) -> StreamEvent | None:
    """Return the :class:`StreamEvent` of a streamed ``text``/``image``/``restart`` event (None
    for an event this client does not know)."""
    if name not in ("text", "image", "restart") or not isinstance(data, dict):
        return None
    outputs = tuple(str(o) for o in data.get("outputs") or ())
    node = str(data.get("node", ""))
    if name == "text":
        return StreamEvent("text", node, outputs, str(data.get("delta", "")))
    if name == "image":
        return StreamEvent("image", node, outputs, url=str(data.get("url", "")))
    return StreamEvent("restart", node, outputs)


def _looks_like_image(value: str) -> bool:
    if value.startswith("data:image/"):
        return True
    if not value.startswith(("http://", "https://")) or any(c.isspace() for c in value):
        return False
    path = urlsplit(value).path.lower()
    return "/media/" in path or path.endswith(_IMAGE_EXTENSIONS)
