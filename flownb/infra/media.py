"""Where generated images live: ``FLOWNB_HOME/media``, named by an unguessable digest.

The folder has a size cap (``max_bytes``; 0: none): when a write takes it over, the images
used longest ago (a file's modification time is its last use: written, or read back from the
call cache) are deleted until it is at 90% of the cap, never the image just written nor any
image of a run in progress (written or used since the earliest run still going in this process
began: see :func:`pin_run`); a run that had to go over the cap, or that deleted earlier runs'
images, says so once as it ends. Whoever
keeps names of images (the call cache) hears which were deleted (:func:`on_evict`), and drops
what named them.

A name is an HMAC of the image's source (the prompt, or the image's bytes) keyed by a secret
made once per FLOWNB_HOME (``FLOWNB_HOME/media.key``, mode 0600): the same prompt gets the same
name within one home, so repeats and caches still hit, but nobody without the secret can work a
name out from a prompt they guess (and so cannot test whether it was run, or fetch its image).
"""

from __future__ import annotations

import os
import re
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import ConfigError
from ..show.display import MAX_IMAGE_BYTES, read_media_with
from ..show.notices import warn
from .private import private_dir
from .writable import unwritable

__all__ = [
    "IMAGE_TYPES",
    "MAX_IMAGE_BYTES",
    "MEDIA_KEY_FILE",
    "MEDIA_NAME",
    "MediaStore",
    "NotAnImage",
    "content_type",
    "image_ext",
    "mark_used",
    "on_evict",
    "pin_run",
    "read_home_media",
    "read_media",
]

MEDIA_KEY_FILE = "media.key"

# What a media file name looks like; anything else is refused before touching the disk.
MEDIA_NAME = re.compile(r"[0-9a-f]{32,64}\.(png|jpg|jpeg|webp|gif)")


# The image types kept (Pillow's format name -> the extension a media name ends in), and each
# extension's true Content-Type: what the /media route serves a file as.
IMAGE_TYPES = {"PNG": "png", "JPEG": "jpg", "WEBP": "webp", "GIF": "gif"}
_CONTENT_TYPES = {
    "png": "image/png",
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "webp": "image/webp",
    "gif": "image/gif",
}


class NotAnImage(ValueError):
    """Bytes that are not an image of a type flownb keeps (PNG, JPEG, WebP, GIF), or over
    :data:`MAX_IMAGE_BYTES`; the message says which."""


def image_ext(data: bytes) -> str:
    """Return the extension of the image ``data`` holds (``png``, ``jpg``, ``webp``, ``gif``),
    as Pillow reads it (opened and verified, never by the name or a header it came with).

    Raises:
        NotAnImage: ``data`` is over the size cap, not an image Pillow opens and verifies, or
            an image of another type.
    """
    import io
    import warnings

    from PIL import Image

    if len(data) > MAX_IMAGE_BYTES:
        raise NotAnImage(f"it is over {MAX_IMAGE_BYTES} bytes")
    try:
        with warnings.catch_warnings():
            # A decompression bomb is refused as an error, not warned about.
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as image:
                kind = image.format or ""
                image.verify()
    except Exception as exc:  # Pillow raises many kinds for bytes it cannot read
        raise NotAnImage(f"its bytes are not an image ({type(exc).__name__})") from None
    ext = IMAGE_TYPES.get(kind)
    if ext is None:
        raise NotAnImage(f"it is a {kind or 'unknown'} image, not PNG, JPEG, WebP or GIF")
    return ext


def content_type(path: str | Path) -> str:
    """Return the true Content-Type of a media file, by its name's extension (which
    :func:`image_ext` gave it from its bytes): ``image/png``, ``image/jpeg``, ``image/webp`` or
    ``image/gif``; ``application/octet-stream`` for a name that is not a media name."""
    name = Path(path).name
    if not MEDIA_NAME.fullmatch(name):
        return "application/octet-stream"
    return _CONTENT_TYPES[name.rsplit(".", 1)[1]]


# Every media folder a store was opened on in this process: the only folders flownb reads images
# back from (a text that names some other file is not an image of ours).
_KNOWN: set[Path] = set()


# After eviction the folder holds at most this share of its cap: room for the next writes
# before the folder is listed again.
_LOW_WATER = 0.9

# Called with (media folder, names deleted) after each eviction: the call cache drops the
# entries that named them.
_evict_listeners: list[Callable[[Path, list[str]], None]] = []


def on_evict(listener: Callable[[Path, list[str]], None]) -> None:
    """Call ``listener(folder, names)`` whenever images are deleted to keep a folder under its
    cap (in the thread that wrote the image that took it over)."""
    _evict_listeners.append(listener)


def mark_used(path: Path) -> bool:
    """Record that the image at ``path`` was used now (its modification time: the cap deletes
    the images used longest ago first); return whether the file is there."""
    try:
        _stamp(path)
    except FileNotFoundError:
        return False
    except OSError:  # a read-only home: the file may be there, unmarked
        return path.is_file()
    return True


