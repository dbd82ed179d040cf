"""What the gateway keeps for twins a lookup may have missed: only answers that landed during an open lookup,
and only until every lookup that began before them has closed, so memory does not grow with the run."""

from __future__ import annotations

from ifsynth.flows.llm.landed import Landed


def test_an_answer_is_kept_only_while_a_lookup_that_may_have_missed_it_is_open() -> None:
    landed: Landed[str] = Landed()
    landed.landed("k0", "no lookup open: the next lookup reads it from the warehouse")
    assert landed.get("k0") is None
    first = landed.lookup()
    first.__enter__()
    landed.landed("k1", "a1")
    with landed.lookup():  # began after k1 landed: it reads k1, not k2
        landed.landed("k2", "a2")
        first.__exit__(None, None, None)
        assert landed.get("k1") is None and landed.get("k2") == "a2"
        landed.landed("k1", "a1 again")  # the same key landing again is kept from its new landing
        assert landed.get("k1") == "a1 again"
    assert landed.get("k1") is None and landed.get("k2") is None
    assert len(landed) == 0
