"""Load: thousands of mixed requests from concurrent clients against one ``flownb serve``.

One server process on loopback (the offline provider, so every output is predictable: a text
output is the rendered prompt), eight concurrent clients, a seeded mix of describes, single runs,
batches, image runs, bad keys, missing keys, malformed and oversized bodies. Every response is
checked against the request that caused it (values are unique per request, so a mixed-up result
cannot pass), every status must be the one the design table promises, and the server's resident
memory must stay flat between the first and the last third of the run.

The clients are asyncio tasks on one aiohttp session, each with a request of its own in flight
at a time, rather than a thread per client: the server sees the same concurrent connections and
requests, and the client side spends a fraction of the CPU threads cost (a thread per client
spent about twice the server's own CPU on switching and parsing answers in Python).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import secrets
import statistics
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from yarl import URL

from tests.conftest import FLOWS, make_flow, write_flow
from tests.reliability.exposure import Exposure, record
from tests.reliability.procs import Served, create_key, rss_bytes, serve

pytestmark = pytest.mark.timeout(150)

CLIENTS = 8
WARMUP = 300
REQUESTS = 5000
SEED = 20261122
MAX_BODY = 256 * 1024  # the server's --max-body-bytes in this suite

# Values chosen to trip a careless implementation: template syntax inside values (must stay
# literal: substitution is single-pass), regex replacement traps, non-ASCII, JSON-ish text.
SPICE = ["{b}", "{a}", "\\1 \\g<0>", "$& $1", "ünï 🚀 ñ", '{"json": [1, 2]}', "  ", "", "x" * 300]
# Blog-intro values come from a small pool: each distinct image prompt is drawn once (Pillow),
# which is not what this suite measures.
TOPICS = ["owls", "tide pools", "rust", "tea"]
TONES = ["dry", "playful"]
# One over the default batch limit of 1000; encoded once, the same bytes for every such request.
TOO_BIG = json.dumps({"variables": [{"a": "x", "b": "y"}] * 1001}).encode()


@dataclass
class Outcome:
    """What one request was, what came back, and what was wrong with it (``problem`` empty)."""

    kind: str
    status: int
    problem: str = ""
    body: str = ""


@dataclass(frozen=True)
class Reply:
    """A response read in full: its status and body."""

    status_code: int
    content: bytes

    @property
    def text(self) -> str:
        """Return the body as text (UTF-8, what the server sends)."""
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """Return the body parsed as JSON.

        Raises:
            ValueError: the body is not JSON.
        """
        return json.loads(self.content)


Send = Callable[[aiohttp.ClientSession, random.Random, int], Awaitable[Outcome]]


def _echo_flow() -> dict[str, Any]:
    return make_flow({"say": "X<{a}>Y<{b}>"}, ["a", "b"])


def _said(a: str, b: str) -> str:
    return f"X<{a}>Y<{b}>"


class Mix:
    """Builds request ``n`` of the run and checks its response; seeded, so reproducible."""

    def __init__(self, base: str, key: str) -> None:
        self.base = base
        self.key = key
        self.kinds: list[tuple[str, int, Send]] = [
            ("describe", 10, self.describe),
            ("run", 32, self.run),
            ("batch", 18, self.batch),
            ("image", 5, self.image),
            ("bad_key", 7, self.bad_key),
            ("no_key", 3, self.no_key),
            ("bad_json", 5, self.bad_json),
            ("bad_shape", 5, self.bad_shape),
            ("bad_vars", 8, self.bad_vars),
            ("no_flow", 4, self.no_flow),
            ("too_big", 3, self.too_big),
            ("huge_body", 2, self.huge_body),
        ]

    async def one(self, client: aiohttp.ClientSession, n: int) -> Outcome:
        rng = random.Random(SEED * 100_003 + n)
        kind = rng.choices(self.kinds, weights=[w for _, w, _ in self.kinds])[0]
        try:
            return await kind[2](client, rng, n)
        except (aiohttp.ClientError, TimeoutError) as exc:  # a dropped connection or timeout
            return Outcome(kind[0], 0, f"transport error: {exc!r}")  # is a failure too

    # -- helpers -------------------------------------------------------------------------------

    def _headers(self, key: str | None = "") -> dict[str, str]:
        key = self.key if key == "" else key
        return {} if key is None else {"x-api-key": key}

    def _values(self, rng: random.Random, n: int, j: int = 0) -> dict[str, str]:
        return {
            "a": f"r{n}.{j}:{rng.choice(SPICE)}",
            "b": f"{rng.choice(SPICE)}:{rng.getrandbits(40):x}",
        }

    @staticmethod
    async def _get(
        client: aiohttp.ClientSession, url: str, headers: dict[str, str] | None = None
    ) -> Reply:
        # encoded=True: the path goes out as written (a "%2F" stays one), as a raw client's would.
        async with client.get(URL(url, encoded=True), headers=headers) as r:
            return Reply(r.status, await r.read())

    async def _post(
        self, client: aiohttp.ClientSession, flow: str, body: Any, key: str | None = ""
    ) -> Reply:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        headers = {**self._headers(key), "content-type": "application/json"}
        url = URL(f"{self.base}/api/flows/run/{flow}", encoded=True)
        async with client.post(url, data=content, headers=headers) as r:
            return Reply(r.status, await r.read())

    @staticmethod
    def _error(kind: str, r: Reply, status: int, code: str, **extra: Any) -> Outcome:
        """Check an error response: its status, code, the error shape, and ``extra`` fields
        that must appear in some item of ``errors``."""
        out = Outcome(kind, r.status_code, body=r.text)
        if r.status_code != status:
            out.problem = f"expected {status}, got {r.status_code}: {r.text[:300]}"
            return out
        try:
            data = r.json()
        except ValueError:
            out.problem = f"error body is not JSON: {r.text[:300]}"
            return out
        if not (
            isinstance(data, dict)
            and data.get("code") == code
            and isinstance(data.get("message"), str)
            and data["message"]
            and isinstance(data.get("errors"), list)
            and data["errors"]
            and isinstance(data.get("request_id"), str)
        ):
            out.problem = f"error body not as designed (code {code}): {r.text[:300]}"
        elif extra and not any(
            all(item.get(k) == v for k, v in extra.items()) for item in data["errors"]
        ):
            out.problem = f"no error item with {extra}: {r.text[:300]}"
        elif "Traceback" in r.text:
            out.problem = "traceback in an error body"
        return out

    # -- the request kinds ---------------------------------------------------------------------

    async def describe(self, client: aiohttp.ClientSession, rng: random.Random, n: int) -> Outcome:
        r = await self._get(client, f"{self.base}/api/flows/getFlowInfo/echo", self._headers())
        want = [
            {"name": "a", "type": "variable"},
            {"name": "b", "type": "variable"},
            {"name": "say", "type": "output"},
        ]
        ok = r.status_code == 200 and r.json() == want
        return Outcome("describe", r.status_code, "" if ok else f"describe: {r.text[:300]}")

    async def run(self, client: aiohttp.ClientSession, rng: random.Random, n: int) -> Outcome:
        values = self._values(rng, n)
        r = await self._post(client, "echo", {"variables": values})
        want = [{"name": "say", "output": _said(**values), "type": "output"}]
        ok = r.status_code == 200 and r.json() == want
        return Outcome("run", r.status_code, "" if ok else f"run {values}: {r.text[:300]}")

    async def batch(self, client: aiohttp.ClientSession, rng: random.Random, n: int) -> Outcome:
        batch = [self._values(rng, n, j) for j in range(rng.randint(0, 25))]
        r = await self._post(client, "echo", {"variables": batch})
        want = [[{"name": "say", "output": _said(**v), "type": "output"}] for v in batch]
        ok = r.status_code == 200 and r.json() == want
        return Outcome(
            "batch", r.status_code, "" if ok else f"batch of {len(batch)}: {r.text[:300]}"
        )

    async def image(self, client: aiohttp.ClientSession, rng: random.Random, n: int) -> Outcome:
        topic, tone = rng.choice(TOPICS), rng.choice(TONES)
        r = await self._post(client, "blog-intro", {"variables": {"topic": topic, "tone": tone}})
        if r.status_code != 200:
            return Outcome("image", r.status_code, f"image run: {r.text[:300]}")
        items = {item["name"]: item for item in r.json()}
        intro = f"Write a {tone} two-sentence intro for a blog post about {topic}."
        if items.get("intro", {}).get("output") != intro or set(items) != {"intro", "header_image"}:
            return Outcome("image", 200, f"image run outputs wrong: {r.text[:300]}")
        url = items["header_image"]["output"]
        if rng.random() < 0.3:  # fetch some images: the URL must serve a PNG
            img = await self._get(client, url)
            if img.status_code != 200 or not img.content.startswith(b"\x89PNG"):
                return Outcome("image", img.status_code, f"image URL {url} did not serve a PNG")
        return Outcome("image", 200)

    async def bad_key(self, client: aiohttp.ClientSession, rng: random.Random, n: int) -> Outcome:
        wrong = rng.choice(
            ["fnb_" + secrets.token_urlsafe(32), self.key[:-1], "nope", self.key + "x"]
        )
        if rng.random() < 0.5:
            r = await self._get(
                client, f"{self.base}/api/flows/getFlowInfo/echo", {"x-api-key": wrong}
            )
        else:
            r = await self._post(client, "echo", {"variables": self._values(rng, n)}, key=wrong)
        return self._error("bad_key", r, 401, "invalid_api_key")

    async def no_key(self, client: aiohttp.ClientSession, rng: random.Random, n: int) -> Outcome:
        r = await self._post(client, "echo", {"variables": self._values(rng, n)}, key=None)
        return self._error("no_key", r, 401, "missing_api_key")

    async def bad_json(self, client: aiohttp.ClientSession, rng: random.Random, n: int) -> Outcome:
        body = rng.choice([b"{not json", b"", b'{"variables": {"a": "x"', b"\xff\xfe\x00", b"NaN"])
        r = await self._post(client, "echo", body)
        return self._error("bad_json", r, 400, "invalid_json")

    async def bad_shape(self, client: aiohttp.ClientSession, rng: random.Random, n: int) -> Outcome:
        body = rng.choice(
            [{"vars": {"a": "x", "b": "y"}}, {"variables": 5}, {"variables": "a=b"}, [1, 2], {},
             {"variables": [{"a": "x", "b": "y"}, 3]}]
        )  # fmt: skip
        r = await self._post(client, "echo", body)
        return self._error("bad_shape", r, 422, "invalid_request")

    async def bad_vars(self, client: aiohttp.ClientSession, rng: random.Random, n: int) -> Outcome:
        values = self._values(rng, n)
        case = rng.randrange(4)
        if case == 0:
            values.pop("b")
            r = await self._post(client, "echo", {"variables": values})
            return self._error("bad_vars", r, 422, "missing_variable", variable="b")
        if case == 1:
            values["c"] = "extra"
            r = await self._post(client, "echo", {"variables": values})
            return self._error("bad_vars", r, 422, "unknown_variable", variable="c")
        if case == 2:
            values["a"] = rng.choice([1, None, ["x"], {"y": 1}, True])  # type: ignore[assignment]
            r = await self._post(client, "echo", {"variables": values})
            return self._error("bad_vars", r, 422, "invalid_variable_type", variable="a")
        # A batch with one bad element deep inside: it must be named by index, nothing run.
        batch = [self._values(rng, n, j) for j in range(6)]
        batch[4].pop("a")
        r = await self._post(client, "echo", {"variables": batch})
        return self._error("bad_vars", r, 422, "missing_variable", index=4, variable="a")

    async def no_flow(self, client: aiohttp.ClientSession, rng: random.Random, n: int) -> Outcome:
        flow = rng.choice(["nope", "echo2", "a" * 129, "..%2F..%2Fetc", "echo.json"])
        r = await self._get(client, f"{self.base}/api/flows/getFlowInfo/{flow}", self._headers())
        return self._error("no_flow", r, 404, "flow_not_found")

    async def too_big(self, client: aiohttp.ClientSession, rng: random.Random, n: int) -> Outcome:
        r = await self._post(client, "echo", TOO_BIG)
        return self._error("too_big", r, 422, "batch_too_large")

    async def huge_body(self, client: aiohttp.ClientSession, rng: random.Random, n: int) -> Outcome:
        # Over the server's --max-body-bytes (set to MAX_BODY below), under the batch limit.
        values = {"a": "y" * (MAX_BODY + rng.randint(1, 50_000)), "b": "z"}
        r = await self._post(client, "echo", {"variables": values})
        return self._error("huge_body", r, 413, "payload_too_large")


class Sampler:
    """Samples a process's RSS every ``every`` seconds in a thread until stopped."""

    def __init__(self, pid: int, every: float = 0.1) -> None:
        self.pid, self.every = pid, every
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(rss_bytes(self.pid))
            self._stop.wait(self.every)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def drive(mix: Mix, numbers: range, clients: int = CLIENTS, timeout: float = 30) -> list[Outcome]:
    """Send requests ``numbers`` from ``clients`` concurrent clients and return their outcomes
    in request order. A client is an asyncio task that takes the next request when its last
    one is answered, so ``clients`` requests are in flight at once, over as many connections,
    each kept open for the next request. ``timeout`` bounds connecting and each wait for the
    server's bytes, not a whole request (a long batch answer is not a failure)."""
    return asyncio.run(_drive(mix, numbers, clients, timeout))


