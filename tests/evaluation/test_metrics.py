"""Every branch of the metrics, on cases computed by hand (RECIPES.md's worked values among them)."""

from __future__ import annotations

import math

import pytest

from ifsynth.flows.evaluation import metrics as m
from ifsynth.flows.evaluation.metrics import Position, Triple


def triple(ori: int, ins: int, rev: int, n: int = 1, scores: tuple[float, float, float] | None = None) -> Triple:
    s_ori, s_ins, s_rev = scores or (10.0 - ori, 10.0 - ins, 10.0 - rev)
    return Triple("q", "d", Position(ori, s_ori), Position(ins, s_ins), Position(rev, s_rev), n)


# -- rankings ----------------------------------------------------------------------------------------


def test_ties_are_broken_by_doc_id_descending_and_absent_documents_rank_last() -> None:
    scores = {"a": 1.0, "b": 2.0, "c": 1.0}
    assert m.ranking(scores) == ["b", "c", "a"]
    placed = m.positions(scores)
    assert placed["a"] == Position(3, 1.0)
    assert m.position(placed, "zz") == Position(4, -math.inf)


# -- nDCG, MAP, MRR, Robustness ------------------------------------------------------------------------


def test_ndcg_by_hand() -> None:
    qrels = {"a": 1, "b": 1}
    # a at rank 2, b not retrieved: DCG = 1/log2(3); ideal = 1 + 1/log2(3)
    assert m.ndcg_at_k(["x", "a", "y"], qrels, 10) == pytest.approx((1 / math.log2(3)) / (1 + 1 / math.log2(3)))
    assert m.ndcg_at_k(["x", "a"], qrels, 1) == 0.0  # cut at k
    assert m.ndcg_at_k(["a"], {}, 10) == 0.0  # nothing relevant
    graded = {"a": 2, "b": 1}
    assert m.ndcg_at_k(["b", "a"], graded, 2) == pytest.approx((1 + 2 / math.log2(3)) / (2 + 1 / math.log2(3)))


def test_ndcg_ifir_reference_takes_its_ideal_from_the_retrieved_list() -> None:
    qrels = {"a": 1, "b": 1, "c": 1, "d": 1, "e": 1}
    assert m.ndcg_at_k(["a", "x"], qrels, 20, "ifir") == 1.0
    assert m.ndcg_at_k(["a", "x"], qrels, 20) == pytest.approx(1 / m.dcg([1] * 5))
    assert m.ndcg_at_k(["x", "a"], qrels, 20, "ifir") == pytest.approx((1 / math.log2(3)) / 1)
    assert m.ndcg_at_k(["x"], qrels, 20, "ifir") == 0.0


def test_average_precision_divides_by_every_relevant_document() -> None:
    assert m.average_precision(["a", "x", "b"], {"a": 1, "b": 1, "c": 1}) == pytest.approx((1 + 2 / 3) / 3)
    assert m.average_precision(["a"], {"a": 0}) == 0.0


def test_reciprocal_rank_within_k() -> None:
    assert m.reciprocal_rank_at_k(["x", "a"], {"a": 1}, 10) == 0.5
    assert m.reciprocal_rank_at_k(["x", "a"], {"a": 1}, 1) == 0.0


def test_robustness_is_the_mean_of_each_groups_worst_instance() -> None:
    per_instance = {"q1_1": 1.0, "q1_2": 0.5, "q2_1": 0.2, "q2_2": 0.8, "q3_1": 0.0}
    groups = {"q1_1": "q1", "q1_2": "q1", "q2_1": "q2", "q2_2": "q2", "q3_1": "q3"}
    assert m.robustness_at_k(per_instance, groups) == pytest.approx((0.5 + 0.2 + 0.0) / 3)
    assert m.robustness_at_k({}, {}) == 0.0


# -- p-MRR ----------------------------------------------------------------------------------------------


def test_pmrr_pair_branches() -> None:
    assert m.pmrr_pair(1, 4) == pytest.approx(0.75)  # moved down: 1 - (1/4)/(1/1)
    assert m.pmrr_pair(4, 1) == pytest.approx(-0.75)  # moved up: (1/4)/(1/1) - 1
    assert m.pmrr_pair(3, 3) == 0.0  # unchanged


