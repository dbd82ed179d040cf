"""Where InfoSearch's defaults depart from its authors."""

from ifsynth.schemas.config import Difference

DIFFERENCES = (
    Difference(
        what="review panel",
        setting="panel_min_rankers",
        why="the paper's twelve retrievers are not here: the panel is BM25 plus the runs you pass, and BM25 alone "
        "only flags (it misses true positives that share no word with their query)",
    ),
    Difference(
        what="what a flag does",
        paper="flagged documents (outside the top 50 of six or more retrievers, or relevance below 0.5) were checked "
        "by experts and replaced by hand",
        here="a flag rejects; the 0.5 relevance criterion is not applied",
        why="no experts in a generator; the paper names neither the model nor the scale of that relevance score "
        "(generated documents are judged 1-5 by `judge_rewrite`)",
    ),
    Difference(
        what="query negatives per call",
        paper="its prompt writes one hard negative per call",
        here="one call writes all `negatives_per_positive` (3) negatives of a positive",
        why="written together they differ from each other, not three near-copies, at a third of the calls",
    ),
    Difference(
        what="checks",
        paper="human annotators checked instructions, reversals and documents",
        here="LLM judges and rules, each decision a verdict with its reason",
        why="no annotators in a generator; review the verdicts before trusting a release",
    ),
)