async def _drive(mix: Mix, numbers: range, clients: int, timeout: float) -> list[Outcome]:
    outcomes: list[Outcome | None] = [None] * len(numbers)
    todo = iter(enumerate(numbers))

    async def client(session: aiohttp.ClientSession) -> None:
        for i, n in todo:  # one shared iterator: each request is taken by exactly one task
            outcomes[i] = await mix.one(session, n)

    limits = aiohttp.ClientTimeout(total=None, sock_connect=timeout, sock_read=timeout)
    # No cookie jar: the server sets none, and the API is keyed by header only.
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=clients),
        timeout=limits,
        cookie_jar=aiohttp.DummyCookieJar(),
    ) as session:
        await asyncio.gather(*(client(session) for _ in range(clients)))
    done = [o for o in outcomes if o is not None]
    assert len(done) == len(numbers), f"{len(numbers) - len(done)} requests never ended"
    return done


@contextmanager
def loaded_server(tmp_path: Path, key_name: str) -> Iterator[tuple[Served, Mix]]:
    """Run ``flownb serve`` over the echo and blog-intro flows (logs under ``tmp_path/logs``)
    with a fresh key; yield the server and a request mix aimed at it."""
    flows = tmp_path / "flows"
    flows.mkdir()
    write_flow(flows / "echo.json", _echo_flow())
    (flows / "blog-intro.json").write_bytes((FLOWS / "blog-intro.json").read_bytes())
    env = dict(os.environ)
    key = create_key(env, key_name)
    with serve(flows, env, tmp_path / "logs", extra=["--max-body-bytes", str(MAX_BODY)]) as server:
        yield server, Mix(server.url, key)


