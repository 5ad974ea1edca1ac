"""Scorers for :func:`flownb.evaluate`: each grades one output of every (variant, input row).

Every scorer has a stable ``name`` (its column in ``report.results``) and a ``kind``:

- ``"bool"``: pass or fail (``equals``, ``contains``, ``regex``, ``is_json``, ``length`` with
  bounds, a ``python`` function returning bools);
- ``"float"``: a number (``judge`` and ``pick_best`` in 0..1, ``length`` without bounds, a
  ``python`` function returning numbers); with a ``threshold`` it also passes or fails
  (score >= threshold).

``output`` names the flow output (or any column of the results) a scorer grades. ``expected`` /
``text`` is a literal or :func:`col` naming a column of the input row. A row whose run failed
scores missing (NaN / NA) and does not pass.

``judge`` and ``pick_best`` ask a model (through flownb's providers: cached, limited and logged
like every call); an answer they cannot parse scores NaN with the raw answer as the reason,
never an exception. An image output is shown to the model as an image (see
:mod:`flownb.providers.images`); ``judge(..., examples=report.labels)`` adds people's labels to
the prompt as few-shot examples.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, TypeVar

import regex as regex_engine

from ..errors import ConfigError
from ..flowfile.template import Template
from ..flows.local import LocalFlow
from .judging import JudgeSetup, judge_info

if TYPE_CHECKING:
    from ..config.endpoints import Endpoint
    from ..providers.base import Provider

__all__ = [
    "JUDGE_MARKER",
    "PICK_MARKER",
    "Block",
    "Col",
    "JudgeScorer",
    "PickBest",
    "Scorer",
    "col",
    "contains",
    "equals",
    "human",
    "is_json",
    "judge",
    "length",
    "pick_best",
    "python",
    "regex",
]


def __dir__() -> list[str]:
    # What a user sees (``dir(S)``, tab completion): the scorers, not this module's imports.
    return sorted(__all__)


Kind = Literal["bool", "float"]
P = ParamSpec("P")
S_ = TypeVar("S_", bound="Scorer")
Row = Mapping[str, Any]
# What scoring a block of rows returns: one score per row (None: missing), and reasons (or None).
Scores = tuple[list[Any], list[str | None] | None]


class Block:
    """The rows of one variant, held as columns (name -> one value per row): the input columns,
    then the outputs (``None`` where the run failed). Row dicts are made only when asked for."""

    def __init__(
        self, columns: Mapping[str, Sequence[Any]], n: int, failed: Sequence[bool] | None = None
    ) -> None:
        self.data = dict(columns)
        self.n = n
        self.failed = failed if failed is not None else [False] * n

    def column(self, name: str) -> Sequence[Any]:
        """Return column ``name`` (all ``None`` when this variant lacks it)."""
        values = self.data.get(name)
        return values if values is not None else [None] * self.n

    def rows(self) -> Iterator[dict[str, Any]]:
        """Yield each row as a dict (column name -> value)."""
        names = list(self.data)
        for values in zip(*self.data.values(), strict=True):
            yield dict(zip(names, values, strict=True))


@dataclass(frozen=True)
class Col:
    """A reference to a column of the input row (``col("answer")``)."""

    name: str

    def __repr__(self) -> str:
        return f"col({self.name!r})"


def col(name: str) -> Col:
    """Return a reference to the input row's column ``name``, for ``expected`` / ``text``."""
    if not isinstance(name, str) or not name:
        raise ConfigError("col() takes a column name")
    return Col(name)


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


