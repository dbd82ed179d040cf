"""Where IFIR's defaults depart from its authors."""

from ifsynth.schemas.config import Difference

DIFFERENCES = (
    Difference(
        what="review",
        paper="experts reviewed the instructions and the re-checked passages",
        here="LLM judges do both; every decision is a verdict with its reason",
        why="no experts in a generator; review the verdicts (`audit --stage level2|level3|recheck|nest`) before "
        "trusting a release",
    ),
    Difference(
        what="subsets",
        paper="seven subsets, NFCorpus, TREC-CDS and FIRE among them",
        here="the four with three instruction levels: fiqa, scifact_open, aila, pm",
        why="the other three take their instruction from the seed or from one LLM call, not from levels, and need "
        "sources this tool does not read yet",
    ),
)
