"""Where InF-IR's defaults depart from its authors."""

from ifsynth.schemas.config import Difference

DIFFERENCES = (
    Difference(
        what="validator",
        paper="o3-mini judges every tuple three times",
        here="the `--judge-model` you name, three times per tuple",
        why="the model is the run's choice; the three judgments and their rule are the paper's",
    ),
)
