"""How results look: plain text for terminals; HTML and embedded images for notebooks.

A run result is shown as one display per output: a heading with the output's name, then the text
as the characters the model wrote (escaped: never read as Markdown, HTML or math; see
:mod:`flownb.show.escape`) or the image. Only an image node's output is an image. Its bytes are
embedded as PNG/JPEG wherever the kernel can read them (``data:`` URLs, files of flownb's own
media store, and ``http`` URLs on the loopback interface, which the browser may not reach, e.g.
on Binder); other ``http`` images are left for the browser to load. Embedded bytes survive the
notebook sanitizer, unlike ``data:`` URLs in HTML.

A results DataFrame gets an HTML view with its image columns shown as thumbnails
(:func:`display_frame`); ``%load_ext flownb`` makes that the default view of such DataFrames.
A frame's image columns are those a flownb run marked as images, or, in a frame that lost that
mark (written to CSV and read back), columns naming files of flownb's media store; a frame is
never shown by fetching anything (a URL a model wrote into a cell is text).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import ipaddress
import re
from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import unquote, urlparse

from ..errors import ConfigError
from .escape import html_attr, html_block, html_text, no_math, term_text

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "FLOWNB_FRAME_ATTR",
    "IMAGE_COLUMNS_ATTR",
    "MAX_IMAGE_BYTES",
    "FrameView",
    "display_frame",
    "display_result",
    "edge_rows",
    "frame_html",
    "frame_text",
    "image_bytes",
    "image_columns",
    "image_label",
    "image_src",
    "image_text",
    "is_image_url",
    "is_media_file_url",
    "names_media_files",
    "output_bundles",
    "read_media_with",
    "result_bundle",
    "result_text",
    "thumbnail_src",
]

Bundle = tuple[dict[str, Any], dict[str, Any]]


class Shown(Protocol):
    """What this module reads of a :class:`flownb.runtime.result.RunResult` (which imports this
    module
    to display itself, so this side names only the members it uses)."""

    @property
    def entries(self) -> Iterable[tuple[str, str]]:
        """Every output's ``(name, output)``, in node order."""

    @property
    def cached(self) -> frozenset[str]:
        """The outputs served from the cache."""

    def is_image(self, name: str) -> bool:
        """Whether output ``name`` is an image URL."""


_IMAGE_SUFFIXES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
}
# Bundle keys IPython and Jupyter render natively as images; others go through HTML.
_NATIVE_IMAGE = ("image/png", "image/jpeg", "image/gif")
_FETCH_TIMEOUT = 5.0
# Scoped to flownb's tables: cells, headers and index labels read from the left.
_LEFT = (
    "<style>.flownb-frame table.dataframe td, .flownb-frame table.dataframe th"
    "{text-align:left;vertical-align:top}</style>"
)


def result_text(result: Shown, *, urls: bool = False) -> str:
    """Return a terminal-readable rendering: each output under its name, with every control
    character a model wrote shown as a symbol (see :func:`flownb.show.escape.term_text`), and
    each image as :func:`image_label` describes it, followed by its URL when ``urls`` (a
    terminal's reader is on the machine that holds the file; a printed result in a notebook is
    saved with it, so it names no path by default)."""
    blocks = []
    for name, value in result.entries:
        shown = image_text(value, urls=urls) if result.is_image(name) else value
        blocks.append(f"── {name} " + "─" * max(3, 40 - len(name)) + f"\n{shown}")
    return term_text("\n\n".join(blocks)) if blocks else "(no outputs)"


def is_image_url(value: Any) -> bool:
    """Return whether ``value`` is a string that looks like an image URL (http(s), file or data).

    Looks only: whether it is an image is its node's kind (an image node's output), never what
    a text says; see :func:`image_bytes` for what is read."""
    if not isinstance(value, str) or len(value) < 8:
        return False
    if value.startswith("data:image/"):
        return True
    if not value.startswith(("http://", "https://", "file://")):
        return False
    return Path(unquote(urlparse(value).path)).suffix.lower() in _IMAGE_SUFFIXES


# What a file of flownb's media store is named (the same pattern as
# flownb.infra.media.MEDIA_NAME, which sits above this layer; a test holds them equal).
MEDIA_FILE_NAME = re.compile(r"[0-9a-f]{32,64}\.(png|jpg|jpeg|webp|gif)")


