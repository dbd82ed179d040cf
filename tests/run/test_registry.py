"""Recipes declare themselves: found through the entry-point group, refused when registered twice, and
everything derived from a declaration (templates, flows, deployments) agrees with it."""

from __future__ import annotations

import dataclasses
from importlib.metadata import EntryPoint
from typing import Any

import pytest
import yaml

from ifsynth.flows.run import registry
from ifsynth.flows.run.registry import recipe, recipes
from ifsynth.schemas.errors import ConfigError
from tests.conftest import REPO
from tests.helpers import BUILTIN


def test_ifsynths_own_recipes_register_through_the_entry_point_group() -> None:
    assert set(BUILTIN) <= set(recipes())
    for name in BUILTIN:
        declared = recipe(name)
        assert declared.name == name and declared.paper and declared.summary
        assert declared.settings.model_validate({})  # every setting has a default


def test_an_unknown_recipe_names_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown recipe `nope`; known: .*instructir"):
        recipe("nope")


def points(*values: tuple[str, str]) -> list[EntryPoint]:
    return [EntryPoint(name, value, registry.GROUP) for name, value in values]


def test_two_packages_registering_one_name_are_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    twice = points(("instructir", "ifsynth.flows.recipes.instructir:RECIPE"), ("mine", "tests.run.test_registry:CLASH"))
    monkeypatch.setattr(registry, "entry_points", lambda group: twice)
    registry.recipes.cache_clear()
    try:
        with pytest.raises(ConfigError, match=r"recipe `instructir` is registered twice, by .* and .*CLASH"):
            recipes()
    finally:
        registry.recipes.cache_clear()


def test_an_entry_point_that_is_no_recipe_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "entry_points", lambda group: points(("odd", "tests.run.test_registry:NOT_A_RECIPE")))
    registry.recipes.cache_clear()
    try:
        with pytest.raises(ConfigError, match=r"entry point `odd` .* is not a Recipe"):
            recipes()
    finally:
        registry.recipes.cache_clear()


CLASH = recipe("instructir")
NOT_A_RECIPE: Any = object()


def test_templates_derive_from_the_stages_of_every_variant() -> None:
    """FollowIR's train mode runs stages its eval mode does not: both modes' templates are the recipe's."""
    followir = recipe("followir")
    eval_only = dataclasses.replace(followir, variants=({},))
    assert set(eval_only.templates) < set(followir.templates)
    assert "write_documents" in set(followir.templates) - set(eval_only.templates)
    assert recipe("infir").templates == ("instructions", "poison_instruction", "poison_query", "rewrite", "validate")


def test_a_sharded_run_stops_before_the_first_stage_that_needs_every_seed() -> None:
    declared = recipe("instructir")
    whole = declared.stage_list(declared.settings())
    cut = declared.stage_list(declared.settings(), sharded=True)
    assert [s.name for s in cut] == [s.name for s in whole][: len(cut)] and whole[len(cut)].whole


def test_prefect_yaml_deploys_exactly_ifsynths_own_recipes_by_their_entry_points() -> None:
    deployments = yaml.safe_load((REPO / "prefect.yaml").read_text())["deployments"]
    assert sorted(d["entrypoint"] for d in deployments) == sorted(recipe(name).flow_entrypoint for name in BUILTIN)


def test_each_recipe_has_its_own_flow_named_after_it() -> None:
    from ifsynth.flows.run import flows

    assert {name: recipe(name).flow().name for name in BUILTIN} == {name: name for name in BUILTIN}
    with pytest.raises(AttributeError, match="no installed recipe `nope`"):
        flows.nope  # noqa: B018


def test_every_stage_after_the_first_declares_the_model_of_the_items_it_reads() -> None:
    """The first stage reads the seed source; every other reads items, and names the fields it relies on."""
    for declared in recipes().values():
        for variant in declared.variants:
            first, *rest = declared.stage_list(declared.settings.model_validate(dict(variant)))
            assert first.reads is None, f"{declared.name}/{first.name}"
            assert [stage.name for stage in rest if stage.reads is None] == [], declared.name
