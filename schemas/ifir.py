"""IFIR's expert domains: the public subsets, how each builds its three instruction levels, and how a level is
named in a release.

Generation, export, import and scoring read the levels through these names, so the layout is stated once. A
release query is one (subset, seed query, level): its id is ``<subset>-<seed query id>`` in mode ``level<n>``;
a passage's id is ``<subset>-<seed passage id>`` (seed ids of two subsets may collide)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ifsynth.schemas.records import Payload

Domain = Literal["finance", "science", "law", "healthcare"]
DOMAINS: tuple[Domain, ...] = ("finance", "science", "law", "healthcare")
LEVELS: tuple[int, ...] = (1, 2, 3)


TEST_DATA = "test_data.json"  # a subset folder's queries with their passages and levels, in IFIR's layout


def level_mode(level: int) -> str:
    return f"level{level}"


LEVEL_MODES: tuple[str, ...] = tuple(level_mode(n) for n in LEVELS)


def level_of(mode: str) -> int:
    return int(mode.removeprefix("level"))


def release_id(subset: str, seed_id: str) -> str:
    return f"{subset}-{seed_id}"


class Scheme(BaseModel):
    """One IFIR subset: what its seeds are and what each instruction level asks beyond the one below."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    domain: Domain
    seed_kind: str = Field(description="what a seed query is, for the prompts")
    level1: str = Field(description="the domain's generic ask: level 1, written without an LLM")
    details: tuple[str, str] = Field(description="what level 2 adds to level 1, and level 3 to level 2")
    stance_labels: tuple[str, ...] = Field(
        (), description="seed labels (query metadata `labels`) of which level 2 asks for one: SciFact's stances"
    )
    judge_maximum: tuple[int, int, int] = Field(
        (1, 2, 3), description="the top of the INSTFOL judge's scale at levels 1, 2, 3 (IFIR's prompts)"
    )


SCHEMES: dict[str, Scheme] = {
    "fiqa": Scheme(
        domain="finance",
        seed_kind="a personal-finance question",
        level1="Find answers from people with financial knowledge that address this question.",
        details=(
            "facts about the asker themselves: age, occupation, income, savings or debts, family situation",
            "the asker's specific financial goals, with amounts, time horizons or constraints",
        ),
    ),
    "scifact_open": Scheme(
        domain="science",
        seed_kind="a scientific claim",
        level1="Find scientific evidence about this claim.",
        details=(
            "which stance the evidence must take: it must support the claim, or it must contradict it",
            "the searcher's own research objective: what they study and what they will use the evidence for",
        ),
        stance_labels=("SUPPORT", "CONTRADICT"),
    ),
    "aila": Scheme(
        domain="law",
        seed_kind="the facts of a new legal case",
        level1="Find prior cases that are similar to this case.",
        details=(
            "which party the prior decisions must favour: the plaintiff or appellant, or the defendant or respondent",
            "specific details of the case that a useful precedent must share",
        ),
        judge_maximum=(3, 3, 3),
    ),
    "pm": Scheme(
        domain="healthcare",
        seed_kind="a disease and a gene variant of a patient",
        level1="Find treatment evidence for a patient with this disease and gene variant.",
        details=(
            "the patient's demographics: age and sex",
            "the patient's treatment history and family medical history",
        ),
    ),
}
# IFIR's subsets with one instruction per query (its level 0: NFCorpus, TREC-CDS, FIRE), which ifsynth does not build
SINGLE_LEVEL: tuple[str, ...] = ("nfcorpus", "cds", "fire")
DEFAULT_SUBSET: dict[Domain, str] = {scheme.domain: name for name, scheme in SCHEMES.items()}


class IFIRQuery(Payload):
    """A selected seed query (kind ``query``); its levels and its group carry these fields on."""

    subset: str
    domain: Domain
    query_id: str = Field(description="the release id, `<subset>-<seed query id>`")
    seed_query_id: str
    query: str
    relevant: list[str] = Field(description="the release ids of its originally relevant passages, in seed order")
    stance: str | None = Field(description="the seed stance label level 2 asks for, where the subset has them")


class IFIRPassage(Payload):
    """An originally relevant passage of a selected query (kind ``passage``), which the levels are re-checked on."""

    doc_id: str = Field(description="its release id")
    seed_doc_id: str
    title: str
    passage: str
    label: str | None = Field(description="its seed stance label, upper-cased, if any")


class Level(IFIRQuery):
    """One instruction level of a query (kind ``level``): level 1 the subset's generic ask, above it written."""

    level: int
    instruction: str


class Rechecked(Payload):
    """A passage's re-check under a level (kind ``label``): relevant or not."""

    doc_id: str
    relevant: bool


class KeptLevel(BaseModel):
    """A level a query keeps, with the passages relevant at it (within those of the level below)."""

    model_config = ConfigDict(frozen=True)

    level: int
    instruction: str
    relevant: list[str]
    item: str = Field(description="the level's item id")


class QueryLevels(IFIRQuery):
    """A query with its nested levels up to the first dropped one (kind ``group``): what assembly releases."""

    levels: list[KeptLevel]
