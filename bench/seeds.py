"""Peak RSS and wall of reading a synthetic BEIR folder's seeds whole, each reader in a process of its own:
`check` (the cheap pass before any request), `pairs` (what selection reads, three times) and `positives` (InstructIR's
noise pool). A reader that holds a judged passage per seed grows with the folder by its passages; one that
holds ids and offsets, by those.

    .venv/bin/python -m bench.seeds [--sizes 20000,200000] [--readers check,pairs,positives]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

READERS = ("check", "pairs", "positives")


def status_kb(field: str) -> int:
    """A figure of this process's /proc status, in kB: ``bench.common.high_water_kb`` reads another's, but
    importing ``bench.common`` would load what the child must not hold before it reads."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(f"{field}:"))


def read(reader: str, folder: Path) -> None:
    """In the child, which imports no more than the reader: the reader run to its end, its figures as one JSON
    line. The process's high-water mark is reset first (Linux's ``clear_refs``), so the peak is the reader's."""
    from ifsynth.flows.seeds import BeirFolder

    source = BeirFolder(folder, spec=f"beir:{folder}")
    Path("/proc/self/clear_refs").write_text("5")
    before = status_kb("VmRSS")
    started = time.perf_counter()
    count = 1 if reader == "check" else 0
    if reader == "check":
        source.check()
    else:
        for _ in getattr(source, reader)():
            count += 1
    wall = time.perf_counter() - started
    peak = status_kb("VmHWM")
    figures = {"wall_s": round(wall, 2), "peak_rss_mb": round(peak / 1024, 1), "rss_before_mb": round(before / 1024, 1)}
    print(json.dumps({"read": count, **figures}))


def reader_list(text: str) -> list[str]:
    names = text.split(",")
    if any(name not in READERS for name in names):
        raise argparse.ArgumentTypeError(f"readers among {', '.join(READERS)}, comma-separated: not {text!r}")
    return names


def size_list(text: str) -> list[int]:
    try:
        sizes = [int(n) for n in text.split(",")]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"seed counts, comma-separated, such as 20000,200000: not {text!r}")
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.seeds", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=size_list, default=[20000, 200000], help="seed counts, comma-separated")
    parser.add_argument("--readers", type=reader_list, default=list(READERS), help="comma-separated")
    parser.add_argument("--one", nargs=2, metavar=("READER", "FOLDER"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        read(args.one[0], Path(args.one[1]))
        return
    from bench.common import REPO, emit, synthetic_beir  # not in the child: they import much

    with tempfile.TemporaryDirectory() as tmp:
        for seeds in args.sizes:
            folder = synthetic_beir(Path(tmp) / f"seeds-{seeds}", seeds)  # a positive and two noise passages a seed
            for reader in args.readers:
                child = [sys.executable, "-m", "bench.seeds", "--one", reader, str(folder)]
                # its errors go to the terminal: a kernel that refuses clear_refs says so there
                out = subprocess.run(child, cwd=REPO, stdout=subprocess.PIPE, text=True, check=True).stdout
                emit({"seeds": seeds, "reader": reader, **json.loads(out)})


if __name__ == "__main__":
    main()
