"""`ifsynth run --watch`: a saved template change runs the recipe again in the same process, only the changed
stage's requests are sent, a change that breaks a template is said and waited out, and Ctrl-C ends it."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

import pytest

from ifsynth.flows.cli.watch import Watched, file_identity
from ifsynth.flows.run import local_prefect
from ifsynth.flows.run.config import resolve
from tests.conftest import INSTRUCTIR_SEEDS, REPO, invoke
from tests.fake_openai import FakeOpenAI
from tests.helpers import as_from_a_shell

pytestmark = pytest.mark.usefixtures("prefect")  # runs flows: on the session's Prefect server

BUILTIN = REPO / "prompts" / "instructir"


class Lines:
    """A child's stream read line by line on a thread of its own, so that a wait for a line has a deadline."""

    def __init__(self, stream: IO[str]) -> None:
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self._lines.put(line)
        self._lines.put("")  # the end

    def until(self, text: str, seconds: float = 120) -> list[str]:
        """The lines up to and including the first that starts with ``text``."""
        deadline, seen = time.monotonic() + seconds, list[str]()
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no {text!r} within {seconds} s: {seen[-5:]}") from None
            assert line, f"the command ended before saying {text!r}: {seen[-5:]}"
            seen.append(line.rstrip("\n"))
            if line.startswith(text):
                return seen

    def to_end(self, seconds: float = 30) -> list[str]:
        """The lines left, once the stream has ended."""
        seen, deadline = list[str](), time.monotonic() + seconds
        while line := self._lines.get(timeout=max(0.0, deadline - time.monotonic())):
            seen.append(line.rstrip("\n"))
        return seen