class Scorer:
    """Base class: ``name`` (its column), ``kind`` and an optional ``threshold``.

    Subclasses implement :meth:`score`, called with the rows of one variant (each row a mapping
    of the input columns and the outputs; ``None`` for a failed run's outputs).
    """

    name: str
    kind: Kind = "bool"
    threshold: float | None = None
    output: str = ""
    # How it was defined, as a call (``contains('intro', col('topic'))``): shown in reports.
    definition: str = ""
    # A float scorer whose scores are 0 or 1 and whose mean is a rate (pick_best's win rate).
    rate: bool = False

    def columns(self) -> list[str]:
        """Return the input or output columns this scorer reads (checked before a run)."""
        return [self.output] if self.output else []

    def score(self, block: Block) -> Scores:
        """Return one score per row of ``block`` and the reasons (or ``None`` when it gives
        none)."""
        raise NotImplementedError

    @property
    def pass_fail(self) -> bool:
        """Whether this scorer contributes to ``passed``."""
        return self.kind == "bool" or self.threshold is not None

    def describe(self) -> str:
        """Return how this scorer was defined (its call), for reports."""
        return self.definition or f"{type(self).__name__}(name={self.name!r})"

    def __repr__(self) -> str:
        return f"<scorer {self.name!r} ({self.kind})>"


def _show(value: Any) -> str:
    if hasattr(value, "columns") and hasattr(value, "__len__"):  # a frame: the labels given
        return f"<{len(value)} labels>"
    if isinstance(value, str | int | float | bool | Col | list | tuple | dict) or value is None:
        return repr(value)
    if callable(value):
        return str(getattr(value, "__qualname__", None) or getattr(value, "__name__", "function"))
    return repr(getattr(value, "name", None) or type(value).__name__)  # a provider: its name


def _call(function: str, *args: Any, **options: Any) -> str:
    """Return ``function(args, key=value)`` as it was called (values shown as written)."""
    parts = [_show(a) for a in args] + [f"{k}={_show(v)}" for k, v in options.items()]
    return f"{function}({', '.join(parts)})"


def _recorded(make: Callable[P, S_]) -> Callable[P, S_]:
    """Wrap a scorer factory so each scorer it makes remembers the call that made it (its
    ``definition``, shown in reports)."""

    @functools.wraps(make)
    def recorded(*args: P.args, **kwargs: P.kwargs) -> S_:
        scorer = make(*args, **kwargs)
        scorer.definition = _call(make.__name__, *args, **kwargs)
        return scorer

    return recorded


def _expected_values(value: Any, block: Block) -> Sequence[Any]:
    if isinstance(value, Col):
        return block.column(value.name)
    return [value] * block.n


class _Compare(Scorer):
    """A bool scorer comparing an output with a literal or a column, row by row."""

    def __init__(
        self,
        prefix: str,
        output: str,
        value: Any,
        test: Callable[[str, Any], bool],
        name: str | None,
    ) -> None:
        self.output = output
        self.value = value
        self.test = test
        self.name = name or f"{prefix}_{output}"

    def columns(self) -> list[str]:
        extra = [self.value.name] if isinstance(self.value, Col) else []
        return [self.output, *extra]

    def score(self, block: Block) -> Scores:
        test = self.test
        got = block.column(self.output)
        expected = _expected_values(self.value, block)
        return [
            None if _missing(g) else bool(test(g, e)) for g, e in zip(got, expected, strict=True)
        ], None


def _text(value: Any) -> str:
    return "" if _missing(value) else str(value)


@_recorded
def equals(output: str, expected: Any, *, strip: bool = True, name: str | None = None) -> Scorer:
    """Pass when the output equals ``expected`` (a literal or ``col(...)``), surrounding
    whitespace ignored unless ``strip=False``. Column ``equals_<output>``."""
    if strip:
        return _Compare(
            "equals", output, expected, lambda a, b: a.strip() == _text(b).strip(), name
        )
    return _Compare("equals", output, expected, lambda a, b: a == _text(b), name)


@_recorded
def contains(output: str, text: Any, *, case: bool = True, name: str | None = None) -> Scorer:
    """Pass when the output contains ``text`` (a literal or ``col(...)``); ``case=False``
    ignores case. Column ``contains_<output>``."""
    if case:
        return _Compare("contains", output, text, lambda a, b: _text(b) in a, name)
    return _Compare("contains", output, text, lambda a, b: _text(b).lower() in a.lower(), name)


# Seconds one regex match may take. Model output is untrusted input: a pattern that backtracks
# catastrophically on it (``(a+)+$`` over a long run of ``a``) must not hang an evaluation.
REGEX_TIMEOUT = 1.0


