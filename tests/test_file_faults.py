"""Files a user points a command at that are not what it expects: each one line that says what to do."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from ifsynth.flows.cli import report
from ifsynth.flows.evaluation.retrieval import read_run
from ifsynth.schemas.errors import ConfigError


def test_a_run_file_that_is_not_utf8_names_its_line(tmp_path: Path) -> None:
    run = tmp_path / "run.trec"
    run.write_bytes(b"q1 Q0 d1 1 2.0 t\nq1 Q0 d\xff 2 1.0 t\n")
    with pytest.raises(ConfigError, match=r"`run.trec` line 2 is not UTF-8 text"):
        read_run(run)


def test_a_report_given_a_folder_is_written_inside_it(tmp_path: Path) -> None:
    assert report.write(tmp_path, "<html></html>") == tmp_path / "report.html"
    assert (tmp_path / "report.html").read_text() == "<html></html>"


def test_a_report_that_cannot_be_written_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(*_: object, **__: object) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(ConfigError, match=r"cannot write the report to .* \(No space left on device\); give another"):
        report.write(tmp_path / "r.html", "<html></html>")