def is_media_file_url(value: Any) -> bool:
    """Return whether ``value`` is a ``file://`` URL named like a file of flownb's media store.

    Looks only at the text: whether the file is really one of the store's is decided when it
    is read (:func:`image_bytes`, which reads nothing else)."""
    if not isinstance(value, str) or not value.startswith("file://"):
        return False
    parsed = urlparse(value)
    if parsed.netloc not in ("", "localhost"):
        return False
    return MEDIA_FILE_NAME.fullmatch(Path(unquote(parsed.path)).name) is not None


def _is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# The largest image flownb reads back to show or embed (a generated image is a few MB at most).
MAX_IMAGE_BYTES = 32 * 1024 * 1024


def _no_media(path: str) -> bytes | None:
    return None


# How a ``file://`` image is read back: only through the media store, which plugs its reader in
# when it is imported (:func:`flownb.infra.media.read_home_media`; it sits above this layer).
# Until then no file is read at all.
_read_media: Callable[[str], bytes | None] = _no_media


def read_media_with(reader: Callable[[str], bytes | None]) -> None:
    """Set how :func:`image_bytes` reads a ``file://`` image back (the media store's reader)."""
    global _read_media
    _read_media = reader


def _fetch(url: str) -> tuple[bytes, str] | None:
    """Return an image served on this machine's loopback interface, at most
    :data:`MAX_IMAGE_BYTES`, or None."""
    import requests

    try:
        with requests.get(url, timeout=_FETCH_TIMEOUT, stream=True) as response:
            if response.status_code != 200:
                return None
            ctype = response.headers.get("content-type", "").split(";")[0].strip()
            data = b""
            for chunk in response.iter_content(64 * 1024):
                data += chunk
                if len(data) > MAX_IMAGE_BYTES:
                    return None
    except requests.RequestException:
        return None
    return data, ctype


def image_bytes(url: str, *, fetch: bool = True) -> tuple[bytes, str] | None:
    """Return ``(bytes, mime type)`` of the image at ``url``, or None when it cannot be read here.

    Call it only for an image node's output: a ``data:`` URL is decoded; a ``file://`` URL is
    read only when it names a file in flownb's media store (a regular file, at most
    :data:`MAX_IMAGE_BYTES`; see :func:`flownb.infra.media.read_media`),
    never any other path; ``http(s)`` URLs are fetched (briefly, size capped) only when they
    point at this machine's loopback interface and ``fetch`` is true, since a browser may not
    reach the kernel's 127.0.0.1. Never raises for an unreadable image.
    """
    parsed = urlparse(url)
    if parsed.scheme == "data":
        header, sep, payload = url.partition(",")
        if not sep or ";base64" not in header or len(payload) > MAX_IMAGE_BYTES * 4 // 3 + 4:
            return None
        try:
            data = base64.b64decode(payload, validate=False)
        except (binascii.Error, ValueError):
            return None
        return data, header[5:].split(";")[0] or "image/png"
    mime = _IMAGE_SUFFIXES.get(Path(unquote(parsed.path)).suffix.lower(), "image/png")
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            return None
        stored = _read_media(unquote(parsed.path))
        return None if stored is None else (stored, mime)
    if parsed.scheme in ("http", "https") and fetch and _is_loopback(parsed.hostname):
        found = _fetch(url)
        if found is None:
            return None
        return found[0], found[1] if found[1].startswith("image/") else mime
    return None


def _image_kind(data: bytes, mime: str) -> str:
    """``512x512 PNG``: the image's size and format as Pillow reads them from its header, else
    its length and MIME type."""
    try:
        from PIL import Image

        with Image.open(io.BytesIO(data)) as img:
            return f"{img.width}x{img.height} {img.format or mime}"
    except Exception:  # bytes Pillow cannot read are still described, never an error
        return f"{len(data):,} bytes {mime}"


