"""Agreement between a scorer and people: kappa and rho against textbook values, their
intervals, the confusion table and the disagreements."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from flownb.errors import ConfigError
from flownb.evaluation.labels.agreement import agreement, cohen_kappa, spearman_rho


def _pairs(counts: dict[tuple[bool, bool], int]) -> tuple[pd.Series, pd.Series]:
    a: list[bool] = []
    b: list[bool] = []
    for (x, y), k in counts.items():
        a += [x] * k
        b += [y] * k
    return pd.Series(a, name="judge"), pd.Series(b, name="human")


def test_kappa_matches_the_textbook_table() -> None:
    # 50 items: both yes 20, judge yes/human no 5, judge no/human yes 10, both no 15.
    # p_o = 0.7, p_e = 0.5, kappa = 0.4 (the standard worked example).
    a, b = _pairs({(True, True): 20, (True, False): 5, (False, True): 10, (False, False): 15})
    kappa, (low, high), table = cohen_kappa(a, b)
    assert kappa == pytest.approx(0.4)
    assert table.loc[True, True] == 20 and table.loc[True, False] == 5
    assert table.loc[False, True] == 10 and table.loc[False, False] == 15
    # The Fleiss-Cohen-Everitt (1969) standard error for this table is 0.1270.
    assert (high - low) / 2 == pytest.approx(1.96 * 0.1270, abs=0.001)
    assert low < kappa < high


def test_kappa_is_one_for_perfect_and_negative_for_opposite_labels() -> None:
    a, b = _pairs({(True, True): 6, (False, False): 4})
    assert cohen_kappa(a, b)[0] == pytest.approx(1.0)
    a, b = _pairs({(True, False): 5, (False, True): 5})
    assert cohen_kappa(a, b)[0] == pytest.approx(-1.0)


def test_spearman_matches_a_hand_computed_value() -> None:
    # Ranks 1..6 against 2,1,4,3,6,5: d^2 sums to 6, rho = 1 - 6*6/(6*35) = 0.8286.
    a = pd.Series([1, 2, 3, 4, 5, 6], dtype=float)
    b = pd.Series([2, 1, 4, 3, 6, 5], dtype=float)
    rho, (low, high) = spearman_rho(a, b)
    assert rho == pytest.approx(1 - 36 / 210)
    assert -1 <= low < rho < high <= 1


def test_too_few_rows_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="at least two"):
        cohen_kappa(pd.Series([True]), pd.Series([True]))
    with pytest.raises(ConfigError, match="at least four"):
        spearman_rho(pd.Series([1.0, 2.0]), pd.Series([1.0, 2.0]))


def test_agreement_skips_unlabelled_rows_and_lists_disagreements() -> None:
    judge = pd.Series([True, True, False, False, True, False], index=list("abcdef"))
    human = pd.Series([True, False, False, None, True, True], index=list("abcdef"))
    context = pd.DataFrame({"variant": ["v"] * 6}, index=list("abcdef"))
    result = agreement(judge, human, kind="pass_fail", scorer="judge_x", context=context)
    assert result.n == 5  # row d has no label
    assert sorted(result.disagreements.index) == ["b", "f"]
    assert list(result.disagreements.columns) == ["variant", "judge_x", "human"]
    assert math.isnan(result.rho) and not math.isnan(result.kappa)
    assert "kappa" in repr(result) and "n=5" in repr(result)
    assert "<table" in result._repr_html_()


def test_score_agreement_orders_disagreements_by_rank_distance() -> None:
    judge = pd.Series([1.0, 2.0, 3.0, 4.0, 5.0])
    human = pd.Series([5.0, 2.0, 3.0, 4.0, 1.0])
    result = agreement(judge, human, kind="score", scorer="judge_s")
    assert result.kind == "score" and math.isnan(result.kappa)
    assert list(result.disagreements.index[:2]) in ([0, 4], [4, 0])
    assert result.rho == pytest.approx(spearman_rho(judge, human)[0])
