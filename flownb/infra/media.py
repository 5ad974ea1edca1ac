"""Where generated images live: ``FLOWNB_HOME/media``, named by an unguessable digest.

A name is an HMAC of the image's source (the prompt, or the image's bytes) keyed by a secret
made once per FLOWNB_HOME (``FLOWNB_HOME/media.key``, mode 0600): the same prompt gets the same
name within one home, so repeats and caches still hit, but nobody without the secret can work a
name out from a prompt they guess (and so cannot test whether it was run, or fetch its image).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import stat
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from ..errors import ConfigError
from .writable import unwritable

__all__ = ["MAX_IMAGE_BYTES", "MEDIA_KEY_FILE", "MEDIA_NAME", "MediaStore", "read_media"]

MEDIA_KEY_FILE = "media.key"

# What a media file name looks like; anything else is refused before touching the disk.
MEDIA_NAME = re.compile(r"[0-9a-f]{32,64}\.(png|jpg|jpeg|webp|gif)")

# The largest image flownb reads back to show or embed (a generated image is a few MB at most).
MAX_IMAGE_BYTES = 32 * 1024 * 1024

# Every media folder a store was opened on in this process: the only folders flownb reads images
# back from (a text that names some other file is not an image of ours).
_KNOWN: set[Path] = set()


class MediaStore:
    """A folder of generated images.

    Files are written atomically (temp file + rename), so a reader never sees half an image and
    two writers of the same name never corrupt each other.
    """

    def __init__(self, directory: str | Path, key_path: str | Path | None = None) -> None:
        self.directory = Path(directory)
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
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:  # FileExistsError too: the "folder" is a file
                raise unwritable(folder, exc, what) from None
            try:
                fd = os.open(self.key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                fd = None  # made before, or by another process just now: read it below
            except OSError as exc:
                raise unwritable(folder, exc, what) from None
            if fd is not None:
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
        path = self.path_for(name)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-")
        except OSError as exc:
            raise unwritable(self.directory, exc, "generated images") from None
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return name

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
