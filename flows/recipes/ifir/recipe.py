"""IFIR's stages in run order: select, level1, level2, level3, recheck, nest, assemble."""

from __future__ import annotations

from functools import partial
from typing import Any

from ifsynth.flows.recipes.ifir.assemble import AssembleIFIR
from ifsynth.flows.recipes.ifir.levels import WriteLevel, WriteLevel1
from ifsynth.flows.recipes.ifir.nest import NestLevels
from ifsynth.flows.recipes.ifir.select import SelectQueries, seed_sources
from ifsynth.flows.recipes.ifir.settings import IFIRParams
from ifsynth.flows.run.stage import Stage
from ifsynth.flows.stages.labels import LabelDocuments, instructions_with_documents
from ifsynth.schemas.config import RecipeParams
from ifsynth.schemas.ifir import IFIRPassage, Level
from ifsynth.schemas.records import ItemRecord

__all__ = ["seed_sources", "stages"]

LEVEL_STAGES = ("level1", "level2", "level3")


def rechecked(level: ItemRecord, passage: ItemRecord) -> dict[str, Any]:
    return {"level": level.read(Level).level, "seed_doc_id": passage.read(IFIRPassage).seed_doc_id}


def stages(params: RecipeParams) -> list[Stage]:
    assert isinstance(params, IFIRParams)
    p = params
    return [
        SelectQueries(),
        WriteLevel1(),
        *(
            WriteLevel(
                name=f"level{n}",
                source=f"level{n - 1}",
                level=n,
                max_tokens=p.max_tokens_level,
                max_tokens_check=p.max_tokens_judge,
            )
            for n in (2, 3)
        ),
        LabelDocuments(
            name="recheck",
            source="select",
            pairs=partial(instructions_with_documents, kind="passage", instructions=LEVEL_STAGES),
            rubric="recheck",
            describe=rechecked,
            window_words=p.window_words,
            window_stride=p.window_stride,
            max_tokens=p.max_tokens_judge,
        ),
        NestLevels(levels=LEVEL_STAGES, labels="recheck"),
        AssembleIFIR(),
    ]