def image_label(url: str, name: str | None = None) -> str:
    """Return how an image node's output ``url`` reads as text wherever the text may be kept (a
    notebook's ``text/plain``, a printed result, a frame's text view, a tooltip).

    An image the kernel can read (a file of flownb's media store, a ``data:`` URL) is described by
    its bytes: ``[image NAME: 512x512 PNG, sha256 b0330ead9836]``. That holds no path of the
    machine that made it (a media file lives in its author's ``FLOWNB_HOME``), and the same image
    reads the same on every machine, so a reader of a saved notebook can still tell images apart
    and check one. An ``http(s)`` URL, which any reader can open, is kept: ``[image NAME] URL``;
    a ``file://`` URL that cannot be read here is named by its file name alone. Never raises.
    """
    head = f"image {name}" if name else "image"
    found = image_bytes(url, fetch=False) if isinstance(url, str) else None
    if found is not None:
        data, mime = found
        digest = hashlib.sha256(data).hexdigest()[:12]
        return f"[{head}: {_image_kind(data, mime)}, sha256 {digest}]"
    parsed = urlparse(url) if isinstance(url, str) else None
    if parsed is not None and parsed.scheme == "file":
        return f"[{head}: {PurePosixPath(unquote(parsed.path)).name}, not readable here]"
    return f"[{head}] {url}"


def image_text(url: str, *, urls: bool = False) -> str:
    """Return an image output as a line of text: its :func:`image_label`, then ``url`` when
    ``urls`` and the label does not hold it already."""
    label = image_label(url)
    return f"{label} {url}" if urls and not label.endswith(f" {url}") else label


def image_src(url: str) -> str:
    """Return a ``src`` a browser can load for an image node's output ``url``: a ``file://``
    image of flownb's media store inlined as a data URL (a notebook page cannot read the
    kernel's disk); http and data URLs pass through; any other ``file://`` URL gives ``""``
    (a page must never be pointed at a local file)."""
    if urlparse(url).scheme != "file":
        return url
    found = image_bytes(url, fetch=False)
    if found is None:
        return ""
    data, mime = found
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def _image_html(name: str, url: str, width: int) -> str:
    """An ``<img>`` of an image node's output, or its URL as text when no page could load it."""
    src = image_src(url)
    if not src:
        return f"<div>{html_text(image_label(url, name))}</div>"
    return f'<img src="{html_attr(src)}" alt="{html_attr(name)}" style="max-width:{width}px"/>'


def _image_bundle(name: str, url: str) -> dict[str, Any]:
    found = image_bytes(url)
    bundle: dict[str, Any] = {"text/plain": term_text(image_label(url, name))}
    if found is not None and found[1] in _NATIVE_IMAGE:
        data, mime = found
        bundle[mime] = base64.b64encode(data).decode("ascii")
    else:
        bundle["text/html"] = no_math(_image_html(name, url, 480))
    return bundle


def _heading(name: str, cached: bool) -> str:
    badge = " <em>(cached)</em>" if cached else ""
    return f'<h4 class="flownb-output-name">{html_text(name)}{badge}</h4>'


def _text_html(value: str) -> str:
    return html_block(value) if value.strip() else "<em>(empty)</em>"


def output_bundles(result: Shown) -> list[Bundle]:
    """Return the display bundles of a result: for each output, an HTML heading with its name
    and the text shown as the characters it is (escaped, never read as Markdown or HTML or math:
    see :mod:`flownb.show.escape`), then for an image output an image bundle.

    Returns:
        ``(data, metadata)`` pairs, in output order, ready for ``publish_display_data``.
    """
    bundles: list[Bundle] = []
    for name, value in result.entries:
        heading = _heading(name, name in result.cached)
        if result.is_image(name):
            named = {"text/plain": term_text(f"{name}:"), "text/html": no_math(heading)}
            bundles.append((named, {}))
            bundles.append((_image_bundle(name, value), {}))
        else:
            bundles.append(
                (
                    {
                        "text/plain": term_text(f"{name}:\n{value}"),
                        "text/html": no_math(heading + _text_html(value)),
                    },
                    {},
                )
            )
    if not bundles:
        bundles.append(({"text/plain": "(no outputs)", "text/html": "<em>(no outputs)</em>"}, {}))
    return bundles


def display_result(result: Shown) -> None:
    """Publish ``result`` to the notebook, one display per output (see :func:`output_bundles`)."""
    from IPython.display import publish_display_data

    for data, metadata in output_bundles(result):
        publish_display_data(data, metadata)


