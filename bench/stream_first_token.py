"""First streamed text: from the moment the provider sends its first token (the loopback fake
OpenAI, streaming one word per ``--delay`` seconds, records when it sent each word) to the
moment the first text reaches the consumer: ``flow.stream``'s first event, and the notebook's
live area being shown (its first update, :class:`flownb.views.live_text.LiveText`). Aim:
50 ms or less. Reference, in the same run: a bare aiohttp client reading the same stream from
the same fake (the floor the transport sets).

    python -m bench.stream_first_token [--runs 30] [--delay 0.05]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import aiohttp

import flownb
from flownb.infra.media import MediaStore
from flownb.providers.openai.provider import OpenAIProvider
from flownb.runtime.events import StreamEvent
from flownb.testing.fake_openai import FakeOpenAI
from flownb.views.live_text import LiveText

WORDS = "first second third fourth fifth"


def _flow_data() -> dict:
    return {
        "nodes": [
            {
                "id": "v",
                "type": "variableNode",
                "position": {"x": 0, "y": 0},
                "data": {"variable": {"label": "x", "value": ""}},
            },
            {
                "id": "n",
                "type": "actionNode",
                "position": {"x": 1, "y": 0},
                "data": {
                    "name": "story",
                    "prompt": "{x}",
                    "modelParams": {"model": "gpt-4o-mini"},
                    "variables": [],
                    "output": "",
                },
            },
            {
                "id": "o",
                "type": "outputNode",
                "position": {"x": 2, "y": 0},
                "data": {"name": "story", "output": {}},
            },
        ],
        "edges": [
            {"id": "e1", "source": "v", "target": "n"},
            {"id": "e2", "source": "n", "target": "o"},
        ],
    }


async def _raw_first(url: str, prompt: str) -> float:
    """Return when a bare aiohttp client read the first text chunk of a streamed answer."""
    body = {
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": prompt}],
        "stream": True,
    }
    first = 0.0
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{url}/chat/completions", json=body) as resp,
    ):
        async for line in resp.content:
            if not first and b'"content": "' in line and b'"content": ""' not in line:
                first = time.perf_counter()
    return first


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the benchmark; print the lines; return the figures for the summary."""
    parser = argparse.ArgumentParser(prog="python -m bench.stream_first_token")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--delay", type=float, default=0.05, help="seconds between words")
    args = parser.parse_args(argv)
    with FakeOpenAI(stream_delay=args.delay) as fake:
        provider = OpenAIProvider(
            api_key="sk-bench", base_url=fake.url, media=MediaStore("/tmp/flownb-bench-media")
        )
        flow = flownb.load_flow(_flow_data(), provider=provider, cache=False, log=False)
        flow.run(x="warm up")  # connection pool and imports, as in a session already going
        asyncio.run(_raw_first(fake.url, "warm up"))
        events_ms: list[float] = []
        shown_ms: list[float] = []
        raw_ms: list[float] = []
        for i in range(args.runs):
            # Turn about, so a slow patch of the machine hits both alike.
            fake.reset()
            first_raw = asyncio.run(_raw_first(fake.url, f"{WORDS} raw {i}"))
            raw_ms.append((first_raw - fake.streams[0][0][0]) * 1000)

            fake.reset()
            seen: list[float] = []
            shown: list[float] = []
            view = LiveText(lambda markup, plain, shown=shown: shown.append(time.perf_counter()))
            for item in flow.stream(x=f"{WORDS} {i}"):
                if isinstance(item, StreamEvent):
                    seen.append(time.perf_counter())
                    view.add(item)
            sent = fake.streams[0][0][0]
            events_ms.append((seen[0] - sent) * 1000)
            shown_ms.append((shown[0] - sent) * 1000)
    event = statistics.median(events_ms)
    show = statistics.median(shown_ms)
    raw = statistics.median(raw_ms)
    p90 = statistics.quantiles(events_ms, n=10)[-1]
    verdict = "ok" if show <= 50 else "OVER"
    print(f"runs: {args.runs}, one word per {args.delay * 1000:.0f} ms")
    print(f"reference: bare aiohttp client, first text read     {raw:7.2f} ms (median)")
    print(f"flow.stream: first text event after the first token {event:7.2f} ms (p90 {p90:.2f})")
    print(
        f"notebook live area: first text shown                {show:7.2f} ms  aim <= 50: {verdict}"
    )
    print(f"flownb / reference                                  {event / raw if raw else 0:7.2f}x")
    return {
        "first streamed text shown, ms (aim <= 50)": show,
        "first text event, ms": event,
        "reference: bare client, ms": raw,
    }


if __name__ == "__main__":
    main()
