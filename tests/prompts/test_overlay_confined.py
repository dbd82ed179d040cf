"""A ``--prompts-dir`` stays inside its folder: a recipe folder that links elsewhere, a file that links outside,
or an ``{% include %}`` of a file that is not one of ifsynth's templates is refused in one line before any
request; nothing outside the folder reaches a prompt."""

from __future__ import annotations

from pathlib import Path

import pytest

from ifsynth.prompts.registry import Prompts
from ifsynth.schemas.errors import PromptError
from tests.conftest import REPO

REWRITE = (REPO / "prompts" / "instructir" / "rewrite.j2").read_text()
SECRET = "a secret that must not reach a prompt"


def including(name: str) -> str:
    """The built-in rewrite template, with an include of ``name`` in its user block."""
    return REWRITE.replace("{% block user %}", "{% block user %}{% include '" + name + "' %}", 1)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / "rewrite.j2").write_text(REWRITE)
    (folder / "secret.txt").write_text(SECRET)
    return folder


def refused(overlay: Path) -> str:
    with pytest.raises(PromptError) as caught:
        Prompts(overlay).check("instructir/rewrite")
    message = str(caught.value)
    assert "\n" not in message and SECRET not in message
    return message


def test_a_recipe_folder_linking_elsewhere_is_refused(tmp_path: Path, outside: Path) -> None:
    (tmp_path / "overlay").mkdir()
    (tmp_path / "overlay" / "instructir").symlink_to(outside, target_is_directory=True)
    assert "`instructir` points outside the folder" in refused(tmp_path / "overlay")


def test_a_file_linking_outside_is_refused_even_if_only_included(tmp_path: Path, outside: Path) -> None:
    recipe = tmp_path / "overlay" / "instructir"
    recipe.mkdir(parents=True)
    (recipe / "rewrite.j2").write_text(including("instructir/notes.txt"))
    (recipe / "notes.txt").symlink_to(outside / "secret.txt")
    assert "`instructir/notes.txt` points outside the folder" in refused(tmp_path / "overlay")


def test_an_include_of_a_file_that_is_not_a_template_is_refused(tmp_path: Path) -> None:
    recipe = tmp_path / "overlay" / "instructir"
    recipe.mkdir(parents=True)
    (recipe / "rewrite.j2").write_text(including("instructir/notes.txt"))
    (recipe / "notes.txt").write_text(SECRET)
    assert "`instructir/notes.txt` is not a template ifsynth has" in refused(tmp_path / "overlay")


def test_an_overlay_inside_its_folder_is_used(tmp_path: Path) -> None:
    recipe = tmp_path / "overlay" / "instructir"
    recipe.mkdir(parents=True)
    (recipe / "rewrite.j2").write_text(including("instructir/judge_relevance.j2"))
    (recipe / "judge_relevance.j2").write_text((REPO / "prompts" / "instructir" / "judge_relevance.j2").read_text())
    prompts = Prompts(tmp_path / "overlay")
    prompts.check("instructir/rewrite")
    assert prompts.source("instructir/rewrite") == including("instructir/judge_relevance.j2")
