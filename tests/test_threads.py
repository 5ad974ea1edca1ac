# ruff: noqa: F811  (pytest fixtures imported from openai_fake are parameters here)
"""Nothing lost between threads or processes: a forked child runs flows, Ctrl-C while calls are
in flight returns whole rows only (the calls finish afterwards, into the run log), and the run
log keeps every row however many threads flush it at once."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pandas as pd
import pytest

import flownb
from flownb.config.settings import event_loop_kind
from flownb.frames.run import INTERRUPTED
from flownb.infra import aio
from flownb.providers.base import Call, Generation, Provider
from flownb.runtime.runlog import RunLog
from flownb.show.progress import Progress
from flownb.testing.fake_openai import FakeOpenAI, echo
from tests.conftest import make_flow
from tests.openai_fake import fake, fake_server  # noqa: F401 (fixtures)

SAY = make_flow({"say": "say {word}"}, ["word"])


def wait_until(condition: Callable[[], bool], timeout: float = 60.0, what: str = "") -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"still waiting after {timeout:.0f} s: {what}")
        time.sleep(0.01)


@contextlib.contextmanager
def switching_often() -> Iterator[None]:
    """Have the interpreter switch threads as often as it can, so races show up."""
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(switch)


# -- fork -----------------------------------------------------------------------------------------


def _run_in_child(flow: Any, answers: Any) -> None:
    try:
        fresh = flow.run(word="from the child")
        again = flow.run(word="w0")  # answered in the parent: the child's cache has it
        answers.put(("ok", fresh["say"], sorted(again.cached), len(flownb.runs())))
    except BaseException as exc:  # reported to the parent, which fails the test with it
        answers.put(("error", repr(exc), [], 0))


@pytest.mark.skipif(sys.platform == "win32", reason="no fork on Windows")
def test_a_forked_child_runs_flows_after_a_run_in_the_parent(fake: FakeOpenAI) -> None:
    flow = flownb.load_flow(SAY, provider="openai", name="say")
    # The parent's loop thread, HTTP session, cache and run log are all in use before the fork.
    assert [r["say"] for r in flow.run_batch([{"word": f"w{i}"} for i in range(3)])] == [
        echo(f"say w{i}") for i in range(3)
    ]
    assert len(flownb.runs()) == 3

    ctx = multiprocessing.get_context("fork")
    answers = ctx.Queue()
    child = ctx.Process(target=_run_in_child, args=(flow, answers), daemon=True)
    child.start()
    try:
        status, said, cached, logged = answers.get(timeout=60)
    except Exception:  # queue.Empty: the child hung (on main, run_sync blocked for good)
        child.kill()
        raise
    finally:
        child.join(30)
    assert status == "ok", said
    assert said == echo("say from the child")
    assert cached == ["say"]
    assert logged == 5  # the parent's three rows and the child's two, in the shared file
    assert child.exitcode == 0

    # The parent goes on as before, and sees what the child logged.
    assert flow.run(word="back home")["say"] == echo("say back home")
    assert len(flownb.runs()) == 6
    # One request from the child (its second run came from the cache the parent filled).
    assert sum("from the child" in str(body) for body in fake.requests) == 1
    assert sum("say w0" in str(body) for body in fake.requests) == 1


# A process that runs work on flownb's background loop, forks a child that does too, and exits
# with a task still waiting on the loop: what it and its child print is all the test looks at.
_EXITING = """
import asyncio, os, sys
from pathlib import Path
import flownb
from flownb.infra import aio

marker = Path(sys.argv[1])
held = []

async def forever() -> None:
    try:
        await asyncio.sleep(3600)
    finally:
        marker.write_text("cancelled at exit")

async def start() -> None:
    held.append(asyncio.get_running_loop().create_task(forever()))