def test_mixed_load_has_no_unexpected_status_no_lost_or_mixed_results_and_flat_memory(
    tmp_path: Path, flownb_env: Path
) -> None:
    logs = tmp_path / "logs"
    with loaded_server(tmp_path, "load") as (server, mix):
        warm = drive(mix, range(WARMUP))  # imports, caches and pools settle before measuring
        started = time.monotonic()
        # Sampled often enough that a fast run (a few seconds on a quiet machine) still gives
        # the thirds below enough points: reading /proc 50 times a second costs nothing.
        with Sampler(server.process.pid, every=0.02) as sampler:
            outcomes = drive(mix, range(WARMUP, WARMUP + REQUESTS))
        elapsed = time.monotonic() - started
        assert server.process.poll() is None, "the server died under load"
    record(Exposure("load", {mix.key}, [flownb_env, logs], [o.body for o in warm + outcomes]))

    everything = warm + outcomes
    by_kind = Counter(o.kind for o in everything)
    bad = [o for o in everything if o.problem]
    assert len(everything) == WARMUP + REQUESTS
    assert not bad, f"{len(bad)} of {len(everything)} responses wrong, e.g.:\n" + "\n".join(
        f"[{o.kind}] {o.problem}" for o in bad[:15]
    )
    # Every kind of request was exercised in volume.
    assert all(by_kind[k] >= 50 for k, _, _ in mix.kinds), by_kind

    samples = sampler.samples
    assert len(samples) >= 30, f"too few memory samples ({len(samples)}) in {elapsed:.1f}s"
    third = len(samples) // 3
    first, last = statistics.median(samples[:third]), statistics.median(samples[-third:])
    mib = 1024 * 1024
    # Flat: the last third may not exceed the first by more than 10 % (+4 MiB for allocator
    # noise). A per-request leak of even 2 KiB over these requests would exceed that.
    assert last <= first * 1.10 + 4 * mib, (
        f"server RSS grew from {first / mib:.1f} MiB to {last / mib:.1f} MiB "
        f"over {REQUESTS} requests"
    )
    print(
        f"\nload: {len(everything)} requests in {elapsed:.1f}s "
        f"({REQUESTS / elapsed:.0f} req/s measured), kinds {dict(by_kind)}, "
        f"RSS {first / mib:.1f} -> {last / mib:.1f} MiB"
    )
