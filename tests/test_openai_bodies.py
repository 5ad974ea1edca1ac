"""The aiohttp transport encodes requests and decodes answers with orjson where it agrees with
json, and with json where it does not: what reaches the server, and what is read back, is what
json made of it before (NaN, lone surrogates, huge integers, non-ASCII text)."""

from __future__ import annotations

import json
import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flownb.providers.openai.transport import _decoded, _encoded, _has_long_number

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
        b'{"id": 18446744073709551616, "n": 1234567890123456789}',
        b'{"small": -9223372036854775808, "text": "1234567890123456789"}',
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


_DIGITS_AND_MORE = st.text(alphabet="0123456789 a.-\u0663", max_size=80).map(str.encode)


@given(st.binary(max_size=80) | _DIGITS_AND_MORE)
def test_a_long_number_is_found_wherever_it_is(raw: bytes) -> None:
    # The check that sends an answer to json (which keeps integers past 64 bits exact) finds
    # exactly the answers with 19 ASCII digits in a row, as a regex says.
    assert _has_long_number(raw) == (re.search(rb"[0-9]{19}", raw) is not None)


def test_an_integer_past_64_bits_stays_exact() -> None:
    got = _decoded(b'{"a": 18446744073709551617, "b": [-18446744073709551617]}')
    assert got == {"a": 2**64 + 1, "b": [-(2**64) - 1]}
    assert type(got["a"]) is int