def test_pmrr_is_macro_and_treats_a_missing_document_as_ranked_last() -> None:
    og = {"q1": {"a": 3.0, "b": 2.0}, "q2": {"c": 1.0}}
    new = {"q1": {"b": 3.0, "a": 2.0}, "q2": {"x": 5.0}}
    # q1: a 1 -> 2 gives 0.5; b 2 -> 1 gives -0.5; mean 0. q2: c 1 -> absent (rank 2) gives 0.5.
    assert m.p_mrr(og, new, {"q1": ["a", "b"], "q2": ["c"], "q3": []}) == pytest.approx(0.25)
    assert m.p_mrr(og, new, {"q1": []}) is None


# -- WISE -----------------------------------------------------------------------------------------------


def test_wise_worked_values_of_the_recipes() -> None:
    assert m.wise_value(triple(3, 2, 4, n=1)) == pytest.approx(0.95 / math.sqrt(2))
    assert m.wise_value(triple(3, 2, 4, n=1)) == pytest.approx(0.672, abs=5e-4)
    assert m.wise_value(triple(2, 1, 5, n=1)) == pytest.approx(0.95)


def test_wise_reward_branches() -> None:
    assert m.wise_reward(2, 1, n=2) == 1.0  # R_ori <= N and R_ins = 1
    assert m.wise_reward(1, 1, n=1) == 1.0  # R_ori = 1 = N: the paper's <= gives the full reward
    assert m.wise_reward(10, 1, n=2) == pytest.approx(1 - 3 / 20)  # square root of the gain, over K
    assert m.wise_reward(10, 5, n=2) == pytest.approx((1 - math.sqrt(5) / 20) / math.sqrt(5))
    assert m.wise_reward(21, 1, n=2) == 0.01  # outside the top K
    assert m.wise_reward(5, 5, n=2) == pytest.approx(1 / math.sqrt(5))  # R_ori = R_ins: no gain, still a reward


def test_wise_penalty_branches() -> None:
    assert m.wise_penalty(r_ori=3, r_ins=5, r_rev=2) == -1.0  # R_rev < R_ori < R_ins
    assert m.wise_penalty(r_ori=2, r_ins=4, r_rev=9) == pytest.approx(-0.5)  # R_ori <= R_ins
    assert m.wise_penalty(r_ori=4, r_ins=2, r_rev=1) == pytest.approx(-0.75)  # R_rev <= R_ori
    assert m.wise_penalty(r_ori=4, r_ins=4, r_rev=4) == 0.0  # R_ori = R_ins = R_rev: nothing moved


def test_wise_chooses_reward_or_penalty_and_averages_instances() -> None:
    assert m.wise_value(triple(4, 4, 4)) == 0.0  # R_ori = R_rev is not a reward
    assert m.wise_value(triple(1, 1, 2)) == 1.0  # R_ori = 1 = N and R_ins = 1
    assert m.wise_value(triple(1, 1, 1)) == 0.0  # R_ori = 1 with the reversed gold on top: no reward
    assert m.wise_value(triple(1, 3, 2)) == pytest.approx(-2 / 3)
    triples = [triple(2, 1, 5), triple(3, 5, 2)]
    assert m.wise(triples) == pytest.approx((0.95 - 1) / 2)
    assert m.wise([]) is None


def test_wise_reference_behaviours() -> None:
    # R_ori = N: the references need R_ori < N for the full reward.
    assert m.wise_reward(2, 1, n=2, reference="infosearch-source") == pytest.approx(1 - 1 / 20)
    assert m.wise_reward(2, 1, n=2, reference="infosearch-wheel") == pytest.approx(1 - 1 / 20)
    # the wheel's reward is linear in the gain, the source's the square root
    assert m.wise_reward(10, 1, n=1, reference="infosearch-wheel") == pytest.approx(1 - 9 / 20)
    assert m.wise_reward(10, 1, n=1, reference="infosearch-source") == pytest.approx(1 - 3 / 20)
    # the wheel's -1 never fires: R_rev < R_ori < R_ins falls to (R_ori - R_ins) / R_ins
    assert m.wise_penalty(3, 5, 2, reference="infosearch-wheel") == pytest.approx(-0.4)
    assert m.wise_penalty(3, 5, 2, reference="infosearch-source") == -1.0
    # per query, then over queries
    a1 = Triple("a", "d1", Position(2, 1), Position(1, 2), Position(5, 0), 1)
    a2 = Triple("a", "d2", Position(3, 1), Position(5, 0), Position(2, 2), 1)
    b1 = Triple("b", "d3", Position(2, 1), Position(1, 2), Position(5, 0), 1)
    assert m.wise([a1, a2, b1]) == pytest.approx((0.95 - 1 + 0.95) / 3)
    assert m.wise([a1, a2, b1], reference="infosearch-source") == pytest.approx(((0.95 - 1) / 2 + 0.95) / 2)


