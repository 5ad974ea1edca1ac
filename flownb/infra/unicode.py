"""Text that is valid Unicode: no lone surrogates.

A Python string may hold a surrogate code point (U+D800-U+DFFF) on its own: JSON's ``"\\ud800"``
decodes to one, and so does every byte a command line could not decode as UTF-8 (Python's
``surrogateescape``). Such a string cannot be written as UTF-8, so the run log (orjson), the
call cache, a terminal and an HTTP answer all refuse it. flownb never lets one in: input that
holds one is refused with an error naming where (:func:`lone_surrogate`), and a provider's
answer that holds one is kept with U+FFFD in place of each (:func:`replace_lone_surrogates`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["REPLACEMENT", "lone_surrogate", "replace_lone_surrogates", "surrogates_in"]

REPLACEMENT = "\ufffd"

# Every surrogate code point in a Python string is a lone one: a well-formed pair decodes (from
# JSON or UTF-8) to the one character it encodes.
_SURROGATE = re.compile("[\ud800-\udfff]")


def lone_surrogate(text: str) -> str | None:
    """Return the first lone surrogate in ``text`` as an escape (``\\udcff``), or None."""
    if text.isascii():  # the common case, without a scan
        return None
    found = _SURROGATE.search(text)
    return None if found is None else f"\\u{ord(found.group()):04x}"


def replace_lone_surrogates(text: str) -> tuple[str, int]:
    """Return ``text`` with U+FFFD in place of each lone surrogate, and how many there were."""
    if text.isascii():
        return text, 0
    return _SURROGATE.subn(REPLACEMENT, text)


def surrogates_in(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """Yield ``(where, escape)`` for each string in ``value`` (a decoded JSON value: strings,
    lists, objects, their keys too) that holds a lone surrogate; ``where`` is a JSON-path-like
    name of it (``nodes[2].data.label``), from ``path``."""
    if isinstance(value, str):
        bad = lone_surrogate(value)
        if bad is not None:
            yield path or "the value", bad
    elif isinstance(value, Mapping):
        for key, item in value.items():
            name = f"{path}.{key}" if path else str(key)
            if isinstance(key, str) and (bad := lone_surrogate(key)) is not None:
                yield f"{path or 'the object'}: a key", bad
                continue
            yield from surrogates_in(item, name)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from surrogates_in(item, f"{path}[{i}]")
