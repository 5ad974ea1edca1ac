"""CallCache.put_answers, the bulk write for a provider batch's answers: what it stores reads back
exactly as what put_many stores, whatever the generation holds (an unknown price, text orjson
refuses, a cut-short answer), and a reopened cache finds it."""

from __future__ import annotations

import math
from pathlib import Path

from flownb.providers.base import Generation
from flownb.runtime.cache import CallCache

ANSWERS = {
    "plain": Generation(
        "hello", model="m", usage={"prompt_tokens": 3, "total_tokens": 5}, cost=0.25
    ),
    "unpriced": Generation("no price", model="m", cost=math.nan),
    "odd": Generation(
        "lone \ud800 surrogate",
        cost=math.inf,
        provider_s=math.nan,
        prompt_cache_saved=-math.inf,
        finish_reason="length",
    ),
    "not priced yet": Generation('é "quoted"', cost=None, prompt_cache_saved=0.125),
    "huge": Generation("big usage", usage={"prompt_tokens": 2**70}, cost=1.0),
}


def _same(a: Generation | None, b: Generation | None) -> bool:
    # repr: NaN equals NaN there, where == says it does not.
    return repr(a) == repr(b)


def test_put_answers_reads_back_as_put_many_and_survives_a_reopen(tmp_path: Path) -> None:
    by_many = CallCache(tmp_path / "many" / "cache.sqlite")
    by_answers = CallCache(tmp_path / "answers" / "cache.sqlite")
    by_many.put_many(ANSWERS.items())
    by_answers.put_answers(ANSWERS.items())
    for key in ANSWERS:
        assert _same(by_answers.get(key), by_many.get(key)), key
    assert by_answers.get("unpriced").cost != by_answers.get("unpriced").cost  # type: ignore[union-attr]  # NaN, not None
    by_answers.close()
    reopened = CallCache(tmp_path / "answers" / "cache.sqlite")
    assert len(reopened) == len(ANSWERS)
    found = reopened.get_many(ANSWERS)
    assert all(_same(found[key], by_many.get(key)) for key in ANSWERS)
    reopened.close()
    by_many.close()