# -- SICR -----------------------------------------------------------------------------------------------


def test_sicr_needs_every_condition() -> None:
    assert m.sicr_value(triple(3, 1, 5, scores=(5, 9, 1)))
    assert not m.sicr_value(triple(3, 3, 5, scores=(5, 9, 1)))  # rank not better when instructed
    assert not m.sicr_value(triple(3, 1, 5, scores=(5, 5, 1)))  # score not higher when instructed
    assert not m.sicr_value(triple(3, 1, 3, scores=(5, 9, 1)))  # rank not worse when reversed
    assert not m.sicr_value(triple(3, 1, 5, scores=(5, 9, 5)))  # score not lower when reversed


def test_sicr_at_rank_one_and_missing_documents() -> None:
    # R_ori = 1 can never improve: the paper gives 0; the references count it when it stays first.
    top = triple(1, 1, 4, scores=(9, 9, 1))
    assert not m.sicr_value(top)
    assert m.sicr_value(top, "infosearch-source")
    assert not m.sicr_value(triple(1, 1, 1, scores=(9, 9, 9)), "infosearch-source")
    assert not m.sicr_value(triple(2, 1, 4, scores=(9, 9, 1)), "infosearch-source")  # equal score off rank 1
    # a gold absent from the reversed run is ranked last with the lowest score: that counts as demoted
    gone = Triple("q", "d", Position(3, 5.0), Position(1, 9.0), Position(11, -math.inf), 1)
    assert m.sicr_value(gone)


def test_sicr_reference_counts_only_the_last_gold_of_a_query() -> None:
    good = Triple("a", "d1", Position(3, 5), Position(1, 9), Position(5, 1), 2)
    bad = Triple("a", "d2", Position(3, 5), Position(4, 4), Position(5, 1), 2)
    other = Triple("b", "d3", Position(3, 5), Position(1, 9), Position(5, 1), 1)
    assert m.sicr([good, bad, other]) == pytest.approx(2 / 3)
    assert m.sicr([good, bad, other], "infosearch-source") == pytest.approx((0 + 1) / 2)
    assert m.sicr([bad, good, other], "infosearch-source") == pytest.approx((0.5 + 1) / 2)
    assert m.sicr([]) is None


# -- INSTFOL --------------------------------------------------------------------------------------------


def test_weighted_score_counts_every_score_token_unless_given_a_floor() -> None:
    top = [("2", math.log(0.6)), (" 3", math.log(0.3)), ("x", math.log(0.05)), ("1", math.log(0.005)), ("7", 0.0)]
    assert m.weighted_score(top, maximum=3) == pytest.approx((2 * 0.6 + 3 * 0.3 + 1 * 0.005) / 0.905)
    assert m.weighted_score(top, maximum=3, floor=0.01) == pytest.approx((2 * 0.6 + 3 * 0.3) / 0.9)
    assert m.weighted_score([("x", 0.0)], maximum=3) is None


def test_instfol_branches() -> None:
    assert m.instfol_query(1.0, 2.0, maximum=3) == pytest.approx(0.5)
    assert m.instfol_query(2.0, 1.0, maximum=3) == pytest.approx(-1.0)
    assert m.instfol_query(0.5, 1.0, maximum=1) == pytest.approx(1.0)  # a 0-1 scale normalises by 1
    # S_q at the maximum, where the paper's formula divides by zero: the loss over the maximum
    assert m.instfol_query(3.0, 2.0, maximum=3) == pytest.approx(-1 / 3)
    assert m.instfol_query(3.0, 0.0, maximum=3) == -1.0
    assert m.instfol_query(3.0, 3.0, maximum=3) == 0.0


def test_instfol_ifir_reference_fixes_the_maximum_at_three() -> None:
    assert m.instfol_query(0.5, 1.0, maximum=1, reference="ifir") == pytest.approx(0.5 / 2.5)
    assert m.instfol_query(2.0, 2.0, maximum=3, reference="ifir") == 0.0
    assert m.instfol_query(3.0, 2.0, maximum=3, reference="ifir") == -1.0
