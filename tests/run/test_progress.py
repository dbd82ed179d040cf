"""Progress of stages that run together: each keeps its own count, its total grows as it is fed, and a
reader of the live run sees every stage under way."""

from __future__ import annotations

from ifsynth.flows.run.context import Lines, NoProgress, Tracker, in_progress
from ifsynth.schemas.records import StageCounts


def test_lines_keep_each_running_stage_apart() -> None:
    said: list[str] = []
    lines = Lines(said.append, every=0.0)  # a progress line on every step
    tracker = Tracker(NoProgress())
    with tracker.listening(lines):
        tracker.start("rewrite", 0)
        tracker.start("judge", 0)
        tracker.more("rewrite", 4)
        tracker.advance("rewrite", 3)
        assert in_progress(tracker.snapshot() or {}) == "rewrite 3/4", "a stage not fed yet is left out"
        tracker.more("judge", 2)
        tracker.advance("judge")
        assert tracker.snapshot() == {
            "stage": "rewrite",
            "done": 3,
            "total": 4,
            "stages": [
                {"stage": "rewrite", "done": 3, "total": 4},
                {"stage": "judge", "done": 1, "total": 2},
            ],
        }
        assert in_progress(tracker.snapshot() or {}) == "rewrite 3/4, judge 1/2"
        tracker.finish("rewrite", StageCounts(stage="rewrite", n_in=4, n_out=4))
        judge = {"stage": "judge", "done": 1, "total": 2}
        assert tracker.snapshot() == {**judge, "stages": [judge]}
        tracker.finish("judge", StageCounts(stage="judge", n_in=2, n_out=1, rejected=1))
    assert tracker.snapshot() is None
    assert said[:2] == [
        "rewrite: started, its inputs counted as they come",
        "judge: started, its inputs counted as they come",
    ]
    assert said[2].startswith("rewrite: 3/4,") and said[3].startswith("judge: 1/2,")
    assert said[4].startswith("rewrite: done in") and "4 out" in said[4]
    assert said[5].startswith("judge: done in") and "1 rejected" in said[5]


def test_a_live_run_of_an_earlier_version_still_reads() -> None:
    assert in_progress({"stage": "rewrite", "done": 2, "total": 9}) == "rewrite 2/9"
