"""InstructIR's own stage on plain values: the group filter."""

from __future__ import annotations

from ifsynth.flows.recipes.instructir.group_filter import FilterGroups
from tests.helpers import at, env, item


def test_a_query_keeps_its_instances_only_when_enough_of_them_survived() -> None:
    page = [item("rewrite", "rewrite", "q1", n) for n in (1, 2, 3)] + [item("rewrite", "rewrite", "q2", 1)]
    decided = dict(FilterGroups(min_group_size=3).decide(at(env(), "group_filter"), page))
    assert [decided[i.item_id].decision for i in page] == ["pass", "pass", "pass", "reject"]
    assert [decided[i.item_id].n_out for i in page] == [1, 1, 1, 0]
    (kept,), (dropped,) = decided[page[0].item_id].verdicts, decided[page[3].item_id].verdicts
    assert (kept.judge, kept.score, kept.threshold) == ("rule", 3, 3)
    assert kept.reason == "query q1 kept 3 instances; at least 3 needed" and kept.stage == "group_filter"
    assert dropped.reason == "query q2 kept 1 instance; at least 3 needed" and dropped.decision == "reject"