flow = flownb.load_flow(sys.argv[2], provider="openai", name="say")
print(flow.run(word="parent")["say"])  # an HTTP session open on the loop
aio.run_sync(start())
print(type(aio._loop).__module__.split(".")[0], flush=True)
pid = os.fork()
if pid == 0:  # the child finalizes as any script does (sys.exit, not os._exit)
    aio.run_sync(asyncio.sleep(0))
    print(flow.run(word="child")["say"])
    sys.exit(0)
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status))
"""


@pytest.mark.skipif(sys.platform == "win32", reason="no fork on Windows")
@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_the_background_loop_winds_down_at_exit_and_a_forked_child_exits_cleanly(
    fake: FakeOpenAI, tmp_path: Path, loop: str
) -> None:
    flow_file = tmp_path / "say.json"
    flow_file.write_text(json.dumps(SAY))
    marker = tmp_path / "marker"
    env = {**os.environ, "FLOWNB_EVENT_LOOP": loop, "FLOWNB_HOME": str(tmp_path / "home")}
    done = subprocess.run(
        [sys.executable, "-c", _EXITING, str(marker), str(flow_file)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [echo("say parent"), loop, echo("say child"), "child 0"]
    # The task still waiting at exit was cancelled (its finally ran) before Python finalized,
    # and nothing was said about a loop, a task or a session left open, in parent or child.
    assert marker.read_text() == "cancelled at exit"
    assert done.stderr == ""


@pytest.mark.parametrize(
    ("raw", "kind"),
    [(None, "uvloop"), ("", "uvloop"), (" AsyncIO ", "asyncio"), ("uvloop", "uvloop")],
)
def test_flownb_event_loop_setting(
    monkeypatch: pytest.MonkeyPatch, raw: str | None, kind: str
) -> None:
    if raw is None:
        monkeypatch.delenv("FLOWNB_EVENT_LOOP", raising=False)
    else:
        monkeypatch.setenv("FLOWNB_EVENT_LOOP", raw)
    assert event_loop_kind() == kind


def test_an_unknown_flownb_event_loop_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLOWNB_EVENT_LOOP", "tokio")
    with pytest.raises(flownb.ConfigError, match="FLOWNB_EVENT_LOOP must be uvloop or asyncio"):
        event_loop_kind()


# -- interrupt ------------------------------------------------------------------------------------


class HeldCalls(Provider):
    """Answers at once, except prompts with HANG: those are held until :attr:`released` is
    set, then take between ``late`` seconds (low, high) more to answer (paid calls in flight,
    which Ctrl-C lets finish)."""

    name: ClassVar[str] = "held-calls"
    cacheable: ClassVar[bool] = False

    def __init__(self, late: tuple[float, float]) -> None:
        self.late = late
        self.released = threading.Event()
        self.hanging = 0
        self.answered_late = 0

    async def generate(self, call: Call) -> Generation:
        if "HANG" not in call.prompt:
            return Generation(f"said {call.prompt}")
        self.hanging += 1
        while not self.released.is_set():
            await asyncio.sleep(0.01)
        await asyncio.sleep(random.uniform(*self.late))
        self.answered_late += 1
        return Generation(f"late {call.prompt}")


def _ctrl_c_when(condition: Callable[[], bool], then: Callable[[], None] = lambda: None) -> None:
    """In a thread: a real SIGINT (as the terminal sends it) once ``condition`` holds, then
    ``then()``."""

    def watch() -> None:
        deadline = time.monotonic() + 60
        while not condition() and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGINT)
        then()

    threading.Thread(target=watch, name="ctrl-c", daemon=True).start()


@pytest.fixture
def short_wait(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Ctrl-C waits 0.2 s at most for the cancelled run to settle."""
    monkeypatch.setattr(aio, "INTERRUPT_WAIT", 0.2)
    yield


def _words(n: int) -> list[dict[str, str]]:
    return [{"word": f"w{i}" + (" HANG" if i % 2 else "")} for i in range(n)]


def test_nothing_reaches_on_result_after_ctrl_c_returned(short_wait: None) -> None:
    provider = HeldCalls(late=(0.0, 0.1))
    flow = flownb.load_flow(SAY, provider=provider, log=False)
    batch = _words(40)
    reported: list[int] = []
    _ctrl_c_when(lambda: len(reported) == 20 and provider.hanging == 20)
    with pytest.raises(KeyboardInterrupt):
        flow.run_each(batch, lambda i, r, e: reported.append(i), concurrency=64)
    seen = list(reported)
    # Ctrl-C returned at once; the calls in flight finish afterwards (they are paid for).
    provider.released.set()
    wait_until(lambda: provider.answered_late == 20, what="the calls in flight")
    assert reported == seen  # the late answers never reached the caller's callback
    assert set(seen) >= set(range(0, 40, 2))  # every quick row was reported before Ctrl-C


