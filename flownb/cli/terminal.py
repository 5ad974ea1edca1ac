"""``flownb run FLOW --var ...`` in a terminal: the text printed as the provider streams it.

Each output is printed under its name, as :func:`flownb.show.display.result_text` lays a result out
(the same header lines), its text written the moment it arrives. Outputs that stream at the same
time (independent nodes) are not interleaved: the first one to start is printed as it comes, the
others once it is done (at the end); images are printed as
``[image: SIZE FORMAT, sha256 DIGEST] URL``. Should an output end other than what was printed (it
joins several nodes, or a retry restarted it), its final text follows under its name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, TextIO

from ..runtime.events import StreamEvent
from ..show.display import image_text
from ..show.escape import term_text

if TYPE_CHECKING:
    from ..flows.base import BaseFlow
    from ..runtime.result import RunResult

__all__ = ["stream_to_terminal"]


def _header(name: str) -> str:
    # As flownb.show.display.result_text draws it.
    return term_text(f"── {name} " + "─" * max(3, 40 - len(name)))


def stream_to_terminal(flow: BaseFlow, values: Mapping[str, str], out: TextIO) -> RunResult:
    """Run ``flow`` once on validated ``values``, writing its outputs to ``out`` as they
    stream; return the result.

    Raises:
        What ``flow.run`` raises (after the text printed before the failure).
    """
    current: str | None = None  # the output being printed as it comes
    printed = ""  # what was printed of it
    blocks = 0
    result: RunResult | None = None
    for item in flow.stream(values):
        if not isinstance(item, StreamEvent):
            result = item
            continue
        name = item.output
        if item.kind != "text" or (current is not None and name != current):
            continue  # images, and other outputs, are printed at the end in order
        if current is None:
            current = name
            out.write(_header(name) + "\n")
            blocks = 1
        out.write(term_text(item.delta))  # no escape sequence a model wrote reaches the tty
        printed += item.delta
        out.flush()
    assert result is not None  # every stream ends with its result
    if current is not None:
        out.write("\n")
    for name, value in result.entries:
        if name == current and value == printed and not result.is_image(name):
            continue
        # The terminal's reader is on the machine that holds the image: its URL is printed too.
        shown = image_text(value, urls=True) if result.is_image(name) else value
        out.write(("\n" if blocks else "") + _header(name) + "\n" + term_text(shown) + "\n")
        blocks += 1
    if not result.entries:
        out.write("(no outputs)\n")
    out.flush()
    return result