def result_bundle(result: Shown) -> dict[str, str]:
    """Return a single MIME bundle of a result: HTML (each output's name, then its text as
    written or its image inlined as a data URL) and plain text. Used where one bundle is
    needed (e.g. nbconvert, other tools)."""
    parts = []
    for name, value in result.entries:
        body = _image_html(name, value, 320) if result.is_image(name) else _text_html(value)
        parts.append(_heading(name, name in result.cached) + body)
    return {
        "text/plain": result_text(result),
        "text/html": no_math("".join(parts)) if parts else "<em>(no outputs)</em>",
    }


# ---- DataFrames -----------------------------------------------------------------------------


# Where a results frame names its image columns (the columns of image nodes' outputs); a frame
# that has it is never searched by content.
IMAGE_COLUMNS_ATTR = "flownb_images"
# Set (True) on every other frame flownb hands back that may hold model text (an evaluation's
# results, runs and summary, the run log): after ``%load_ext flownb`` it is shown by
# :func:`frame_html`. In ``attrs``, so frames derived from it (a filter, ``head()``) keep it.
FLOWNB_FRAME_ATTR = "flownb_frame"


def frame_html(df: pd.DataFrame) -> str | None:
    """Return pandas' own HTML view of ``df`` (its number formats, truncation and escaping) with
    every ``$`` shown as written: each in a ``<span>`` of its own, in an element the front ends'
    math typesetters skip (pandas escapes markup, but ``$5 and $7`` would be typeset as math).
    None when pandas gives no HTML view (``display.notebook_repr_html`` off)."""
    shown = df._repr_html_()
    if shown is None:
        return None
    # pandas writes no "$" of its own (tags, classes and its scoped style have none), so every
    # one is a cell's, an index label's or a column name's.
    return no_math(shown.replace("$", "<span>$</span>"), css="flownb-frame")


def image_columns(df: pd.DataFrame, sample: int = 200) -> list[Any]:
    """Return the image columns of ``df``: those a flownb run named in ``df.attrs`` (its image
    nodes' outputs; a text output is never an image, whatever it says), else, for a frame from
    elsewhere (a results frame written to CSV and read back), the columns whose non-empty cells
    (the first ``sample`` of them) all name files of flownb's media store. An ``http`` or
    ``data:`` URL in an unmarked frame is text: a model may have written it."""
    named = df.attrs.get(IMAGE_COLUMNS_ATTR)
    if isinstance(named, list | tuple):
        return [c for c in dict.fromkeys(named) if c in df.columns]
    found = []
    for j, col in enumerate(df.columns):
        series = df.iloc[:, j]  # by position: duplicate column names stay distinct
        if series.dtype != object and str(series.dtype) not in ("string", "str"):
            continue
        if names_media_files(series.head(sample * 4).tolist(), sample) and col not in found:
            found.append(col)
    return found


def names_media_files(values: Iterable[Any], sample: int = 200) -> bool:
    """Return whether the first ``sample`` non-empty ``values`` all name files of flownb's media
    store, and there is one: how a column without flownb's mark (a pandas frame read back from
    CSV, any polars frame) is told to hold images."""
    seen = 0
    for value in values:
        if _missing(value):
            continue
        if not is_media_file_url(value):
            return False
        seen += 1
        if seen >= sample:
            break
    return seen > 0


def edge_rows(height: int, limit: int | None) -> set[int]:
    """Return the rows of a frame of ``height`` rows that a view showing at most its first and
    last ``limit`` rows can show (every row when ``limit`` is None)."""
    if limit is None or height <= limit:
        return set(range(height))
    return set(range(limit)) | set(range(height - limit, height))


def _thumbnail_src(url: str, size: int) -> str:
    """Return a small data URL of the image (``data:`` URLs and media-store files), or the URL.
    Nothing is fetched to show a frame: a loopback URL is left for the browser, as any other."""
    found = image_bytes(url, fetch=False)
    if found is None:
        return url
    data, _ = found
    try:
        from PIL import Image

        with Image.open(io.BytesIO(data)) as img:
            img.thumbnail((size, size))
            out = io.BytesIO()
            img.save(out, format="PNG", optimize=True)
        data = out.getvalue()
    except Exception:  # any image Pillow cannot read: embed the bytes as they are
        pass
    return f"data:image/png;base64,{base64.b64encode(data).decode('ascii')}"


