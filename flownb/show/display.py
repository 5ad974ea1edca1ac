"""How results look: plain text for terminals; Markdown and embedded images for notebooks.

A run result is shown as one display per output: a Markdown heading with the output's name, then
the text (rendered as Markdown) or the image. Images are embedded as PNG/JPEG bytes wherever the
kernel can read them (``file://`` and ``data:`` URLs, and ``http`` URLs on the loopback
interface, which the browser may not reach, e.g. on Binder); other ``http`` images are left for
the browser to load. Embedded bytes survive the notebook sanitizer, unlike ``data:`` URLs in HTML.

A results DataFrame gets an HTML view with its image columns shown as thumbnails
(:func:`display_frame`); ``%load_ext flownb`` makes that the default view of such DataFrames.
"""

from __future__ import annotations

import base64
import binascii
import html
import io
import ipaddress
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import unquote, urlparse

from ..errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "FrameView",
    "display_frame",
    "display_result",
    "image_bytes",
    "image_columns",
    "image_src",
    "is_image_url",
    "output_bundles",
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


def result_text(result: Shown) -> str:
    """Return a terminal-readable rendering: each output under its name."""
    blocks = []
    for name, value in result.entries:
        shown = f"[image] {value}" if result.is_image(name) else value
        blocks.append(f"── {name} " + "─" * max(3, 40 - len(name)) + f"\n{shown}")
    return "\n\n".join(blocks) if blocks else "(no outputs)"


def is_image_url(value: Any) -> bool:
    """Return whether ``value`` is a string that looks like an image URL (http(s), file or data)."""
    if not isinstance(value, str) or len(value) < 8:
        return False
    if value.startswith("data:image/"):
        return True
    if not value.startswith(("http://", "https://", "file://")):
        return False
    return Path(unquote(urlparse(value).path)).suffix.lower() in _IMAGE_SUFFIXES


def _is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def image_bytes(url: str, *, fetch: bool = True) -> tuple[bytes, str] | None:
    """Return ``(bytes, mime type)`` of the image at ``url``, or None when it cannot be read here.

    ``file://`` and ``data:`` URLs are read directly; ``http(s)`` URLs are fetched (briefly) only
    when they point at this machine's loopback interface and ``fetch`` is true, since a browser
    may not reach the kernel's 127.0.0.1. Never raises for an unreadable image.
    """
    parsed = urlparse(url)
    if parsed.scheme == "data":
        header, sep, payload = url.partition(",")
        if not sep or ";base64" not in header:
            return None
        try:
            data = base64.b64decode(payload, validate=False)
        except (binascii.Error, ValueError):
            return None
        return data, header[5:].split(";")[0] or "image/png"
    mime = _IMAGE_SUFFIXES.get(Path(unquote(parsed.path)).suffix.lower(), "image/png")
    if parsed.scheme == "file":
        try:
            return Path(unquote(parsed.path)).read_bytes(), mime
        except OSError:
            return None
    if parsed.scheme in ("http", "https") and fetch and _is_loopback(parsed.hostname):
        import requests

        try:
            response = requests.get(url, timeout=_FETCH_TIMEOUT)
        except requests.RequestException:
            return None
        if response.status_code != 200:
            return None
        ctype = response.headers.get("content-type", "").split(";")[0].strip()
        return response.content, ctype if ctype.startswith("image/") else mime
    return None


def image_src(url: str) -> str:
    """Return a ``src`` a browser can load: ``file://`` images are inlined as data URLs (a
    notebook page cannot read the kernel's disk); http and data URLs pass through."""
    if urlparse(url).scheme != "file":
        return url
    found = image_bytes(url, fetch=False)
    if found is None:
        return url
    data, mime = found
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def _image_bundle(name: str, url: str) -> dict[str, Any]:
    found = image_bytes(url)
    bundle: dict[str, Any] = {"text/plain": f"[image {name}] {url}"}
    if found is not None and found[1] in _NATIVE_IMAGE:
        data, mime = found
        bundle[mime] = base64.b64encode(data).decode("ascii")
    else:
        src = image_src(url)
        bundle["text/html"] = (
            f'<img src="{html.escape(src, quote=True)}" alt="{html.escape(name, quote=True)}" '
            f'style="max-width:480px"/>'
        )
    return bundle


