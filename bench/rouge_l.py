"""stats' ROUGE-L against the rouge-score package on InstructIR's public instructions: agreement and speed.

    .venv/bin/python bench/rouge_l.py [PATH_TO_INSTRUCTIR] [--groups N]

Prints, over the first N core queries (default 300), both within-group means, the largest per-group
difference, and the two timings as a ratio; then ifsynth's figure over every group.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from pathlib import Path

from rouge_score import rouge_scorer

from ifsynth.warehouse.stats import rouge_l_within_groups

DEFAULT = Path(__file__).resolve().parents[1] / "tests" / "data" / "instructir"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("path", nargs="?", type=Path, default=DEFAULT)
    parser.add_argument("--groups", type=int, default=300)
    args = parser.parse_args()
    groups: dict[str, list[str]] = {}
    with (args.path / "INSTRUCTIR" / "only_instruction_queries.jsonl").open() as handle:
        for line in handle:
            row = json.loads(line)
            groups.setdefault(row["_id"].rsplit("_", 1)[0], []).append(row["text"])
    sample = list(groups.values())[: args.groups]
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    started = time.perf_counter()
    reference = [
        statistics.fmean(scorer.score(a, b)["rougeL"].fmeasure for a, b in itertools.combinations(texts, 2))
        for texts in sample
    ]
    reference_s = time.perf_counter() - started
    started = time.perf_counter()
    ours = [rouge_l_within_groups([texts]) or 0.0 for texts in sample]  # None only under two texts
    ours_s = time.perf_counter() - started
    print(f"groups {len(sample)}: rouge-score {statistics.fmean(reference):.5f}, ifsynth {statistics.fmean(ours):.5f}")
    print(f"largest per-group difference {max(abs(a - b) for a, b in zip(reference, ours, strict=True)):.5f}")
    print(f"time: rouge-score / ifsynth = {reference_s / ours_s:.0f}x")
    started = time.perf_counter()
    everything = rouge_l_within_groups(groups.values())
    print(f"all {len(groups)} groups: {everything:.4f} in {time.perf_counter() - started:.2f} s")


if __name__ == "__main__":
    main()