class _Regex(Scorer):
    """Pass when a pattern matches somewhere in the output, each match bounded in time."""

    def __init__(self, output: str, compiled: Any, name: str | None) -> None:
        self.output = output
        self.compiled = compiled
        self.name = name or f"regex_{output}"

    def score(self, block: Block) -> Scores:
        search = self.compiled.search
        scores: list[Any] = []
        reasons: list[str | None] = []
        for got in block.column(self.output):
            if _missing(got):
                scores.append(None)
                reasons.append(None)
                continue
            text = str(got)
            try:
                scores.append(search(text, timeout=REGEX_TIMEOUT) is not None)
                reasons.append(None)
            except TimeoutError:
                scores.append(None)  # an error, not a fail: scored missing, with the reason
                reasons.append(
                    f"error: the pattern did not finish matching this output ({len(text):,} "
                    f"characters) within {REGEX_TIMEOUT:g} s; it may backtrack catastrophically"
                )
        return scores, reasons if any(r is not None for r in reasons) else None


@_recorded
def regex(output: str, pattern: str, *, name: str | None = None) -> Scorer:
    """Pass when ``pattern`` matches somewhere in the output (a search, with the ``regex``
    package's syntax, a superset of ``re``'s). Column ``regex_<output>``.

    Each match may take at most :data:`REGEX_TIMEOUT` seconds: a row whose match runs longer
    (a pattern backtracking catastrophically on that output) scores missing, with the reason in
    column ``regex_<output>_reason``.

    Raises:
        ConfigError: the pattern does not compile.
    """
    try:
        compiled = regex_engine.compile(pattern)
    except regex_engine.error as exc:
        raise ConfigError(f"regex scorer: bad pattern {pattern!r}: {exc}") from None
    return _Regex(output, compiled, name)


