"""Every recipe's fidelity list: each setting declares what its authors did, every default that departs from them
is on the list with its reason, and the card, the README and `ifsynth recipes NAME` print the one table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ifsynth.flows.cli.app import app
from ifsynth.flows.run.registry import Recipe, recipe, recipes
from ifsynth.schemas.config import declared
from ifsynth.warehouse.cards import fidelity_table

OWN = [r for r in recipes().values() if r.stages.startswith("ifsynth.")]
README = (Path(__file__).parents[2] / "README.md").read_text()


def _json(value: object) -> object:
    return json.loads(json.dumps(value))


@pytest.mark.parametrize("made", OWN, ids=lambda r: r.name)
def test_every_setting_declares_what_the_authors_did(made: Recipe) -> None:
    silent = [name for name, field in made.settings.model_fields.items() if declared(field) is None]
    assert not silent, f"{made.name}: declare paper(value) or unstated() for {silent}"


@pytest.mark.parametrize("made", OWN, ids=lambda r: r.name)
def test_every_default_that_departs_from_the_authors_is_listed_with_its_reason(made: Recipe) -> None:
    fields = {field.alias or name: field for name, field in made.settings.model_fields.items()}
    defaults = made.settings().model_dump(mode="json", by_alias=True)
    departing = {
        setting
        for setting, field in fields.items()
        if "paper" in (declared(field) or {}) and defaults[setting] != _json((declared(field) or {})["paper"])
    }
    listed = {d.setting for d in made.differences if d.setting is not None}
    assert departing == listed, (
        f"{made.name}: unlisted {departing - listed}, listed but not departing {listed - departing}"
    )
    assert all(d.why for d in made.differences)
    assert all(d.paper and d.here for d in made.differences if d.setting is None), "a difference no setting undoes"


def test_a_listed_setting_set_back_to_the_authors_value_leaves_the_table() -> None:
    instructir = recipe("instructir")
    rows = instructir.fidelity(
        instructir.settings.model_validate({"passage_band": "inside", "instructions_per_query": 5})
    )
    assert "passage length band" not in {row["what"] for row in rows}
    (own,) = [row for row in rows if row["why"] == "set for this run"]
    assert (own["what"], own["paper"], own["release"]) == (
        "`instructions_per_query`",
        "`instructions_per_query=10`",
        "`instructions_per_query=5`",
    )


@pytest.mark.parametrize("made", OWN, ids=lambda r: r.name)
def test_the_readme_and_the_command_print_the_recipes_table(made: Recipe) -> None:
    table = "\n".join(fidelity_table(made.fidelity()))
    assert f"`ifsynth recipes {made.name}` prints this table" in README
    marker = README.index(f"`ifsynth recipes {made.name}` prints this table")
    assert README[marker:].split("\n\n", 2)[1] == table, f"README's {made.name} table is stale"
    printed = CliRunner().invoke(app, ["recipes", made.name])
    assert printed.exit_code == 0 and printed.stdout.strip() == table
