"""The model-graded scorers: ``judge`` (a score in 0..1 by a rubric) and ``pick_best`` (which
variant's output is best), asked through flownb's providers, cached, limited and logged like
every call. An answer they cannot parse scores NaN with the raw answer as the reason, never an
exception. An image output is shown to the model as an image.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..core.local import LocalCore, local_of
from ..errors import ConfigError
from ..flowfile.template import Template
from .base import Kind, Row, Scorer, _missing, _recorded, _text
from .examples import Example, select_examples
from .judging import JudgeSetup, judge_info

if TYPE_CHECKING:
    from ..config.endpoints import Endpoint
    from ..providers.base import Provider


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


_IMAGE_EXT = {"image/png": "png", "image/jpeg": "jpg", "image/webp": "webp", "image/gif": "gif"}


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

    def flow(self) -> LocalCore:
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
        local = local_of(flow)
        self.setup.graded = local
        # A local flow says which outputs are images; a served one's are told by their values.
        self.image = local.plan.output_kinds.get(self.output) == "image" if local else None

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
            config = self.flow().config
            self._media = MediaStore(config.media_dir, max_bytes=config.media_max)
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

    def flow(self) -> LocalCore:
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
