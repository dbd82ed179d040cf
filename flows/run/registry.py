"""The recipes ifsynth knows, each declared by one ``Recipe`` object and found through the ``ifsynth.recipes``
entry-point group: the built-in five register themselves there exactly as a recipe in a package of its own does.

A declaration names its stages, seed hook and flow by import path, so that choosing a recipe or checking its
config imports neither Prefect nor the gateway; what derives from the stages (their templates) is computed on
first use.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache, cached_property
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from ifsynth.schemas.config import Difference, RecipeParams, fidelity
from ifsynth.schemas.errors import ConfigError
from ifsynth.schemas.modes import RecipeMetrics

if TYPE_CHECKING:  # stage modules import the gateway, and flows Prefect; a registry lookup must not
    from ifsynth.flows.run.flows import RecipeFlow
    from ifsynth.flows.run.stage import Stage
    from ifsynth.flows.seeds import SeedSource

GROUP = "ifsynth.recipes"


def _load(path: str) -> Any:
    """The object an import path ``module:name`` names."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class Recipe:
    """Everything ifsynth needs to know of a recipe.

    ``stages`` is ``module:function``, the function building the stage list from the recipe's settings;
    ``variants`` are settings that between them reach every stage the recipe has (FollowIR's train mode runs
    other stages than its eval mode), so the templates derived from the stages are all of them. ``seeds`` is
    ``module:function`` for a recipe that reads more than the run's one seed source (InfoSearch: one per
    dimension). ``metrics`` are what ``evaluate`` scores its releases with. ``prompts`` is the package whose
    ``<name>/`` folder holds the templates, ``demo`` the package whose ``demo_seeds/`` folder ``--seeds demo``
    reads. ``exports`` are the recipe's own export formats, each ``module:function`` a ``warehouse.export.Writer``
    (beside the formats every release takes; one of the same name, as ``hf``, takes the generic one's place),
    ``imports`` the published layouts it reads, each ``module:function`` a ``warehouse.imports.Reader``, and
    ``card`` ``module:function`` giving its cards' ``warehouse.cards.CardFacts`` from the card stored at
    assembly (languages, the seed collection's license, notes). ``differences`` is the recipe's fidelity list
    (its ``fidelity.py``)."""

    name: str
    paper: str
    settings: type[RecipeParams]
    stages: str
    variants: tuple[Mapping[str, Any], ...] = ({},)
    seeds: str | None = None
    metrics: RecipeMetrics = field(default_factory=RecipeMetrics)
    prompts: str = "ifsynth.prompts"
    demo: str = "ifsynth.flows"
    exports: Mapping[str, str] = field(default_factory=dict)
    imports: Mapping[str, str] = field(default_factory=dict)
    card: str | None = None
    summary: str = ""  # one line for `ifsynth run --help`
    differences: tuple[Difference, ...] = ()  # where its defaults depart from its authors, each with its reason

    def fidelity(self, params: RecipeParams | None = None) -> list[dict[str, str]]:
        """The fidelity table's rows of a run with ``params`` (none: the defaults): what the card, the README and
        `ifsynth recipes NAME` print."""
        return fidelity(params or self.settings(), self.differences)

    @property
    def flow_entrypoint(self) -> str:
        """Where Prefect finds the recipe's flow: one generic flow per recipe, named after it."""
        return f"ifsynth.flows.run.flows:{self.name}"

    def flow(self) -> RecipeFlow:
        """The recipe's Prefect flow."""
        flow: RecipeFlow = _load(self.flow_entrypoint)
        return flow

    def stage_list(self, params: RecipeParams, *, sharded: bool = False) -> list[Stage]:
        """The recipe's stages in run order, configured by ``params``; a stage's ordinal is its place here.
        A shard's run (``sharded``) takes those before the first stage that needs every seed (``Stage.whole``)."""
        stages: list[Stage] = _load(self.stages)(params)
        if not sharded:
            return stages
        cut = next((at for at, stage in enumerate(stages) if at and stage.whole), len(stages))
        return stages[:cut]

    @cached_property
    def templates(self) -> tuple[str, ...]:
        """Every template the recipe's stages render, in stage order: what a run's fingerprint hashes, what is
        checked before a run, what the prompt tests render."""
        names: dict[str, None] = {}
        for variant in self.variants:
            for stage in self.stage_list(self.settings.model_validate(dict(variant))):
                names.update(dict.fromkeys(stage.templates))
        return tuple(names)

    def seed_sources(self, seeds: str, params: RecipeParams) -> list[SeedSource]:
        """Every seed source a run reads: the run's, or those its recipe's ``seeds`` hook names."""
        if self.seeds is not None:
            return list(_load(self.seeds)(seeds, params))
        from ifsynth.flows.seeds import open_source

        return [open_source(seeds, package=self.demo)]

    def source(self, seeds: str, params: RecipeParams) -> SeedSource:
        """The source a run's stages read (``ctx.source``): the one its recipe names (FollowIR's demo topics), else
        the run's."""
        sources = self.seed_sources(seeds, params)
        if len(sources) == 1:
            return sources[0]
        from ifsynth.flows.seeds import open_source

        return open_source(seeds, package=self.demo)


@cache
def recipes() -> dict[str, Recipe]:
    """Every installed recipe by name; two packages registering one name is refused, naming both."""
    found: dict[str, tuple[Recipe, str]] = {}
    for point in sorted(entry_points(group=GROUP), key=lambda point: point.value):
        declared = point.load()
        if not isinstance(declared, Recipe):
            raise ConfigError(f"entry point `{point.name}` of {GROUP} ({point.value}) is not a Recipe")
        if declared.name in found:
            raise ConfigError(
                f"recipe `{declared.name}` is registered twice, by {found[declared.name][1]} and {point.value}; "
                "uninstall one of the packages"
            )
        found[declared.name] = (declared, point.value)
    return {name: found[name][0] for name in sorted(found)}


def recipe(name: str) -> Recipe:
    known = recipes()
    if name not in known:
        raise ConfigError(f"unknown recipe `{name}`; known: {', '.join(known)}")
    return known[name]


def metrics_of(name: str) -> RecipeMetrics:
    """What ``evaluate`` scores a release of recipe ``name`` with."""
    return recipe(name).metrics


def writer(name: str, fmt: str) -> Callable[..., Any] | None:
    """Recipe ``name``'s own writer of export format ``fmt``, if it declares one."""
    declared = recipe(name)
    return _load(declared.exports[fmt]) if fmt in declared.exports else None


def card_facts(name: str) -> Callable[..., Any] | None:
    """Recipe ``name``'s hook giving its cards' ``warehouse.cards.CardFacts`` from the stored card, if any."""
    declared = recipes().get(name)
    return None if declared is None or declared.card is None else _load(declared.card)


def importers() -> dict[str, tuple[str, Callable[..., Any]]]:
    """Every import format a recipe declares -> (that recipe, its reader); two recipes declaring one format is
    refused, naming both."""
    found: dict[str, tuple[str, str]] = {}
    for declared in recipes().values():
        for fmt, path in declared.imports.items():
            if fmt in found:
                raise ConfigError(f"import format `{fmt}` is declared twice, by {found[fmt][0]} and {declared.name}")
            found[fmt] = (declared.name, path)
    return {fmt: (name, _load(path)) for fmt, (name, path) in found.items()}
