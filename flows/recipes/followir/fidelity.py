"""Where FollowIR's defaults depart from its authors (the paper, and its release where the two disagree)."""

from ifsynth.schemas.config import Difference

DIFFERENCES = (
    Difference(
        what="re-judging",
        paper="two expert annotators altered the narratives and re-judged the relevant documents",
        here="an LLM alters, an LLM judge re-judges; every label is a verdict with its reason",
        why="no annotators in a generator; review the verdicts (`audit --stage rejudge --status ok`) before trusting "
        "a release",
    ),
    Difference(
        what="alterations per topic",
        setting="alterations",
        why="the annotators wrote one alteration per topic; an LLM gets several tries, the first that lands is kept",
    ),
    Difference(
        what="flipped share",
        setting="flip_share",
        why="the annotators aimed at half of the relevant documents; a band lets an LLM's tries land",
    ),
    Difference(
        what="spot checks",
        setting="spot_checks",
        why="annotators only narrowed relevance; an LLM may widen it, so judged non-relevant documents are re-judged "
        "and an alteration that makes one relevant is passed over",
    ),
    Difference(
        what="judging long documents (MaxP)",
        setting="window_words",
        why="a judge's context bounds a document, so it reads 400-word windows and a document is relevant when any "
        "window is; this leans against exclusions: one stated in another window than the one that passes cannot "
        "flip the document. `window_words=null` judges whole documents where the judge's context allows",
    ),
    Difference(
        what="rerank pool",
        paper="the text pools five retrievers; the release's `top_ranked` is BM25's top 1000",
        here="BM25's top `pool_depth` (1000) plus every `--pool-run` file",
        why="the release is followed; the paper's other retrievers join as run files",
    ),
    Difference(
        what="corpus",
        paper="the release cut each document to its best-scoring 400-word passage (MaxP) to distribute it",
        here="whole documents under their source ids",
        why="a regenerated release is not redistributed (you hold the corpus licence); cutting would lose text the "
        "judges read",
    ),
)
