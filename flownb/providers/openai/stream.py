"""Reading OpenAI's streamed chat answers (``stream: true``): server-sent events of
``chat.completion.chunk`` objects, then ``data: [DONE]``.

:func:`sse_data` turns the lines of an event stream into the ``data`` of each event;
:class:`ChatChunks` gathers the chunks of choice 0 into the body a non-streamed call answers
(message content, refusal, tool calls, finish reason, model, and the usage the last chunk
carries when asked for with ``stream_options: {"include_usage": true}``), so the streamed
answer goes through the same reading (:meth:`OpenAIProvider.text_answer`) and is cached
exactly as a plain call's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

__all__ = ["ChatChunks", "sse_data"]


async def sse_data(lines: AsyncIterator[bytes]) -> AsyncIterator[str]:
    """Yield the ``data`` of each server-sent event read from ``lines`` (several ``data:``
    lines of one event joined by newlines); comments and other fields are skipped."""
    data: list[str] = []
    async for raw in lines:
        line = raw.decode("utf-8").rstrip("\r\n")
        if not line:
            if data:
                yield "\n".join(data)
                data = []
            continue
        if line.startswith("data:"):
            value = line[5:]
            data.append(value[1:] if value.startswith(" ") else value)
    if data:
        yield "\n".join(data)


class ChatChunks:
    """The chunks of one streamed chat answer, gathered (choice 0 only: the output's)."""

    __slots__ = ("calls", "finish", "id", "model", "refusal", "seen", "text", "usage")

    def __init__(self) -> None:
        self.text: list[str] = []
        self.refusal: list[str] = []
        self.calls: list[dict[str, Any]] = []
        self.finish: Any = None
        self.model: Any = None
        self.id: Any = None
        self.usage: Any = None
        self.seen = False  # whether any chunk had choice 0

    def add(self, chunk: Mapping[str, Any]) -> str:
        """Take one chunk; return the text it adds to the output (``""``: none)."""
        if chunk.get("model"):
            self.model = chunk["model"]
        if chunk.get("id"):
            self.id = chunk["id"]
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        added = ""
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, Mapping) or choice.get("index", 0) != 0:
                continue
            self.seen = True
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
            delta = choice.get("delta") or {}
            content = delta.get("content")
            if isinstance(content, str) and content:
                self.text.append(content)
                added += content
            if delta.get("refusal"):
                self.refusal.append(str(delta["refusal"]))
            for call in delta.get("tool_calls") or ():
                name = (call.get("function") or {}).get("name") if isinstance(call, dict) else None
                if name:
                    self.calls.append({"function": {"name": name}})
        return added

    def answer(self) -> dict[str, Any]:
        """Return the body a non-streamed call would have answered with."""
        text = "".join(self.text)
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if self.refusal:
            message["refusal"] = "".join(self.refusal)
        if self.calls:
            message["tool_calls"] = self.calls
        choice = {"index": 0, "message": message, "finish_reason": self.finish}
        # No choice at all: read as a plain answer without choices is (an error).
        body: dict[str, Any] = {"choices": [choice] if self.seen else [], "usage": self.usage}
        if self.model:
            body["model"] = self.model
        if self.id:
            body["id"] = self.id
        return body
