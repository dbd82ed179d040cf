"""What a template change costs under ``ifsynth run --watch``, next to the same work as separate commands.

    .venv/bin/python -m bench.watch [--seeds 300] [--latency 0.2] [--concurrency 128]

One ``run --watch`` process runs the InstructIR recipe over a template overlay against the fake (latency L,
concurrency C). Two changes are then saved to the overlay and each timed from the save to the end of the
run it starts (the next ``watching`` line): one that renders no differently (a template comment: every
answer from the cache) and one that rewords the first stage's template (every request new, N of them). The
watch is stopped, and the same two are run as commands: the cached rerun, and the run after a third
wording (N requests again). The aim is the issue's: 1.05 × N·L/C + 2 s.
"""

from __future__ import annotations

import argparse
import signal
import tempfile
import time
from pathlib import Path
from typing import IO, Any

from bench.common import (
    REPO,
    cli,
    emit,
    fake_requests,
    fake_server,
    finish,
    run_args,
    synthetic_beir,
    warm_up,
)

TEMPLATE = REPO / "prompts" / "instructir" / "instructions.j2"
OPENING = "Here is a web search query."


class Watch:
    """The ``run --watch`` process, read line by line from its stderr."""

    def __init__(self, warehouse: Path, args: list[str]) -> None:
        self.process = cli(warehouse, *args, "--watch")  # its funnels, a few kB a run, wait in the stdout pipe
        assert self.process.stderr is not None
        self.stderr: IO[str] = self.process.stderr

    def settled(self) -> float:
        """Seconds until the run in progress has ended and the process watches again."""
        started = time.perf_counter()
        for line in self.stderr:
            if line.startswith("watching "):
                return time.perf_counter() - started
            if line.startswith("error"):
                raise SystemExit(f"the watched run failed: {line.strip()}")
        raise SystemExit(f"ifsynth exited {self.process.wait()} while watching")

    def stop(self) -> None:
        self.process.send_signal(signal.SIGINT)
        self.process.communicate(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.watch", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=300)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=128)
    args = parser.parse_args()
    source = TEMPLATE.read_text()
    with fake_server("--latency", str(args.latency)) as base_url, tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        overlay = root / "overlay" / "instructir"
        overlay.mkdir(parents=True)
        saved = overlay / TEMPLATE.name
        saved.write_text(source)
        folder = synthetic_beir(root / "seeds", args.seeds)
        argv = run_args(
            folder, base_url, args.concurrency, "--limit", str(args.seeds), "--prompts-dir", str(overlay.parent)
        )
        warm_up(base_url, root)

        def change(text: str) -> tuple[float, int]:
            before = fake_requests(base_url)
            saved.write_text(text)
            return watch.settled(), fake_requests(base_url) - before

        def command() -> tuple[float, int]:
            before, started = fake_requests(base_url), time.perf_counter()
            finish(cli(root / "bench.duckdb", *argv))
            return time.perf_counter() - started, fake_requests(base_url) - before

        before = fake_requests(base_url)
        watch = Watch(root / "bench.duckdb", argv)
        first = watch.settled(), fake_requests(base_url) - before
        cached = change(source + "{# a comment: renders no differently #}\n")
        reworded = change(source.replace(OPENING, "Here is a search query."))
        watch.stop()
        cached_command = command()
        saved.write_text(source.replace(OPENING, "Here is a query someone searched for."))
        reworded_command = command()

    def row(figures: tuple[float, int]) -> dict[str, Any]:
        seconds, sent = figures
        aim = 1.05 * sent * args.latency / args.concurrency + 2
        return {"wall_s": round(seconds, 3), "sent": sent, "aim_s": round(aim, 3)}

    emit({
        "bench": "watch", "seeds": args.seeds, "latency": args.latency, "concurrency": args.concurrency,
        "watch": {"first_run": row(first), "cached_change": row(cached), "reworded_change": row(reworded)},
        "commands": {"cached_rerun": row(cached_command), "reworded_run": row(reworded_command)},
    })  # fmt: skip


if __name__ == "__main__":
    main()
