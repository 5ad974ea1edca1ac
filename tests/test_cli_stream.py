"""``flownb run FLOW --var ...`` prints the text as it streams when stdout is a terminal (a real
pseudo-terminal here), and exactly what it always printed when stdout is not one."""

from __future__ import annotations

import os
import pty
import selectors
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from flownb.testing.fake_openai import FakeOpenAI
from tests.cli_inprocess import run_cli
from tests.conftest import make_flow, write_flow

WORDS = "one two three four five six seven eight"


@pytest.fixture(scope="module")
def streaming_fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(stream_delay=0.1) as fake:
        yield fake


def _env(fake: FakeOpenAI) -> dict[str, str]:
    return {
        **os.environ,
        "OPENAI_BASE_URL": fake.url,
        "OPENAI_API_KEY": "sk-test",
        "FLOWNB_PROVIDER": "openai",
        "FLOWNB_CACHE": "0",
    }


def _in_a_terminal(args: list[str], env: dict[str, str]) -> list[tuple[float, bytes]]:
    """Run ``python -m flownb ARGS`` with stdout on a pseudo-terminal; return what it wrote
    there, each read with the perf_counter time it was read."""
    main, child = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "flownb", *args],
        stdin=subprocess.DEVNULL,
        stdout=child,
        stderr=subprocess.PIPE,
        env=env,
    )
    os.close(child)
    reads: list[tuple[float, bytes]] = []
    deadline = time.monotonic() + 120
    # A selector, not select.select: that refuses descriptors above 1023, which a long session
    # (kernels, servers, sockets of earlier tests) reaches.
    watch = selectors.DefaultSelector()
    watch.register(main, selectors.EVENT_READ)
    try:
        while time.monotonic() < deadline:
            if not watch.select(0.5):
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(main, 4096)
            except OSError:  # the terminal closed: the process ended
                break
            if not data:
                break
            reads.append((time.perf_counter(), data))
    finally:
        watch.close()
        os.close(main)
        proc.wait(timeout=60)
        assert proc.stderr is not None
        err = proc.stderr.read().decode()
        proc.stderr.close()
    assert proc.returncode == 0, err
    return reads


def test_a_terminal_sees_the_text_as_it_streams(tmp_path: Path, streaming_fake: FakeOpenAI) -> None:
    path = write_flow(tmp_path / "story.json", make_flow({"story": "{x}"}, ["x"]))
    args = ["run", str(path), "--var", f"x={WORDS}"]
    streaming_fake.reset()
    reads = _in_a_terminal(args, _env(streaming_fake))
    [sent] = streaming_fake.streams
    shown = b"".join(data for _, data in reads).decode().replace("\r\n", "\n")
    first_text = next(t for t, data in reads if b"echo" in data)
    assert first_text < sent[-1][0]  # on the terminal before the fake sent the last word
    assert len([d for _, d in reads if d.strip()]) >= 2  # in pieces, not all at the end
    # The same layout as without a terminal (in this process: stdout is a buffer there).
    piped = run_cli(*args, env=_env(streaming_fake))
    assert piped.returncode == 0, piped.stderr
    assert shown == piped.stdout == f"── story {'─' * 35}\necho: {WORDS}\n"
    # Piped, the request did not ask for a stream: nothing changed there.
    assert "stream" not in streaming_fake.requests[-1]
    assert streaming_fake.requests[0]["stream"] is True


def test_flownb_live_0_keeps_a_terminal_unstreamed(
    tmp_path: Path, streaming_fake: FakeOpenAI
) -> None:
    path = write_flow(tmp_path / "two.json", make_flow({"a": "{x}", "b": "b {x}"}, ["x"]))
    streaming_fake.reset()
    env = {**_env(streaming_fake), "FLOWNB_LIVE": "0"}
    reads = _in_a_terminal(["run", str(path), "--var", "x=calm"], env)
    shown = b"".join(data for _, data in reads).decode().replace("\r\n", "\n")
    assert shown == f"── a {'─' * 39}\necho: calm\n\n── b {'─' * 39}\necho: b calm\n"
    assert all("stream" not in body for body in streaming_fake.requests)


def test_two_outputs_stream_without_mixing(tmp_path: Path, streaming_fake: FakeOpenAI) -> None:
    path = write_flow(tmp_path / "two.json", make_flow({"a": "{x}", "b": "b {x}"}, ["x"]))
    streaming_fake.reset()
    reads = _in_a_terminal(["run", str(path), "--var", "x=slow calm words"], _env(streaming_fake))
    shown = b"".join(data for _, data in reads).decode().replace("\r\n", "\n")
    blocks = shown.split("\n\n")
    assert sorted(blocks) == [
        f"── a {'─' * 39}\necho: slow calm words",
        f"── b {'─' * 39}\necho: b slow calm words\n",
    ] or sorted(blocks) == [
        f"── a {'─' * 39}\necho: slow calm words\n",
        f"── b {'─' * 39}\necho: b slow calm words",
    ]
