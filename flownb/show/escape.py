"""Text shown as the characters it is: the one place that escapes for HTML, Markdown and terminals.

A model's answer is data written by whoever steered its input; flownb shows it, never runs it:

- :func:`html_text` escapes text for HTML element content, and puts each ``$`` in a ``<span>`` of
  its own, so a front end's math typesetter (MathJax in JupyterLab, Notebook 7 and nbconvert's
  pages) sees no delimiter pair: JupyterLab typesets ``$5 and $7`` and even ``&#36;`` as math,
  but not ``<span>$</span>``. Control characters become visible symbols (``␛`` for ESC).
- :func:`no_math` wraps flownb's own HTML in an element MathJax 2 and 3 skip
  (``tex2jax_ignore mathjax_ignore``): money, labels and text inside stay as written.
- :func:`html_block` is a model's text as a block: escaped, line breaks kept, not typeset.
- :func:`md_text` escapes text for Markdown: every character CommonMark could read as markup is
  backslash-escaped, ``<`` and ``&`` become entities, and ``$`` becomes ``\\\\$`` (JupyterLab
  reads ``\\$`` as a math delimiter, jupyterlab/jupyterlab#8645).
- :func:`term_text` neutralises terminal control: escape sequences (colours, cursor moves,
  window titles, hyperlinks) and other control characters become visible symbols, so nothing
  a model wrote can move the cursor, recolour or retitle a terminal.

Markdown and HTML that flownb writes itself (headings, labels) are not escaped; what goes into
them is.
"""

from __future__ import annotations

import html
import re

__all__ = ["NO_MATH", "html_attr", "html_block", "html_text", "md_text", "no_math", "term_text"]

# The classes MathJax 3 (JupyterLab 4, Notebook 7: ``mathjax_ignore``) and MathJax 2 (nbconvert's
# HTML pages: ``tex2jax_ignore``) skip, with everything inside.
NO_MATH = "tex2jax_ignore mathjax_ignore"

# C0 controls but tab and newline, DEL, and the C1 controls (0x9b alone starts a sequence in
# some terminals). Each is shown as a symbol: C0 as its Unicode control picture (U+2400 + code,
# ESC -> ␛), DEL as ␡, C1 as ``\x9b``-style text.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x20:
        return chr(0x2400 + code)
    if code == 0x7F:
        return "\u2421"
    return f"\\x{code:02x}"


def _controls_shown(text: str) -> str:
    # A line ending written as CR LF is a line ending, not a control to show.
    return _CONTROL.sub(_visible, text.replace("\r\n", "\n"))


def term_text(text: str) -> str:
    """Return ``text`` safe to write to a terminal: every control character but newline and tab
    (so every escape sequence: ESC becomes ``␛``, and ``ESC[31m`` is shown as ``␛[31m``) is
    replaced by a visible symbol; a ``CR LF`` line ending becomes ``LF``."""
    return _controls_shown(text)


def html_text(text: str) -> str:
    """Return ``text`` as HTML element content that shows exactly these characters: ``& < > " '``
    escaped, each ``$`` in a ``<span>`` of its own (no math delimiter pair for MathJax), control
    characters shown as symbols (as :func:`term_text`). Not for attribute values
    (:func:`html_attr`)."""
    return html.escape(_controls_shown(text), quote=True).replace("$", "<span>$</span>")


def html_attr(text: str) -> str:
    """Return ``text`` escaped for a quoted HTML attribute value (a ``title``, ``alt``, ``src``):
    quotes and markup escaped, control characters shown as symbols. Attributes are never
    typeset, so ``$`` stays as it is."""
    return html.escape(_controls_shown(text), quote=True)


def no_math(markup: str, tag: str = "div", css: str = "") -> str:
    """Return flownb's own HTML ``markup`` inside a ``tag`` element of classes :data:`NO_MATH`
    (and ``css``), which the front ends' math typesetters skip."""
    classes = f"{css} {NO_MATH}".strip()
    return f'<{tag} class="{classes}">{markup}</{tag}>'


def html_block(text: str, css: str = "flownb-text") -> str:
    """Return a model's ``text`` as a block of HTML that shows it as written: escaped
    (:func:`html_text`), line breaks and spaces kept, wrapped at the width of the output area,
    in the proportional font of the page, not typeset as math."""
    return (
        f'<div class="{css} {NO_MATH}" style="white-space:pre-wrap;overflow-wrap:anywhere">'
        f"{html_text(text)}</div>"
    )


# Every ASCII punctuation character CommonMark lets a backslash escape, but ``$`` (below), and
# ``<`` and ``&`` (entities: a backslash does not stop an HTML block or an entity everywhere).
_MD_PUNCT = re.compile(r"([!\"#%'()*+,\-./:;=?@\[\\\]^_`{|}~>])")


def md_text(text: str) -> str:
    """Return ``text`` as Markdown that shows exactly these characters, in one paragraph:
    CommonMark's punctuation backslash-escaped, ``<`` and ``&`` as entities, ``$`` as ``\\\\$``
    (the form JupyterLab shows as a dollar sign: it typesets ``$...$`` and ``\\$...\\$``), line
    breaks as hard breaks, control characters shown as symbols."""
    text = _MD_PUNCT.sub(r"\\\1", _controls_shown(text))
    # After the backslashes: an entity's own "&" and ";" must stay as they are.
    text = text.replace("&", "&amp;").replace("<", "&lt;")
    text = text.replace("$", "\\\\$")
    return "\\\n".join(text.split("\n"))