def _parses(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


@_recorded
def is_json(output: str, *, name: str | None = None) -> Scorer:
    """Pass when the output is valid JSON. Column ``is_json_<output>``."""
    return _Compare("is_json", output, None, lambda a, _: _parses(a), name)


class _Length(Scorer):
    def __init__(self, output: str, lo: int | None, hi: int | None, name: str | None) -> None:
        self.output = output
        self.lo, self.hi = lo, hi
        self.kind = "float" if lo is None and hi is None else "bool"
        self.name = name or f"length_{output}"

    def score(self, block: Block) -> Scores:
        lo, hi = self.lo, self.hi
        scores: list[Any] = []
        for got in block.column(self.output):
            if _missing(got):
                scores.append(None)
                continue
            n = len(str(got))
            if self.kind == "float":
                scores.append(float(n))
            else:
                scores.append((lo is None or n >= lo) and (hi is None or n <= hi))
        return scores, None


@_recorded
def length(
    output: str, min: int | None = None, max: int | None = None, *, name: str | None = None
) -> Scorer:
    """The output's length in characters: a float score without bounds; with ``min`` and/or
    ``max``, pass when the length lies within them (inclusive). Column ``length_<output>``."""
    return _Length(output, min, max, name)


class _Python(Scorer):
    def __init__(self, fn: Callable[[Row], Any], name: str | None, threshold: float | None) -> None:
        if not callable(fn):
            raise ConfigError(f"python() takes a function of the row, got {type(fn).__name__}")
        self.fn = fn
        self.name: str = name or str(getattr(fn, "__name__", "python"))
        if self.name == "<lambda>":
            raise ConfigError("python(lambda ...) needs name=: the name is the score's column")
        self.threshold = threshold
        self.kind = "bool" if threshold is None else "float"

    def columns(self) -> list[str]:
        return []

    def score(self, block: Block) -> Scores:
        scores: list[Any] = []
        reasons: list[str | None] = []
        any_reason = False
        kinds: set[str] = set()
        for row, failed in zip(block.rows(), block.failed, strict=True):
            if failed:  # the run failed: nothing to grade
                scores.append(None)
                reasons.append(None)
                continue
            value = self.fn(row)
            reason = None
            if isinstance(value, tuple):
                if len(value) != 2:
                    raise ConfigError(
                        f"scorer {self.name!r} returned a tuple of {len(value)}; "
                        "return a bool, a number, or (score, reason)"
                    )
                value, reason = value
                any_reason = True
            if isinstance(value, bool):
                kinds.add("bool")
            elif isinstance(value, int | float):
                kinds.add("float")
                value = float(value)
            elif value is not None:
                raise ConfigError(
                    f"scorer {self.name!r} returned {type(value).__name__}; "
                    "return a bool, a number, or (score, reason)"
                )
            scores.append(value)
            reasons.append(None if reason is None else str(reason))
        # The function decides the kind: numbers make a float scorer (with its threshold).
        if "float" in kinds or self.threshold is not None:
            self.kind = "float"
            scores = [None if s is None else float(s) for s in scores]
        return scores, reasons if any_reason else None


@_recorded
def python(
    fn: Callable[[Row], Any], name: str | None = None, *, threshold: float | None = None
) -> Scorer:
    """Score with ``fn(row)``, where ``row`` maps the input columns and the outputs (``None``
    where the run failed). ``fn`` returns a bool (pass/fail), a number (a float score; with
    ``threshold`` it passes at or above it), or ``(score, reason)``. The column is ``name``,
    else the function's name."""
    return _Python(fn, name, threshold)


# -- model-graded scorers -----------------------------------------------------------------------

JUDGE_MARKER = "You are grading an output against a rubric."
PICK_MARKER = "You are comparing candidate outputs for the same input."

_JUDGE_TEMPLATE = f"""{JUDGE_MARKER}

Rubric:
{{rubric}}

Output to grade:
<<<
{{output}}
>>>

Reply with only a JSON object with a "score" between 0 and 1 (1 = fully meets the rubric) and
a short "reason"."""

_PICK_TEMPLATE = f"""{PICK_MARKER}

Criteria:
{{rubric}}

{{candidates}}

Reply with only a JSON object with "best", the number of the best candidate, and a short
"reason"."""


_JUDGE = Template(_JUDGE_TEMPLATE, ["rubric", "output"])
# The same prompt with the human-labelled examples (few-shot) before the output to grade.
_JUDGE_EXAMPLES = Template(
    _JUDGE_TEMPLATE.replace("\nOutput to grade:", "\n{examples}\n\nOutput to grade:"),
    ["rubric", "examples", "output"],
)
# What an image output reads as in a rubric's {output}: the image itself goes as an image part.
IMAGE_OUTPUT = "(the image shown)"
# The most labelled examples a judge puts in its prompt (see judge(examples=...)).
MAX_EXAMPLES = 6
_PICK = Template(_PICK_TEMPLATE, ["rubric", "candidates"])


def _render(rubric: str, row: Row, output: str) -> str:
    """Fill ``{output}`` and ``{column}`` placeholders of a rubric in one pass."""
    values = {k: _text(v) for k, v in row.items() if isinstance(k, str)}
    values["output"] = output
    return Template(rubric, values).render(values)


_JSON_OBJECT = re.compile(r"\{.*?\}", re.DOTALL)


def parse_answer(answer: str, field_name: str) -> tuple[Any, str]:
    """Return ``(value, reason)`` from a model's JSON answer (code fences and text around the
    object are tolerated); ``(None, raw answer)`` when no object with ``field_name`` parses."""
    for match in _JSON_OBJECT.finditer(answer):
        try:
            data = json.loads(match.group(0))
        except ValueError:
            continue
        if isinstance(data, dict) and field_name in data:
            return data[field_name], str(data.get("reason", ""))
    return None, answer


_LABEL_FIELDS = frozenset({"row", "variant", "passed", "score", "note", "labelled_at"})
# Image MIME type -> the extension of the media file a judge keeps it under.
_IMAGE_EXT = {"image/png": "png", "image/jpeg": "jpg", "image/webp": "webp", "image/gif": "gif"}


@dataclass(frozen=True)
class Example:
    """One human-labelled output a judge shows the model as a few-shot example."""

    inputs: tuple[tuple[str, str], ...]
    output: str
    passed: bool | None
    score: float | None
    note: str

    def verdict(self) -> str:
        """Return the person's label in words (``pass, score 4, note: "..."``)."""
        said = [] if self.passed is None else ["pass" if self.passed else "fail"]
        if self.score is not None:
            said.append(f"score {self.score:g}")
        if self.note:
            said.append(f"note: {json.dumps(self.note, ensure_ascii=False)}")
        return ", ".join(said)


def _cell(value: Any) -> Any:
    """Return a frame cell as a Python value, ``None`` where it is missing (NaN, NA, None)."""
    import pandas as pd

    if value is None or (not isinstance(value, list | tuple | dict) and pd.isna(value)):
        return None
    item = getattr(value, "item", None)
    return item() if callable(item) and not isinstance(value, str | bytes) else value


def select_examples(examples: Any, output: str, limit: int) -> tuple[list[Example], int]:
    """Return the labelled examples a judge of ``output`` shows (at most ``limit``) and how many
    usable labels ``examples`` holds.

    ``examples`` is a labels frame (``report.labels``: ``row``, ``variant``, ``passed``,
    ``score``, ``note``, then the input and output columns). A usable label has a ``passed`` or
    ``score`` and the graded output. The choice is deterministic: labels sorted by (variant,
    row), then taken in turn from the passes, the fails and the score-only labels, so both
    verdicts are shown when both exist.

    Raises:
        ConfigError: not a frame, or one without the graded output's column or any verdict.
    """
    import pandas as pd

    if not isinstance(examples, pd.DataFrame):
        raise ConfigError(
            f"examples= takes a labels frame (report.labels), not {type(examples).__name__}"
        )
    column = next((c for c in (output, f"{output}_output") if c in examples.columns), None)
    if column is None:
        raise ConfigError(
            f"examples= has no column {output!r} (the graded output): pass the labels of an "
            "evaluation of that output (report.labels)"
        )
    if not {"passed", "score"} & set(examples.columns):
        raise ConfigError("examples= needs a 'passed' or 'score' column (report.labels)")
    names = examples.attrs.get("flownb_inputs") or [
        c for c in examples.columns if c not in _LABEL_FIELDS and c != column
    ]
    found: list[tuple[tuple[str, str], Example]] = []
    for rec in examples.to_dict("records"):
        passed, score, got = (_cell(rec.get(k)) for k in ("passed", "score", column))
        if (passed is None and score is None) or got is None:
            continue
        inputs = tuple(
            (str(n), "" if (v := _cell(rec.get(n))) is None else str(v))
            for n in names
            if n in rec and n != column
        )
        note = _cell(rec.get("note")) or ""
        example = Example(
            inputs,
            str(got),
            None if passed is None else bool(passed),
            None if score is None else float(score),
            str(note),
        )
        found.append(((str(rec.get("variant", "")), str(rec.get("row", ""))), example))
    found.sort(key=lambda pair: pair[0])
    groups = [
        [e for _, e in found if e.passed is True],
        [e for _, e in found if e.passed is False],
        [e for _, e in found if e.passed is None],
    ]
    chosen: list[Example] = []
    while len(chosen) < limit and any(groups):
        for group in groups:
            if group and len(chosen) < limit:
                chosen.append(group.pop(0))
    return chosen, len(found)


class JudgeScorer(Scorer):
    """LLM-as-judge: one call per (variant, row); score in 0..1 and a reason."""

    kind: Kind = "float"
    # Whether the graded output is an image (None: not known until a value is seen).
    image: bool | None = None

    def __init__(
        self,
        output: str,
        rubric: str,
        model: str | None,
        provider: Provider | Endpoint | str | None,
        threshold: float | None,
        name: str | None,
        examples: Any = None,
        max_examples: int = MAX_EXAMPLES,
        endpoint: Endpoint | str | None = None,
    ) -> None:
        if not isinstance(rubric, str) or not rubric.strip():
            raise ConfigError("judge() needs a rubric: what a good output does")
        if not isinstance(max_examples, int) or isinstance(max_examples, bool) or max_examples < 1:
            raise ConfigError(f"max_examples is a whole number of at least 1, not {max_examples!r}")
        self.output = output
        self.rubric = rubric
        self.threshold = threshold
        self.name = name or f"judge_{output}"
        self.setup = JudgeSetup(model, provider, endpoint)
        self.examples: list[Example] = []
        self.labels_given = 0  # usable labels in examples=, of which self.examples are shown
        if examples is not None:
            self.examples, self.labels_given = select_examples(examples, output, max_examples)
            if not self.examples:
                raise ConfigError(
                    f"examples= holds no label with passed= or score= for output {output!r}"
                )
        self._shown_examples: str | None = None
        self._media: Any = None

    def describe(self) -> str:
        """Return how this judge was defined, and how many labels its few-shot examples rest
        on."""
        said = super().describe()
        if self.examples:
            said += f" [few-shot: {len(self.examples)} of {self.labels_given} labels]"
        return said

    def flow(self) -> LocalFlow:
        """Return the flow the judge's calls go through."""
        return self.setup.flow(f"judge:{self.name}")

    def judged_by(self) -> dict[str, str]:
        """Return who this judge's calls go to: ``endpoint`` (its name, else the provider's),
        ``model`` (as sent, defaults applied) and ``vendor`` (see
        :func:`flownb.scorers.judging.judge_info`).

        Raises:
            ConfigError: the judge's provider or endpoint cannot be set up.
        """
        return judge_info(self.flow())

    def grades(self, flow: Any) -> None:
        """Bind the flow whose outputs this judge grades: without its own ``provider=`` or
        ``endpoint=`` the judge uses that flow's provider (and, without ``model=``, its text
        model). A flow that is not local (a served flow) lends nothing: ``FLOWNB_PROVIDER``
        decides then."""
        from ..flows.local import LocalFlow

        self.setup.graded = flow if isinstance(flow, LocalFlow) else None
        # A local flow says which outputs are images; a served one's are told by their values.
        self.image = (
            flow.plan.output_kinds.get(self.output) == "image"
            if isinstance(flow, LocalFlow)
            else None
        )

    def check(self) -> None:
        """Refuse a judge that would run on the offline provider (it echoes its prompt: every
        score would be NaN), before any call.

        Raises:
            ConfigError: one line saying how to give the judge a model.
        """
        from ..providers.offline import OfflineProvider

        provider = self.flow().provider
        if isinstance(provider, OfflineProvider):
            raise ConfigError(
                f"scorer {self.name!r} would be judged by the {provider.name} provider, which "
                "only echoes its prompt: give it a model with endpoint= (a flownb.Endpoint or an "
                "endpoint's name in flownb.toml) or provider=, and model= (e.g. "
                "provider='openai', model='gpt-4o-mini'; in a scorers file endpoint = \"name\"), "
                "or run the flows it grades on a model provider"
            )
        if self.image:
            self._check_vision()

    def _check_vision(self) -> None:
        """Refuse, before any call, a judge of an image output whose provider shows the model no
        images, or whose model is known to read none.

        Raises:
            ConfigError: one line naming the judge, the output and what to change.
        """
        from ..providers.images import text_only_model

        flow = self.flow()
        provider = flow.provider
        if not provider.supports_vision:
            raise ConfigError(
                f"scorer {self.name!r} grades the image output {self.output!r}, but the "
                f"{provider.name} provider shows a model no images: judge it with provider= "
                "'openai', 'anthropic' or 'gemini' and a model that reads images"
            )
        model = provider.priced_model("text", flow.plan.steps[0].params)
        if text_only_model(model):
            raise ConfigError(
                f"scorer {self.name!r} grades the image output {self.output!r} with {model!r}, "
                "a model that reads no images: give it model= a vision model (e.g. "
                "gpt-4o-mini, claude-sonnet-4-5, gemini-2.5-flash)"
            )

    def _image_ref(self, url: str) -> str | None:
        """Return the prompt line showing the image at ``url``: its bytes kept in the judge's
        media store under a name made from them (so the prompt changes with the image), or an
        http(s) URL the kernel cannot read as it is; ``None`` when it cannot be shown."""
        from ..infra.media import MediaStore
        from ..providers.images import image_ref
        from ..show.display import image_bytes

        found = image_bytes(url)
        if found is None:
            return image_ref(url) if url.startswith(("http://", "https://")) else None
        data, mime = found
        if self._media is None:
            self._media = MediaStore(self.flow().config.media_dir)
        media: MediaStore = self._media
        name = media.name_for(data, _IMAGE_EXT.get(mime, "png"))
        if not media.exists(name):
            media.save(name, data)
        return image_ref(name)

    def _is_image(self, value: Any) -> bool:
        from ..show.display import is_image_url

        return self.image if self.image is not None else is_image_url(value)

    def _examples_text(self) -> str:
        """Return the few-shot block of the prompt (rendered once: image examples are shown
        as images)."""
        if self._shown_examples is None:
            blocks = ["Examples graded by people (grade consistently with them):"]
            for i, ex in enumerate(self.examples, start=1):
                shown = ex.output
                if self._is_image(shown):
                    shown = self._image_ref(shown) or "(image not available)"
                lines = [f"Example {i}"]
                if ex.inputs:
                    lines.append("Input: " + "; ".join(f"{k}: {v}" for k, v in ex.inputs))
                lines += ["Output:", "<<<", shown, ">>>", f"Human label: {ex.verdict()}"]
                blocks.append("\n".join(lines))
            self._shown_examples = "\n\n".join(blocks)
        return self._shown_examples

    def prompt(self, row: Row) -> str | None:
        """Return the judge prompt for ``row`` (None when its output is missing)."""
        got = row.get(self.output)
        if _missing(got):
            return None
        shown = graded = str(got)
        if self._is_image(got):
            ref = self._image_ref(graded)
            if ref is None:
                return None
            shown, graded = IMAGE_OUTPUT, ref
        values = {"rubric": _render(self.rubric, row, shown), "output": graded}
        if self.examples:
            values["examples"] = self._examples_text()
            return _JUDGE_EXAMPLES.render(values)
        return _JUDGE.render(values)

    def parse(self, answer: str | None) -> tuple[float, str]:
        """Return ``(score, reason)``; NaN and the raw answer when it does not parse."""
        if answer is None:
            return math.nan, ""
        value, reason = parse_answer(answer, "score")
        try:
            score = float(value)
        except (TypeError, ValueError):
            return math.nan, answer
        if not 0.0 <= score <= 1.0:
            return math.nan, answer
        return score, reason


class PickBest(JudgeScorer):
    """One call per input row that sees every variant's output and names the best: 1.0 for
    the chosen variant, 0.0 for the others (the summary's mean is a win rate)."""

    rate = True

    def flow(self) -> LocalFlow:
        """Return the flow the picker's calls go through."""
        return self.setup.flow(f"pick_best:{self.name}")

    def prompt_all(self, row: Row, outputs: Sequence[Any]) -> str | None:
        """Return the prompt comparing ``outputs`` (one per variant) for one input row; image
        outputs are shown as images."""
        if any(_missing(o) for o in outputs):
            return None
        if any(self._is_image(o) for o in outputs):
            refs = [self._image_ref(str(o)) for o in outputs]
            if any(r is None for r in refs):
                return None
            outputs = refs
        candidates = "\n\n".join(
            f"Candidate {i}:\n<<<\n{o}\n>>>" for i, o in enumerate(outputs, start=1)
        )
        return _PICK.render({"rubric": _render(self.rubric, row, ""), "candidates": candidates})

    def parse_pick(self, answer: str | None, n: int) -> tuple[list[float], str]:
        """Return one score per candidate (1.0 for the best) and the reason; NaN for all and
        the raw answer when the answer does not name a candidate."""
        if answer is None:
            return [math.nan] * n, ""
        value, reason = parse_answer(answer, "best")
        try:
            best = int(value)
        except (TypeError, ValueError):
            best = 0
        if not 1 <= best <= n:
            return [math.nan] * n, answer
        return [1.0 if i == best else 0.0 for i in range(1, n + 1)], reason


@_recorded
def judge(
    output: str,
    rubric: str,
    model: str | None = None,
    provider: Provider | Endpoint | str | None = None,
    *,
    endpoint: Endpoint | str | None = None,
    threshold: float | None = None,
    name: str | None = None,
    examples: Any = None,
    max_examples: int = MAX_EXAMPLES,
) -> JudgeScorer:
    """Grade ``output`` with a model against ``rubric`` (which may use ``{output}`` and the
    input row's ``{column}``s): a score in 0..1 and a reason (column ``judge_<output>`` and
    ``judge_<output>_reason``).

    Who judges: ``endpoint`` (a :class:`~flownb.Endpoint`, or the name of one in
    ``flownb.toml``) or ``provider`` (a provider name or instance; an endpoint given as
    ``provider`` counts as ``endpoint``) with ``model`` (else that provider's default model).
    Without either, the judge uses the provider of the flow it grades (the first variant's) and,
    without ``model``, that flow's text model. A judge on another vendor than the variants it
    grades avoids self-preference; reports name each judge's endpoint and model and say when
    it shares a vendor with a variant. A judge that would run offline is refused before any
    call. An unparseable answer scores NaN with the raw answer as the reason.

    An image output is shown to the model as an image (OpenAI, Anthropic and Gemini; the
    bytes sent inline). A judge whose provider shows no images, or whose model is known to read
    none, is refused before any call.

    ``examples`` (``report.labels``) puts people's labels in the prompt as few-shot examples:
    at most ``max_examples``, chosen as :func:`select_examples` says. They are part of the
    prompt, so of the cache key: other examples, other calls.

    Raises:
        ConfigError: no rubric, ``examples`` without a usable label, or both ``endpoint`` and
            ``provider``.
    """
    return JudgeScorer(
        output, rubric, model, provider, threshold, name, examples, max_examples, endpoint
    )


@_recorded
def pick_best(
    output: str,
    rubric: str,
    model: str | None = None,
    provider: Provider | Endpoint | str | None = None,
    *,
    endpoint: Endpoint | str | None = None,
    name: str | None = None,
) -> PickBest:
    """Ask a model, once per input row, which variant's ``output`` is best by ``rubric``:
    1.0 for the chosen variant and 0.0 for the others (column ``pick_best_<output>``). With
    two variants this is pairwise judging. ``endpoint``, ``provider`` and ``model`` are chosen
    as for :func:`judge`.

    Raises:
        ConfigError: no rubric, or both ``endpoint`` and ``provider``.
    """
    return PickBest(
        output, rubric, model, provider, None, name or f"pick_best_{output}", endpoint=endpoint
    )


class _Human(Scorer):
    """A column read from the evaluation's human labels (see ``report.label``), not computed:
    NaN until a row is labelled. No threshold, so it never decides ``passed``."""

    kind: Kind = "float"

    def __init__(self, field: Literal["passed", "score"], name: str | None) -> None:
        if field not in ("passed", "score"):
            raise ConfigError(f"human() reads 'passed' or 'score', not {field!r}")
        self.name = name or ("human" if field == "passed" else "human_score")
        # The report fills the column from its labels; this marks which field it reads.
        self.output = f"labels:{field}"

    def columns(self) -> list[str]:
        return []

    def score(self, block: Block) -> Scores:
        return [None] * block.n, None


def human(field: Literal["passed", "score"] = "passed", *, name: str | None = None) -> Scorer:
    """The human labels as a scorer column (``human``, or ``human_score`` for
    ``field="score"``): 1.0 / 0.0 for a pass / fail label, or the label's score; NaN where the
    row is not labelled. It follows ``report.label`` and ``report.review``."""
    return _Human(field, name)