def thumbnail_src(url: str, size: int = 96) -> str:
    """Return an ``<img>`` ``src`` for a thumbnail of the image at ``url``: a small PNG data URL
    when the kernel can read the image without fetching it (a ``data:`` URL, a media-store
    file), else the URL itself (a ``file://`` URL a page cannot
    load stays as it is; callers show it as text)."""
    return _thumbnail_src(url, size)


class FrameView:
    """A DataFrame shown with its image columns as thumbnails (HTML) and as text elsewhere,
    one page of rows at a time when it is long.

    A frame longer than the page size shows one page (the first, unless ``page`` says) and a
    line naming the rows shown, the total and how to see others: :meth:`page` for another page
    as static HTML (what a saved notebook keeps), :meth:`pager` for buttons in a live notebook.

    Attributes:
        df: the DataFrame shown (not copied, not changed).
        columns: the image columns rendered as thumbnails.
        page_number: the page shown, from 1.
    """

    def __init__(
        self,
        df: pd.DataFrame,
        columns: Iterable[str] | None = None,
        *,
        size: int = 96,
        max_rows: int | None = None,
        page: int = 1,
    ) -> None:
        self.df = df
        self.columns = list(columns) if columns is not None else image_columns(df)
        self.size = size
        self.max_rows = max_rows
        self.page_number = _checked_page(page, self.pages)

    @property
    def page_size(self) -> int:
        """Rows per page: ``max_rows``, else pandas' ``display.max_rows`` (60 when unset)."""
        import pandas as pd

        return max(1, self.max_rows or pd.get_option("display.max_rows") or 60)

    @property
    def pages(self) -> int:
        """How many pages the frame has (1 for a frame that fits on one)."""
        return max(1, -(-len(self.df) // self.page_size))

    def page(self, number: int) -> FrameView:
        """Return a view of page ``number`` (from 1) of the same frame, with the same columns.

        Raises:
            ConfigError: ``number`` is not a page of this frame.
        """
        return FrameView(self.df, self.columns, size=self.size, max_rows=self.max_rows, page=number)

    def pager(self) -> Any:
        """Return an ipywidgets pager for a live notebook: the page's table, and buttons and a
        page number that show other pages (the kernel renders each page when asked)."""
        import ipywidgets as widgets

        table = widgets.HTML(self._page_html(self.page_number))
        number = widgets.BoundedIntText(
            value=self.page_number,
            min=1,
            max=self.pages,
            description="page",
            layout=widgets.Layout(width="150px"),
        )
        back = widgets.Button(description="‹ previous", layout=widgets.Layout(width="110px"))
        ahead = widgets.Button(description="next ›", layout=widgets.Layout(width="110px"))
        status = widgets.Label(f"of {self.pages}")

        def show(change: Any = None) -> None:
            table.value = self._page_html(number.value)
            back.disabled = number.value <= 1
            ahead.disabled = number.value >= self.pages

        def step(by: int) -> Callable[[Any], None]:
            def click(_: Any) -> None:
                number.value = min(self.pages, max(1, number.value + by))

            return click

        back.on_click(step(-1))
        ahead.on_click(step(1))
        number.observe(show, names="value")
        show()
        return widgets.VBox([widgets.HBox([back, number, status, ahead]), table])

    def _rows(self, number: int) -> tuple[pd.DataFrame, int]:
        """Return the rows of page ``number`` and the position of its first row."""
        start = (number - 1) * self.page_size
        return self.df.iloc[start : start + self.page_size], start

    def _cell(self, value: Any, thumbnail: bool) -> str:
        if _missing(value):
            return ""
        if thumbnail and is_image_url(value):
            raw = _thumbnail_src(value, self.size)
            if raw.startswith("file:"):  # unreadable here, and a page cannot load it: the text
                return html_text(image_label(value))
            return (
                f'<img src="{html_attr(raw)}" title="{html_attr(image_label(value)[:200])}" '
                f'style="max-width:{self.size}px;max-height:{self.size}px"/>'
            )
        return html_text(str(value)).replace("\n", "<br/>")

    def _page_html(self, number: int) -> str:
        import pandas as pd

        shown, start = self._rows(number)
        thumbs = set(self.columns)
        # Escape every cell, header and index label ourselves, then let pandas lay out the table
        # without escaping, so only our <img> tags are markup.
        view = pd.DataFrame(
            {
                j: [self._cell(v, col in thumbs) for v in shown.iloc[:, j].tolist()]
                for j, col in enumerate(shown.columns)
            },
            index=[html_text(str(i)) for i in shown.index],
        )
        view.columns = [html_text(str(c)) for c in shown.columns]
        table = view.to_html(escape=False, na_rep="")
        total = len(self.df)
        note = ""
        if total > len(shown) or number > 1:
            first, last = start + 1, start + len(shown)
            where = f"rows {first:,}–{last:,} of {total:,} (page {number} of {self.pages})"
            others = number + 1 if number < self.pages else number - 1
            note = (
                f'<p class="flownb-pages">{where}; another page: '
                f"<code>flownb.display_frame(df).page({others})</code>, or "
                "<code>.pager()</code> for buttons</p>"
            )
        # Text left-aligned (a column of sentences reads from the left), not typeset as math.
        return no_math(f"{_LEFT}{table}{note}", css="flownb-frame")

    def _repr_html_(self) -> str:
        return self._page_html(self.page_number)

    def __repr__(self) -> str:
        shown, start = self._rows(self.page_number)
        text = term_text(labelled_frame(shown, self.columns).to_string(max_colwidth=60))
        if len(shown) < len(self.df):
            text += (
                f"\n[rows {start + 1:,}–{start + len(shown):,} of {len(self.df):,}, "
                f"page {self.page_number} of {self.pages}]"
            )
        return text


def _checked_page(number: int, pages: int) -> int:
    """Return ``number`` if it is a page (1 to ``pages``).

    Raises:
        ConfigError: it is not.
    """
    if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= pages:
        raise ConfigError(f"page must be a whole number from 1 to {pages}, got {number!r}")
    return number


def labelled_frame(df: pd.DataFrame, columns: Iterable[Any]) -> pd.DataFrame:
    """Return a copy of ``df`` whose cells in ``columns`` read as :func:`image_label` says, in
    the rows a text view of it can show (the first and last ``display.max_rows``; the others,
    which pandas leaves out of its text, are not read)."""
    import pandas as pd

    wanted = set(columns)
    if not wanted:
        return df
    shown = edge_rows(len(df), pd.get_option("display.max_rows") or None)
    out = df.copy(deep=False)
    for j, col in enumerate(df.columns):
        if col not in wanted:
            continue
        values = df.iloc[:, j].tolist()
        out.isetitem(
            j,
            [
                image_label(v) if i in shown and isinstance(v, str) and is_image_url(v) else v
                for i, v in enumerate(values)
            ],
        )
    return out


def frame_text(df: pd.DataFrame) -> str:
    """Return pandas' own text view of ``df`` with its image cells (:func:`image_columns`)
    read as :func:`image_label` says, so a saved notebook's ``text/plain`` of a results frame
    holds no path of its author's machine; ``repr(df)`` for a frame without image columns."""
    columns = image_columns(df)
    return repr(labelled_frame(df, columns)) if columns else repr(df)


def _missing(value: Any) -> bool:
    """Whether a cell is empty: None, NaN or pandas' <NA> (a failed row's output)."""
    import pandas as pd

    return value is None or value is pd.NA or (isinstance(value, float) and value != value)


def display_frame(
    df: pd.DataFrame,
    columns: Iterable[str] | None = None,
    *,
    size: int = 96,
    page: int = 1,
    page_size: int | None = None,
) -> FrameView:
    """Return ``df`` wrapped for display: image columns (marked by a flownb run, media-store files
    in a frame that lost the mark, or ``columns``) shown
    as thumbnails ``size`` pixels wide in the notebook; plain text in a terminal. A frame longer
    than ``page_size`` rows (default: pandas' ``display.max_rows``) shows page ``page``; see
    :class:`FrameView` (``.page(n)``, ``.pager()``).

    Raises:
        TypeError: ``df`` is not a DataFrame.
        ConfigError: ``page`` is not a page of the frame.
    """
    import pandas as pd

    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"display_frame takes a pandas DataFrame, got {type(df).__name__}")
    return FrameView(df, columns, size=size, max_rows=page_size, page=page)