def test_an_interrupted_frame_has_whole_rows_only_and_the_log_keeps_the_late_ones(
    short_wait: None,
) -> None:
    # The held calls are let go as Ctrl-C lands: the late rows end while the frame is built.
    provider = HeldCalls(late=(0.0, 0.05))
    flow = flownb.load_flow(SAY, provider=provider, name="say")
    n = 400
    df = pd.DataFrame(_words(n))
    _ctrl_c_when(
        lambda: provider.hanging == n // 2 and len(flownb.runs()) >= n // 2,
        then=provider.released.set,
    )
    with switching_often(), pytest.warns(UserWarning, match="interrupted"):
        out = flow.run_dataframe(df, progress=False, concurrency=n)
    # No "error" column would mean every row finished, so each must have its output.
    errors = out["error"] if "error" in out else [pd.NA] * n
    for i, word, said, error in zip(out.index, out["word"], out["say"], errors, strict=True):
        if error is pd.NA:  # finished: with its output (a held one may end before the frame)
            assert said in (f"said say {word}", f"late say {word}"), (i, word, said)
        else:  # or marked unfinished, without one; never "done" with <NA>
            assert error == INTERRUPTED and said is pd.NA, (i, word, said, error)
    quick = ~out["word"].str.endswith("HANG")
    assert out.loc[quick, "say"].notna().all()  # every quick row is there
    # The rows that ended after Ctrl-C were paid for: the run log keeps them all.
    wait_until(lambda: provider.answered_late == n // 2, what="the calls in flight")
    wait_until(lambda: len(flownb.runs("say")) == n, what="every row in the run log")
    log = flownb.runs("say")
    assert log["error"].isna().all() and log["index"].nunique() == n


# -- run-log flush --------------------------------------------------------------------------------


class YieldingList(list):  # type: ignore[type-arg]
    """A list that gives other threads the GIL right after a slice of it is taken."""

    def __getitem__(self, index: Any) -> Any:
        taken = super().__getitem__(index)
        if isinstance(index, slice):
            time.sleep(0)  # after the copy: the window a flush without a lock leaves open
        return taken


def test_three_threads_flushing_at_once_lose_and_repeat_no_row(tmp_path: Path) -> None:
    log = RunLog(tmp_path / "runs.sqlite")
    n = 20_000
    batch = [{"word": str(i)} for i in range(n)]
    recorder = log.recorder("f", "p", batch, detailed=False)
    # Copying the pending rows lets other threads run half-way, as a free-threaded build or an
    # unlucky switch would: two flushes then meet in the window between copy and delete.
    recorder._pending = YieldingList()
    record = recorder.wrap(lambda i, r, e: None)
    failed = ValueError("boom")
    recording = threading.Event()
    recording.set()

    def produce() -> None:  # the loop thread: records every row, flushing now and then itself
        for i in range(n):
            record(i, None, failed)
            if i % 97 == 0:
                recorder.flush()
        recording.clear()

    def flush() -> None:  # a timer thread and the caller's thread, flushing as fast as they can
        while recording.is_set():
            recorder.flush()

    with switching_often():
        threads = [threading.Thread(target=f) for f in (produce, flush, flush)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    recorder.flush()
    indexes = [row[0] for _, _, _, rows in log.read() for row in rows]
    assert len(indexes) == n
    assert sorted(indexes) == list(range(n))
    assert not log.write_errors


# -- progress bars --------------------------------------------------------------------------------


class RecordingBar:
    """A tqdm-like bar that records which threads moved it."""

    def __init__(self) -> None:
        self.n = 0
        self.threads: set[str] = set()
        self.closed_by: str | None = None

    def update(self, n: int = 1) -> None:
        self.threads.add(threading.current_thread().name)
        self.n += n

    def close(self) -> None:
        self.closed_by = threading.current_thread().name


def test_a_progress_bar_is_moved_by_one_thread_whichever_threads_finish_rows() -> None:
    bar = RecordingBar()
    progress = Progress(bar, interval=0.01)
    workers = [
        threading.Thread(target=lambda: [progress.update() for _ in range(500)], name=f"w{k}")
        for k in range(4)
    ]
    for w in workers:
        w.start()
    wait_until(lambda: bar.n > 0, what="the bar moving while rows finish")
    for w in workers:
        w.join(60)
    progress.close()
    assert bar.n == 2000
    # Moved only by its updater, then (the final count) by the thread that closed it.
    assert bar.threads <= {"flownb-progress", threading.current_thread().name}
    assert "flownb-progress" in bar.threads
    assert bar.closed_by == threading.current_thread().name


def test_a_batch_progress_bar_counts_every_row(fake: FakeOpenAI) -> None:
    flow = flownb.load_flow(SAY, provider="openai", cache=False, log=False)
    with contextlib.redirect_stderr(io.StringIO()) as err:
        flow.run_batch([{"word": f"w{i}"} for i in range(40)], progress=True)
    assert "40/40" in err.getvalue()
