"""What FollowIR's items hold, kind by kind: a TREC topic and the judged documents it is re-judged on, a
candidate alteration and its re-judgments, the kept alteration with its pool, and the training set's
synthetic documents and pairs."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ifsynth.schemas.records import Payload

Role = Literal["relevant", "spot_check"]
RELEVANT: Role = "relevant"
SPOT_CHECK: Role = "spot_check"


class Topic(Payload):
    """A selected TREC topic (kind ``topic``); its candidate alterations carry these fields on."""

    query_id: str
    query: str
    title: str
    description: str
    narrative: str
    instruction: str = Field(description="the narrative, or a candidate's altered narrative")
    grades: dict[str, int] = Field(description="doc id -> TREC grade of every judged document")


class JudgedDocument(Payload):
    """A judged document a topic's alterations are re-judged on (kind ``judged``)."""

    doc_id: str
    title: str
    passage: str
    grade: int
    role: Role = Field(description="relevant: may flip; spot_check: judged non-relevant, must stay so")


class Candidate(Topic):
    """A candidate alteration of a topic (kind ``instruction`` of ``alter``), the ``k``-th written."""

    change: str
    k: int


class Label(Payload):
    """A document's re-judgment under a candidate (kind ``label``); unlabelled when the call failed."""

    doc_id: str
    relevant: bool | None


class AlteredTopic(Payload):
    """A topic with its kept alteration (kind ``altered_topic``)."""

    query_id: str
    query: str
    title: str
    description: str
    instruction_og: str
    instruction_changed: str
    change: str
    candidate: int
    grades: dict[str, int]
    flipped: list[str] = Field(description="relevant documents the alteration made non-relevant")
    relevant: list[str]


class PooledTopic(AlteredTopic):
    """A kept topic with its rerank pool (kind ``pool``)."""

    pool: list[str]
    pool_sources: dict[str, int] = Field(description="ranker -> documents it added to the pool")


class SyntheticDocument(Payload):
    """A training document written for a (query, narrative) (kind ``document``), meant relevant (1) or not (0)."""

    query_id: str
    query: str
    instruction: str
    passage: str
    label: int
    number: int


class TrainingPair(Payload):
    """A (query, narrative) with its first relevant and its first non-relevant document the judge agreed with,
    one of them missing where the judge agreed with none of that label (kind ``training_pair``)."""

    query_id: str
    query: str
    instruction: str
    positive: str | None = None
    negative: str | None = None
    items: dict[str, str] = Field(description="positive / negative -> the document's item id, of those it has")


class ShortForm(Payload):
    """A shorter form of a narrative (kind ``instruction`` of ``shorten`` and ``keywords``)."""

    instruction: str