def output_bundles(result: Shown) -> list[Bundle]:
    """Return the display bundles of a result: for each output, a Markdown heading with its name
    (and the text, as Markdown), then for an image output an image bundle.

    Returns:
        ``(data, metadata)`` pairs, in output order, ready for ``publish_display_data``.
    """
    bundles: list[Bundle] = []
    for name, value in result.entries:
        badge = " *(cached)*" if name in result.cached else ""
        heading = f"#### {name}{badge}"
        if result.is_image(name):
            bundles.append(({"text/plain": f"{name}:", "text/markdown": heading}, {}))
            bundles.append((_image_bundle(name, value), {}))
        else:
            body = value if value.strip() else "*(empty)*"
            bundles.append(
                ({"text/plain": f"{name}:\n{value}", "text/markdown": f"{heading}\n\n{body}"}, {})
            )
    if not bundles:
        bundles.append(({"text/plain": "(no outputs)", "text/markdown": "*(no outputs)*"}, {}))
    return bundles


def display_result(result: Shown) -> None:
    """Publish ``result`` to the notebook, one display per output (see :func:`output_bundles`)."""
    from IPython.display import publish_display_data

    for data, metadata in output_bundles(result):
        publish_display_data(data, metadata)


def result_bundle(result: Shown) -> dict[str, str]:
    """Return a single MIME bundle of a result: Markdown (text as Markdown, images inlined as
    data URLs) and plain text. Used where one bundle is needed (e.g. nbconvert, other tools)."""
    parts = []
    for name, value in result.entries:
        badge = " *(cached)*" if name in result.cached else ""
        if result.is_image(name):
            body = (
                f'<img src="{html.escape(image_src(value), quote=True)}" '
                f'alt="{html.escape(name, quote=True)}" style="max-width:320px"/>'
            )
        else:
            body = value if value.strip() else "*(empty)*"
        parts.append(f"#### {name}{badge}\n\n{body}")
    return {
        "text/plain": result_text(result),
        "text/markdown": "\n\n".join(parts) if parts else "*(no outputs)*",
    }


# ---- DataFrames -----------------------------------------------------------------------------


def image_columns(df: pd.DataFrame, sample: int = 200) -> list[Any]:
    """Return the columns of ``df`` whose non-empty cells (the first ``sample`` of them) are all
    image URLs."""
    found = []
    for j, col in enumerate(df.columns):
        series = df.iloc[:, j]  # by position: duplicate column names stay distinct
        if series.dtype != object and str(series.dtype) not in ("string", "str"):
            continue
        seen = 0
        for value in series.head(sample * 4).tolist():
            if _missing(value):
                continue
            if not is_image_url(value):
                seen = -1
                break
            seen += 1
            if seen >= sample:
                break
        if seen > 0 and col not in found:
            found.append(col)
    return found


def _thumbnail_src(url: str, size: int) -> str:
    """Return a small data URL of the image (the kernel's files and loopback URLs), or the URL."""
    found = image_bytes(url)
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
    when the kernel can read the image, else the URL itself (a ``file://`` URL a page cannot
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
                return html.escape(value)
            src = html.escape(raw, quote=True)
            return (
                f'<img src="{src}" title="{html.escape(value[:200], quote=True)}" '
                f'style="max-width:{self.size}px;max-height:{self.size}px"/>'
            )
        return html.escape(str(value)).replace("\n", "<br/>")

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
            index=[html.escape(str(i)) for i in shown.index],
        )
        view.columns = [html.escape(str(c)) for c in shown.columns]
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
        return f'<div class="flownb-frame">{table}{note}</div>'

    def _repr_html_(self) -> str:
        return self._page_html(self.page_number)

    def __repr__(self) -> str:
        shown, start = self._rows(self.page_number)
        text = shown.to_string(max_colwidth=60)
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
    """Return ``df`` wrapped for display: image columns (found by content, or ``columns``) shown
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
