"""InfoSearch settings: dimensions chosen with --set, partial overrides of a dimension, seeds per dimension."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ifsynth.flows.recipes.infosearch.collect import dimension_source
from ifsynth.flows.recipes.infosearch.settings import DIMENSIONS, InfoSearchParams
from ifsynth.flows.run.config import resolve
from ifsynth.schemas.errors import ConfigError
from tests.conftest import INSTRUCTIR_SEEDS

BASE: dict[str, Any] = {"seeds": "demo", "base_url": "http://127.0.0.1:9/v1", "model": "m"}


def test_a_partial_override_changes_one_key_and_keeps_the_rest() -> None:
    config = resolve(
        "infosearch",
        sets=["dimensions=[length, source]", "dimension_specs.length.word_bands.sentence=[1, 30]"],
        **BASE,
    )
    params = InfoSearchParams.model_validate(config.params)
    assert params.dimensions == ("length", "source")
    assert params.dimension_specs["length"].word_bands == {
        "sentence": (1, 30),
        "paragraph": (40, 220),
        "article": (230, 2000),
    }
    assert params.dimension_specs["source"] == DIMENSIONS["source"]


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("dimensions=[length, colour]", "unknown dimensions \\['colour'\\]"),
        ("dimension_specs.length.word_bands.poem=[1, 2]", "word_bands names conditions not in conditions"),
        ("dimension_specs.length.word_bands.sentence=[9, 2]", "0 <= low <= high"),
    ],
)
def test_bad_settings_are_one_config_error(assignment: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve("infosearch", sets=[assignment], **BASE)


def test_a_dimension_takes_its_own_seeds_from_the_config_file(tmp_path: Path) -> None:
    config_file = tmp_path / "run.yaml"
    config_file.write_text(f"dimension_specs:\n  audience: {{seeds: 'beir:{INSTRUCTIR_SEEDS}'}}\n")
    config = resolve("infosearch", config_file=str(config_file), **BASE)
    params = InfoSearchParams.model_validate(config.params)
    own = dimension_source(config.seeds, params.dimension_specs["audience"], "audience")
    assert own.spec == f"beir:{INSTRUCTIR_SEEDS}"
    demo = dimension_source(config.seeds, params.dimension_specs["length"], "length")
    assert demo.spec == "demo (length)" and len(list(demo.pairs())) == 3
