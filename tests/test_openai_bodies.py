"""The aiohttp transport encodes requests and decodes answers with orjson where it agrees with
json, and with json where it does not: what reaches the server, and what is read back, is what
json made of it before (NaN, lone surrogates, huge integers, non-ASCII text)."""

from __future__ import annotations

import json
import math

import pytest

from flownb.providers.openai.transport import _decoded, _encoded

BODIES = [
    {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "héllo ✓ 日本"}]},
    {"model": "m", "temperature": float("nan"), "messages": []},
    {"model": "m", "max_tokens": float("inf")},
    {"model": "m", "prompt": "lone \ud800 surrogate"},
    {"model": "m", "seed": 2**70},
    {"model": "m", "stop": None, "n": 1},
]


@pytest.mark.parametrize("body", BODIES, ids=range(len(BODIES)))
def test_a_request_body_reads_back_as_jsons_would(body: dict) -> None:
    sent = _encoded(body)
    assert isinstance(sent, bytes)
    got, want = json.loads(sent), json.loads(json.dumps(body))
    assert json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True)
    assert ("NaN" in sent.decode()) == ("NaN" in json.dumps(body))


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a": 1, "b": "\\u00e9t\\u00e9", "c": [1.5, null, true]}',
        b'{"cost": NaN, "x": Infinity}',
        b'{"text": "\\ud800"}',
        b'{"big": 123456789012345678901234567890}',
    ],
)
def test_an_answer_decodes_as_jsons_would(raw: bytes) -> None:
    got, want = _decoded(raw), json.loads(raw)
    assert got.keys() == want.keys()
    for key in want:
        if isinstance(want[key], float) and math.isnan(want[key]):
            assert math.isnan(got[key])
        else:
            assert got[key] == want[key]


def test_what_is_not_json_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        _decoded(b"<html>bad gateway</html>")
