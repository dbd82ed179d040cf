"""The collector while a stage's event loop runs (flows/llm/loop.py): what existed before is frozen, and the
collector is left as the loop found it."""

from __future__ import annotations

import gc

from ifsynth.flows.llm import loop


async def _frozen() -> int:
    return gc.get_freeze_count()


def test_a_loop_freezes_what_existed_before_it_and_thaws_it_after() -> None:
    gc.unfreeze()
    thresholds = gc.get_threshold()
    assert loop.run(_frozen()) > 0
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == thresholds


def test_what_was_frozen_before_a_loop_stays_frozen_after_it() -> None:
    """A run the warm process forked finds its parent's objects frozen (flows/cli/warm.py): thawed by the
    stages' loop, the next full collection would walk them all and copy every page they are on."""
    alive = gc.get_objects()  # frozen objects another thread drops would lower the count: none can go meanwhile
    gc.freeze()
    try:
        before = gc.get_freeze_count()
        assert loop.run(_frozen()) >= before
        assert gc.get_freeze_count() >= before
    finally:
        gc.unfreeze()
        del alive