def _stamp(path: Path) -> None:
    # The precise clock, not the kernel's coarse file time (a few ms): an image used just after
    # another was written must not look as old as it.
    now = time.time_ns()
    os.utime(path, ns=(now, now))


class _Budget:
    """What one process knows of one media folder's size (shared by its MediaStores)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.total: int | None = None  # bytes, None until the folder is listed
        # The pin (a run's start) under which the last listing found nothing left to delete:
        # while it holds, a write over the cap only adds up (no listing per image written).
        self.stuck: int | None = None


_budgets: dict[Path, _Budget] = {}
_budgets_lock = threading.Lock()


def _budget(directory: Path) -> _Budget:
    with _budgets_lock:
        return _budgets.setdefault(directory.absolute(), _Budget())


def _listing(directory: Path) -> list[tuple[int, int, str]]:
    """Return ``(mtime in ns, size, name)`` of the folder's images, least recently used
    first."""
    files = []
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return []
    for entry in entries:
        if not MEDIA_NAME.fullmatch(entry.name):
            continue  # temp files and anything not ours are left alone
        try:
            st = entry.stat()
        except FileNotFoundError:
            continue
        files.append((st.st_mtime_ns, st.st_size, entry.name))
    files.sort()
    return files


class _Run:
    """One run in progress: when it began, and what the cap did meanwhile."""

    def __init__(self) -> None:
        self.start = time.time_ns()  # the clock _stamp and save() mark files with
        self.evicted = 0  # earlier images deleted while it ran
        self.over: tuple[int, int] | None = None  # (bytes held, cap) when pins beat the cap


_runs: list[_Run] = []
_runs_lock = threading.Lock()


def _pinned_since() -> int | None:
    """Return the start (ns) of the earliest run in progress: images written or used since are
    kept whatever the cap says; None when no run is going."""
    with _runs_lock:
        return min((run.start for run in _runs), default=None)


def _note(evicted: int, total: int, cap: int) -> None:
    with _runs_lock:
        for run in _runs:
            run.evicted += evicted
            if total > cap:
                run.over = (total, cap)


def _mb(size: int) -> str:
    return f"{size / 1024**2:.1f} MB"


@contextmanager
def pin_run() -> Iterator[None]:
    """Keep every image written or used while the block runs (a run of a flow with image
    nodes): the cap deletes none of them, so every URL the run returns still names its file
    when it ends. On leaving, one notice says if the run's images took the media folder over
    its cap (they go first at the next runs' writes) or if earlier runs' images were deleted.
    """
    run = _Run()
    with _runs_lock:
        _runs.append(run)
    try:
        yield
    finally:
        with _runs_lock:
            _runs.remove(run)
        said = []
        if run.over is not None:
            held, cap = run.over
            said.append(
                f"this run's images took the media folder to {_mb(held)}, over its cap of "
                f"{_mb(cap)} (FLOWNB_MEDIA_MAX): all were kept while it ran, and the least "
                "recently used go as later runs write theirs; raise FLOWNB_MEDIA_MAX to keep more"
            )
        if run.evicted:
            plural = "s" if run.evicted != 1 else ""
            said.append(
                f"{run.evicted} image{plural} of earlier runs were deleted to keep the media "
                "folder under its cap (FLOWNB_MEDIA_MAX); their cache entries went with them"
            )
        if said:
            warn("; ".join(said))


class MediaStore:
    """A folder of generated images, kept under ``max_bytes`` (0: no cap; see the module
    docstring).

    Files are written atomically (temp file + rename), so a reader never sees half an image and
    two writers of the same name never corrupt each other.
    """

    def __init__(
        self, directory: str | Path, key_path: str | Path | None = None, *, max_bytes: int = 0
    ) -> None:
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        # Beside the folder, not in it: the media folder is what gets served and pruned.
        self.key_path = Path(key_path) if key_path else self.directory.parent / MEDIA_KEY_FILE
        self._key: bytes | None = None
        _KNOWN.add(Path(os.path.realpath(self.directory)))

    def _secret(self) -> bytes:
        """Return this home's naming secret, creating it (0600, exactly once) on first use.

        Raises:
            ConfigError: the secret cannot be made (its folder cannot be written) or read.
        """
        if self._key is None:
            folder = self.key_path.parent
            what = f"the media key ({MEDIA_KEY_FILE})"
            try:
                private_dir(folder)
            except OSError as exc:  # FileExistsError too: the "folder" is a file
                raise unwritable(folder, exc, what) from None
            try:
                fd = os.open(self.key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                fd = None  # made before, or by another process just now: read it below
            except OSError as exc:
                raise unwritable(folder, exc, what) from None
            if fd is not None:
                import secrets  # here: `import flownb` (and `flownb --help`) need no secret

                with os.fdopen(fd, "w", encoding="ascii") as fh:
                    fh.write(secrets.token_hex(32) + "\n")
            text = ""
            for _ in range(50):  # another process may be between its create and its write
                try:
                    text = self.key_path.read_text(encoding="ascii").strip()
                except (OSError, UnicodeDecodeError) as exc:
                    raise ConfigError(
                        f"cannot read the media key {self.key_path} ({exc})"
                    ) from None
                if len(text) == 64:
                    break
                time.sleep(0.01)
            if len(text) != 64:
                raise ConfigError(
                    f"{self.key_path} is not a media key; delete it to make a new one"
                )
            self._key = bytes.fromhex(text)
        return self._key

    def name_for(self, source: bytes, ext: str) -> str:
        """Return the media name for an image made from ``source`` (a prompt with its kind, or
        the image bytes): 40 hex digits of an HMAC keyed by this home's secret, then ``.ext``."""
        import hashlib
        import hmac

        digest = hmac.new(self._secret(), source, hashlib.sha256).hexdigest()[:40]
        return f"{digest}.{ext}"

    def path_for(self, name: str) -> Path:
        """Return the file path of a media name.

        Raises:
            ValueError: ``name`` is not a media name (guards against path traversal).
        """
        if not MEDIA_NAME.fullmatch(name):
            raise ValueError(f"not a media name: {name!r}")
        return self.directory / name

    def exists(self, name: str) -> bool:
        """Return whether the media file ``name`` is stored."""
        return self.path_for(name).is_file()

    def save(self, name: str, data: bytes) -> str:
        """Store ``data`` as ``name`` and return the name.

        Raises:
            ConfigError: the media folder cannot be written.
        """
        import tempfile

        path = self.path_for(name)
        try:
            private_dir(self.directory, self.key_path.parent)
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-")  # made 0600
        except OSError as exc:
            raise unwritable(self.directory, exc, "generated images") from None
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
            if self.max_bytes:
                _stamp(path)  # on the clock mark_used uses
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        if self.max_bytes:
            self._keep_under_cap(len(data), name)
        return name

    def _keep_under_cap(self, added: int, written: str) -> None:
        """Delete the least recently used images when ``added`` bytes took the folder over its
        cap (never ``written``, the image just saved, nor an image of a run in progress: see
        :func:`pin_run`), then tell the evict listeners and the runs in progress."""
        budget = _budget(self.directory)
        cap = self.max_bytes
        pinned = _pinned_since()
        evicted: list[str] = []
        with budget.lock:
            if budget.total is not None:
                budget.total += added
                if budget.total <= cap:
                    return
                if pinned is not None and budget.stuck == pinned:
                    total = budget.total
                    _note(0, total, cap)
                    return
            files = _listing(self.directory)  # the truth: other processes write here too
            total = sum(size for _, size, _ in files)
            if total > cap:
                goal = int(cap * _LOW_WATER)
                for mtime_ns, size, name in files:
                    if total <= goal or (pinned is not None and mtime_ns >= pinned):
                        break  # least recently used first: the rest are pinned too
                    if name == written:
                        continue
                    try:
                        (self.directory / name).unlink()
                    except FileNotFoundError:
                        pass  # another process evicted it first
                    except OSError:
                        continue
                    total -= size
                    evicted.append(name)
            budget.total = total
            budget.stuck = pinned if total > cap else None
        if pinned is not None:
            _note(len(evicted), total, cap)
        if evicted:
            for listener in list(_evict_listeners):
                listener(self.directory, evicted)

    def file_url(self, name: str) -> str:
        """Return the ``file://`` URL of a stored media name."""
        return self.path_for(name).resolve().as_uri()


def read_media(path: str | Path, folders: Iterable[Path] = ()) -> bytes | None:
    """Return the bytes of the media file at ``path``, or None when it is not one: its name is
    not a media name, its folder (symbolic links resolved) is neither a media folder a
    :class:`MediaStore` was opened on in this process nor one of ``folders``, it is not a regular
    file (a FIFO, a device, a folder), or it holds more than :data:`MAX_IMAGE_BYTES`. Opened
    without blocking, so a FIFO named like an image never hangs the reader. Never raises."""
    real = Path(os.path.realpath(path))
    if not MEDIA_NAME.fullmatch(real.name):
        return None
    allowed = _KNOWN | {Path(os.path.realpath(f)) for f in folders}
    if real.parent not in allowed:
        return None
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_IMAGE_BYTES:
            return None
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(MAX_IMAGE_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if len(data) <= MAX_IMAGE_BYTES else None


def read_home_media(path: str) -> bytes | None:
    """Return the image at ``path`` when it is one of flownb's media files (see
    :func:`read_media`): in a store opened in this process, or in the media folder of this
    process's FLOWNB_HOME (a report saved earlier points there); else None."""
    from ..config.settings import home_dir, media_dir

    return read_media(path, [media_dir(home_dir())])


read_media_with(read_home_media)  # what the notebook display reads file:// images with