def watching(
    fake: FakeOpenAI, warehouse: Path, *options: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """`ifsynth run instructir --watch` on InstructIR's released seeds against ``fake``, in a child process."""
    return subprocess.Popen(
        [sys.executable, "-m", "ifsynth.flows.cli", "--warehouse", str(warehouse), "run", "instructir",
         "--seeds", f"beir:{INSTRUCTIR_SEEDS}", "--base-url", fake.base_url, "--model", "m", *options, "--watch"],
        cwd=REPO, env=env or os.environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=as_from_a_shell,
    )  # fmt: skip


def test_a_saved_change_runs_again_in_the_same_process_sending_only_what_changed(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    warehouse, overlay = tmp_path / "w.duckdb", tmp_path / "prompts"
    (overlay / "instructir").mkdir(parents=True)
    judge = overlay / "instructir" / "judge_specificity.j2"
    child = watching(fake, warehouse, "--limit", "6", "--set", "min_group_size=1", "--set",
                     "instructions_per_query=3", "--prompts-dir", str(overlay), "--json")  # fmt: skip
    assert child.stderr is not None and child.stdout is not None
    said, out = Lines(child.stderr), Lines(child.stdout)
    try:
        said.until("judge_specificity: started")  # the run has read its templates: this save is for the next
        judge.write_text((BUILTIN / judge.name).read_text().replace("About the searcher:", "The searcher says:"))
        first = said.until("watching ")
        assert f"{overlay / 'instructir'}/*.j2" in first[-1] and f"{BUILTIN}/*.j2" in first[-1]
        second = said.until("watching ")
        assert second[0] == "changed: judge_specificity.j2", "the save during the run starts the next one"

        sent_before = fake.stats()["requests"]
        judge.write_text("{% block system %}unfinished{% endblock\n")
        third = said.until("watching ")
        assert any(line.startswith("error: template `instructir/judge_specificity.j2`") for line in third), third
        assert fake.stats()["requests"] == sent_before, "a template that fails its check sends nothing"
        child.send_signal(signal.SIGINT)
        rest = said.until("stopped watching", seconds=30)
        assert child.wait(timeout=30) == 0
        printed = out.to_end()
    finally:
        child.kill()
    assert not any("Traceback" in line for line in [*first, *second, *third, *rest])

    funnels = [json.loads(document) for document in _documents("\n".join(printed))]
    assert len(funnels) == 2, "one funnel per run: the broken template started none"
    sent = [{stage["stage"]: stage["sent"] for stage in funnel["stages"]} for funnel in funnels]
    assert sent[0]["judge_specificity"] > 0 and sent[1]["judge_specificity"] > 0
    unchanged = {stage: n for stage, n in sent[1].items() if stage != "judge_specificity"}
    assert set(unchanged.values()) == {0}, f"the unchanged stages answer from the cache: {unchanged}"
    runs = json.loads(invoke("--warehouse", str(warehouse), "runs", "--json").stdout)
    assert [run["status"] for run in runs] == ["completed", "completed"]


def test_the_watch_keeps_the_local_prefect_server_its_runs_report_to(fake: FakeOpenAI, tmp_path: Path) -> None:
    """A local server stops after its idle while (2 s here) once no command holds its lease: between two
    edits it would stop, and its UI with it, unless the watch holds one."""
    home = tmp_path / "prefect-home"
    env = {key: value for key, value in os.environ.items() if key != "PREFECT_API_URL"}
    env |= {"PREFECT_HOME": str(home), "IFSYNTH_PREFECT_IDLE": "2"}
    child = watching(fake, tmp_path / "w.duckdb", "--limit", "2", "--set", "instructions_per_query=1", env=env)
    assert child.stderr is not None
    said, folder = Lines(child.stderr), home / "ifsynth-server"
    try:
        said.until("watching ")
        time.sleep(6)  # three idle whiles past the run's own lease
        assert local_prefect.running(folder) is not None, "kept while the watch goes on"
        child.send_signal(signal.SIGINT)
        said.until("stopped watching", seconds=30)
        assert child.wait(timeout=30) == 0
        deadline = time.monotonic() + 30
        while local_prefect.running(folder) is not None:
            assert time.monotonic() < deadline, "let go when the watch ends"
            time.sleep(0.5)
    finally:
        child.kill()
        local_prefect.stop(folder)


def _documents(text: str) -> list[str]:
    """The JSON documents printed one after another (each indented, starting at a line's first column)."""
    starts = [i for i, line in enumerate(text.splitlines()) if line == "{"]
    lines = text.splitlines()
    return ["\n".join(lines[a:b]) for a, b in zip(starts, [*starts[1:], len(lines)], strict=True)]


def test_what_is_watched_is_the_recipes_templates_and_the_config_file_as_a_run_read_them(tmp_path: Path) -> None:
    overlay, config_file = tmp_path / "prompts", tmp_path / "settings" / "run.toml"
    (overlay / "instructir").mkdir(parents=True)
    (overlay / "infir").mkdir()
    config_file.parent.mkdir()
    config_file.write_text("")
    settings = resolve("instructir", seeds="demo", base_url=["http://127.0.0.1:9/v1"], model="m",
                       prompts_dir=str(overlay))  # fmt: skip
    watched = Watched(settings, str(config_file), file_identity(config_file))
    assert watched.folders == sorted([BUILTIN, overlay / "instructir"]) and watched.file == config_file
    (overlay / "instructir" / "rewrite.j2").write_text("saved while the run ran")
    assert waited(watched) == ["rewrite.j2"], "a change saved during the run starts the next one"

    (overlay / "infir" / "rewrite.j2").write_text("another recipe's template")
    (overlay / "instructir" / ".rewrite.j2.swp").write_text("an editor's file")
    (config_file.parent / "other.toml").write_text("")
    (overlay / "instructir" / "rewrite.j2").unlink()
    config_file.write_text("[params]\nmin_group_size = 2\n")
    assert waited(watched) == ["rewrite.j2", "run.toml"], "deleted, or changed; nothing else"

    config_file.write_text(config_file.read_text())  # saved as it was
    (overlay / "instructir" / "judge_relevance.j2").write_text("new")
    assert waited(watched) == ["judge_relevance.j2"], "a save that changes nothing is no change"

    read = file_identity(config_file)  # the settings are read from it; then it is saved before the watch looks
    config_file.write_text("[params]\nmin_group_size = 3\n")
    assert waited(Watched(settings, str(config_file), read)) == ["run.toml"]


def waited(watched: Watched, seconds: float = 30) -> list[str]:
    """``watched.wait()``, failed after ``seconds`` instead of blocking the suite."""
    changed: queue.Queue[list[str]] = queue.Queue()
    threading.Thread(target=lambda: changed.put(watched.wait()), daemon=True).start()
    try:
        return changed.get(timeout=seconds)
    except queue.Empty:
        raise AssertionError(f"no change seen within {seconds} s") from None


@pytest.mark.parametrize("extra, message", [
    (["--shards", "2"], "--watch runs in this process: not with --shards or --work-pool"),
    (["--work-pool", "gpus"], "--watch runs in this process: not with --shards or --work-pool"),
    (["--name", "tuned"], "--watch starts a new run at each change"),
])  # fmt: skip
def test_watch_refuses_what_it_cannot_repeat_in_one_line(tmp_path: Path, extra: list[str], message: str) -> None:
    proc = invoke("--warehouse", str(tmp_path / "w.duckdb"), "run", "instructir", "--seeds", "demo",
                  "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--watch", *extra)  # fmt: skip
    lines = [line for line in proc.stderr.strip().splitlines() if not line.endswith("checking inputs")]
    assert proc.returncode == 2 and len(lines) == 1 and message in lines[0], proc.stderr
    assert not (tmp_path / "w.duckdb").exists(), "refused before the warehouse is opened"
