"""What a streamed run yields before its result: :class:`StreamEvent`.

``flow.stream(inputs)`` / ``flow.astream(inputs)`` yield one event per piece of text a
generation node's provider streams (``kind="text"``, ``delta`` the new text), one per image
when it is ready (``kind="image"``, ``url``), and then the run's :class:`~flownb.RunResult`.
A ``kind="restart"`` event says the node's text so far is void: a failed attempt is being
retried, and its text starts again from the next ``"text"`` event.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["EventKind", "StreamEvent"]

EventKind = Literal["text", "image", "restart"]


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One piece of a streamed run.

    Attributes:
        kind: ``"text"`` (``delta`` is new text), ``"image"`` (``url`` is the image) or
            ``"restart"`` (the node's text so far is void; it is being retried).
        node: the generation node (its name, as in :attr:`RunResult.trace`).
        outputs: the outputs this node feeds (empty for a node that only feeds other nodes).
        delta: the text added (``"text"`` events).
        url: the image's URL (``"image"`` events).
    """

    kind: EventKind
    node: str
    outputs: tuple[str, ...] = ()
    delta: str = ""
    url: str | None = None

    @property
    def output(self) -> str:
        """The output this event belongs to: the first one the node feeds, else the node."""
        return self.outputs[0] if self.outputs else self.node
