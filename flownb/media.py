"""Where generated images live: ``FLOWNB_HOME/media``, named by an unguessable digest."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

__all__ = ["MEDIA_NAME", "MediaStore"]

# What a media file name looks like; anything else is refused before touching the disk.
MEDIA_NAME = re.compile(r"[0-9a-f]{32,64}\.(png|jpg|jpeg|webp|gif)")


class MediaStore:
    """A folder of generated images.

    Files are written atomically (temp file + rename), so a reader never sees half an image and
    two writers of the same name never corrupt each other.
    """

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

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
        """Store ``data`` as ``name`` and return the name."""
        path = self.path_for(name)
        self.directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-")
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
