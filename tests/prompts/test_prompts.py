"""The template registry: every built-in template renders, a missing variable stops before any call,
and an overlay replaces exactly the files it holds."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from ifsynth.flows.evaluation.instfol import TEMPLATE as INSTFOL_TEMPLATE
from ifsynth.flows.run.registry import recipes
from ifsynth.prompts.registry import BUILTIN, Prompts, builtin_templates
from ifsynth.schemas.errors import PromptError

SAMPLE = {
    "query": "how do tides work",
    "passage": "Tides are caused by the moon.",
    "instruction": "I am a sailor planning a trip.",
    "k": 3,
    "flavour": "general",
    "candidates": [{"label": "1", "text": "first"}, {"label": "2", "text": "second"}],
    # infosearch
    "dimension": "length",
    "condition": "sentence",
    "siblings": ["paragraph", "article"],
    "seed_kind": "one paragraph",
    "target": "the same answer in one single sentence",
    "restriction": "Please answer in one sentence.",
    "reversed_instruction": "How do tides work? Please do not answer in one sentence.",
    "n": 2,
    # followir
    "title": "Tides",
    "description": "What causes tides?",
    "narrative": "A relevant document explains what causes tides. Tide tables are not relevant.",
    "document": "The moon's gravity pulls the oceans.",
    "command": "Find explanations of a natural phenomenon.",
    # ifir
    "domain": "finance",
    "level": 2,
    "below": "Find answers that address this question.",
    "detail": "facts about the asker: age and income",
    "stance": "SUPPORT",
    "previous": "Find answers for me.",
    "problem": "it adds no condition",
    "above": "I am 30 and earn little; find answers that suit me.",
    "added": ["age", "income"],
}


@pytest.mark.parametrize(
    ("package", "template"),
    [(recipe.prompts, f"{recipe.name}/{name}") for recipe in recipes().values() for name in recipe.templates],
)
def test_every_installed_recipes_template_renders_system_and_user(package: str, template: str) -> None:
    rendered = Prompts(package=package).render(template, **SAMPLE)
    assert [m["role"] for m in rendered.messages] == ["system", "user"]
    assert all(m["content"].strip() for m in rendered.messages)
    assert "JSON" in rendered.messages[-1]["content"]
    assert len(rendered.template_hash) == 16


def test_a_missing_variable_is_an_error() -> None:
    with pytest.raises(PromptError, match="'instruction' is undefined"):
        Prompts().render("instructir/rewrite", query="q", passage="p")


def test_templates_are_sandboxed() -> None:
    overlay_dir = Path(__file__).parent / "cases" / "prompts"
    with pytest.raises(PromptError, match=r"unsafe|not safely callable|access to attribute"):
        Prompts(overlay_dir).render("instructir/rewrite", query="q")


def test_overlay_replaces_file_by_file(tmp_path: Path) -> None:
    (tmp_path / "instructir").mkdir()
    (tmp_path / "instructir" / "rewrite.j2").write_text(
        "{% block system %}Be brief.{% endblock %}{% block user %}Rewrite {{ passage }} for {{ instruction }}."
        "{% endblock %}"
    )
    builtin, overlaid = Prompts(), Prompts(tmp_path)
    rendered = overlaid.render("instructir/rewrite", **SAMPLE)
    assert rendered.messages[-1]["content"] == f"Rewrite {SAMPLE['passage']} for {SAMPLE['instruction']}."
    assert overlaid.hash("instructir/rewrite") != builtin.hash("instructir/rewrite")
    assert overlaid.hash("instructir/instructions") == builtin.hash("instructir/instructions")


def test_a_template_edited_while_a_run_renders_it_changes_nothing_of_that_run(tmp_path: Path) -> None:
    """Every call records the hash of its template: the text rendered must stay the text hashed."""
    path = tmp_path / "instructir" / "rewrite.j2"
    path.parent.mkdir()
    path.write_text("{% block system %}S.{% endblock %}{% block user %}First {{ passage }}.{% endblock %}")
    prompts = Prompts(tmp_path)
    first = prompts.render("instructir/rewrite", **SAMPLE)
    second = "{% block system %}S.{% endblock %}{% block user %}Second {{ passage }}.{% endblock %}"
    path.write_text(second)
    os.utime(path, (path.stat().st_atime, path.stat().st_mtime + 10))  # as an edit seconds later
    again = prompts.render("instructir/rewrite", **SAMPLE)
    assert again == first
    assert again.messages[-1]["content"] == f"First {SAMPLE['passage']}."
    later = Prompts(tmp_path)
    later.check("instructir/rewrite")  # read and compiled before a run starts, hashed later
    path.write_text("{% block system %}S.{% endblock %}{% block user %}Third {{ passage }}.{% endblock %}")
    rendered = later.render("instructir/rewrite", **SAMPLE)
    assert rendered.messages[-1]["content"] == f"Second {SAMPLE['passage']}."
    assert rendered.template_hash == hashlib.sha256(second.encode()).hexdigest()[:16]


def test_unknown_template_and_bad_overlay(tmp_path: Path) -> None:
    with pytest.raises(PromptError, match=r"no template `instructir/nope\.j2`"):
        Prompts().render("instructir/nope")
    with pytest.raises(PromptError, match="not a directory"):
        Prompts(tmp_path / "missing")


def test_every_builtin_template_passes_the_check_a_run_makes_first() -> None:
    prompts = Prompts()
    for name in sorted(builtin_templates()):
        prompts.check(name)


def test_the_template_files_are_exactly_those_the_stages_declare() -> None:
    """A template no stage renders, or a stage's template with no file, is a drift the fingerprint, the
    pre-run check and these tests would otherwise miss."""
    ours = [recipe for recipe in recipes().values() if recipe.prompts == BUILTIN]
    declared = {f"{recipe.name}/{name}" for recipe in ours for name in recipe.templates}
    assert builtin_templates() == declared | {INSTFOL_TEMPLATE}
