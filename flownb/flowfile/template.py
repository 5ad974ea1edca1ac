"""Single-pass ``{label}`` substitution (DESIGN.md section 1).

Every ``{label}`` of a known label is replaced by the supplied value exactly as written. The scan
happens once over the template, so text inside a value is never substituted again; ``{unknown}``,
JSON braces and ``{ label }`` with spaces stay literal; values are copied verbatim (no regex
replacement-string rules apply to them). Labels may hold spaces and punctuation; matching is
case-sensitive.

A template is compiled once per flow into literal pieces and slots, so rendering a row costs one
``str.join``: this is the engine's hot path for large batches.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from itertools import repeat

__all__ = ["Template", "render"]


class Template:
    """A prompt compiled against a set of known labels.

    ``names`` lists the labels the text uses, in order of first use.
    """

    __slots__ = ("_fixed", "_parts", "_slots", "names", "text")

    def __init__(self, text: str, labels: Iterable[str]) -> None:
        self.text = text
        known = sorted({label for label in labels}, key=len, reverse=True)
        parts: list[str] = []
        slots: list[tuple[int, str]] = []
        if known:
            # Longest label first so that, of two labels matching at one place, the longer wins.
            pattern = re.compile(r"\{(" + "|".join(map(re.escape, known)) + r")\}")
            pos = 0
            for match in pattern.finditer(text):
                parts.append(text[pos : match.start()])
                slots.append((len(parts), match.group(1)))
                parts.append("")
                pos = match.end()
            parts.append(text[pos:])
        else:
            parts.append(text)
        self._parts = parts
        self._slots = tuple(slots)
        self._fixed = sum(map(len, parts))  # the literal text's length (slots are "")
        self.names = tuple(dict.fromkeys(name for _, name in slots))

    def render(self, values: Mapping[str, str]) -> str:
        """Return the text with every known ``{label}`` replaced by ``values[label]``.

        Raises:
            KeyError: ``values`` lacks a label the template uses.
        """
        if not self._slots:
            return self.text
        parts = self._parts.copy()
        for i, name in self._slots:
            parts[i] = values[name]
        return "".join(parts)

    def render_columns(self, columns: Mapping[str, Sequence[str]], rows: int) -> list[str]:
        """Return :meth:`render` of each of ``rows`` rows of ``columns`` (label -> one value
        per row), in row order, values inserted verbatim.

        Raises:
            KeyError: ``columns`` lacks a label the template uses.
        """
        if not self._slots:
            return [self.text] * rows
        # Each row's pieces side by side (a literal piece repeated, a slot's column), joined
        # row by row: the loop runs in C, no format string is parsed per row.
        slot_at = dict(self._slots)
        pieces = [
            columns[slot_at[i]] if i in slot_at else repeat(part)
            for i, part in enumerate(self._parts)
            if part or i in slot_at
        ]
        # Not strict: the literal pieces repeat without end; the columns end together.
        return list(map("".join, zip(*pieces, strict=False)))

    def length(self, values: Mapping[str, str]) -> int:
        """Return ``len(self.render(values))`` without building the text; a label missing from
        ``values`` counts as empty (an upstream node's output, not known yet)."""
        return self._fixed + sum(len(values.get(name, "")) for _, name in self._slots)

    def length_of(self, lengths: Mapping[str, int]) -> int:
        """Return the rendered text's length when each label's value is as long as
        ``lengths`` says (0 where it does not say)."""
        return self._fixed + sum(lengths.get(name, 0) for _, name in self._slots)

    def __repr__(self) -> str:
        return f"Template({self.text!r}, names={self.names!r})"


def render(text: str, values: Mapping[str, str]) -> str:
    """Return ``text`` with every ``{label}`` of a key of ``values`` replaced, in one pass."""
    return Template(text, values).render(values)
