"""Rule checks: the properties of an InfoSearch document that can be measured without an LLM.

Each rule is a pure function returning the measured value and the decision. The ``rules`` stage writes one
``rule`` verdict per document: on rejection it names the first failing rule, with its measured value as the
score and its limit as the threshold (other failures follow in the reason), so `ifsynth audit` shows why a
document left and by how much; on a pass the reason lists every measured value.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

from ifsynth.flows.recipes.infosearch.settings import InfoSearchParams
from ifsynth.flows.run.context import RunContext
from ifsynth.flows.run.stage import Decided, Env, Outcome, RuleStage
from ifsynth.schemas.infosearch import ConditionedDocument, CoreQuery, CoreText, Document, QueryNegative
from ifsynth.schemas.records import ItemRecord, Payload


def _wordset(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Function words, and words that name no attribute of a document: neither narrows a query.
STOP_WORDS = _wordset(
    """a about above after again against all am an and any are as at be because been before being below between
    both but by can could did do does doing down during each few for from further had has have having he her here
    hers him his how i if in into is it its itself just me more most my no nor not now of off on once only or other
    our out over own same she should so some such than that the their them then there these they this those through
    to too under until up very was we were what when where which while who whom why will with would you your"""
)
GENERIC_WORDS = _wordset(
    """answer answers article best document documents example examples fact facts general good guide help how-to
    info information introduction kind kinds list lot lots many method methods overview page passage
    question questions reason reasons result results should something stuff text thing things tip tips topic type
    types use uses way ways"""
)
_WORD = re.compile(r"\w+(?:[-']\w+)*", re.UNICODE)


@dataclass(frozen=True)
class Check:
    rule: str
    value: float
    passed: bool
    detail: str
    threshold: float | None = None


def words(text: str) -> int:
    """Words of a Latin-script text; each CJK character counts as one word."""
    cjk = sum(1 for char in text if _is_cjk(char))
    latin = len(_WORD.findall("".join(" " if _is_cjk(char) else char for char in text)))
    return latin + cjk


def word_band(text: str, condition: str, band: tuple[int, int]) -> Check:
    n = words(text)
    low, high = band
    passed = low <= n <= high
    where = "inside" if passed else "outside"
    return Check("word_count", n, passed, f"{n} words, {where} the `{condition}` band [{low}, {high}]", high)


def _is_cjk(char: str) -> bool:
    return "CJK" in unicodedata.name(char, "") or "\u3000" <= char <= "\u303f"


def cjk_share(text: str) -> float:
    """The share of CJK characters among the letters of ``text`` (punctuation, digits and spaces left out)."""
    letters = [char for char in text if char.isalpha() or _is_cjk(char)]
    if not letters:
        return 0.0
    return sum(1 for char in letters if _is_cjk(char)) / len(letters)


def script(text: str, wanted: Literal["cjk", "latin"], *, min_cjk: float, max_cjk: float) -> Check:
    share = round(cjk_share(text), 3)
    if wanted == "cjk":
        return Check("script", share, share >= min_cjk, f"CJK share {share:.3f}, at least {min_cjk:g} needed", min_cjk)
    return Check("script", share, share <= max_cjk, f"CJK share {share:.3f}, at most {max_cjk:g} allowed", max_cjk)


def _tokens(text: str) -> list[str]:
    return [token.lower() for token in _WORD.findall(text)]


def keyword_specific(keyword: str) -> Check:
    """A keyword made only of stop words or generic words narrows nothing; the value is their share."""
    tokens = _tokens(keyword)
    vague = [token for token in tokens if token in STOP_WORDS or token in GENERIC_WORDS]
    share = len(vague) / len(tokens) if tokens else 1.0
    passed = bool(tokens) and share < 1.0
    detail = f"`{keyword}`: {len(vague)} of {len(tokens)} words are stop words or generic words"
    return Check("keyword_specific", share, passed, detail, 1.0)


def _occurrences(keyword: str, text: str) -> int:
    tokens, target = _tokens(text), _tokens(keyword)
    if not target:
        return 0
    size = len(target)
    return sum(1 for start in range(len(tokens) - size + 1) if tokens[start : start + size] == target)


def keyword_in_document(keyword: str, document: str) -> Check:
    n = _occurrences(keyword, document)
    return Check("keyword_in_document", n, n >= 1, f"`{keyword}` occurs {n} times in its document", 1)


def keyword_not_in_siblings(keyword: str, siblings: Sequence[str]) -> Check:
    n = sum(1 for sibling in siblings if _occurrences(keyword, sibling))
    detail = f"`{keyword}` occurs in {n} of the {len(siblings)} sibling documents"
    return Check("keyword_not_in_siblings", n, n == 0, detail, 0)


def _stem(token: str) -> str:
    return token[:5]  # crude, language-free: "stores" and "store", "heating" and "heat" meet


def query_overlap(query: str, document: str, minimum: float) -> Check:
    """The share of the query's content words (not stop or generic words) that the document uses too."""
    wanted = {_stem(t) for t in _tokens(query) if t not in STOP_WORDS and t not in GENERIC_WORDS}
    present = {_stem(t) for t in _tokens(document)}
    share = round(len(wanted & present) / len(wanted), 3) if wanted else 1.0
    detail = (
        f"uses {len(wanted & present)} of the {len(wanted)} content words of the query, at least {minimum:g} needed"
    )
    return Check("query_overlap", share, share >= minimum, detail, minimum)


def document_checks(document: ItemRecord, params: InfoSearchParams, siblings: Sequence[str]) -> list[Check]:
    """Every rule that applies to this document, by its dimension's definition."""
    if document.kind == "negative":
        negative = document.read(QueryNegative)
        return [query_overlap(negative.query, negative.passage, params.min_negative_overlap)]
    positive = document.read(ConditionedDocument)
    spec = params.dimension_specs[positive.dimension]
    condition, text = positive.condition, positive.passage
    checks = []
    if condition in spec.word_bands:
        checks.append(word_band(text, condition, spec.word_bands[condition]))
    if condition in spec.scripts:
        checks.append(script(text, spec.scripts[condition], min_cjk=params.min_cjk_share, max_cjk=params.max_cjk_share))
    if not spec.conditions:
        checks += [
            keyword_specific(condition),
            keyword_in_document(condition, text),
            keyword_not_in_siblings(condition, siblings),
        ]
    return checks


@dataclass(frozen=True)
class Checked:
    """A document to check, with the texts of its siblings (the other positives of its core query)."""

    document: ItemRecord
    siblings: list[str]


@dataclass(frozen=True, kw_only=True)
class CheckDocuments(RuleStage[Checked]):
    """Documents from ``sources`` that pass every rule continue as items of this stage."""

    reads: ClassVar[type[Payload]] = CoreText
    name: str = "rules"
    sources: tuple[str, ...]

    def total(self, ctx: RunContext) -> int:
        return sum(ctx.warehouse.count_items(ctx.run_id, source) for source in self.sources)

    def inputs(self, ctx: RunContext) -> Iterator[list[Checked]]:
        """Every document with a condition, and every query negative, each with its siblings, which come from
        the core query items of ``collect``, held in memory: a run has hundreds of core queries, not millions."""
        cores = {
            item.group_id: item.read(CoreQuery)
            for page in ctx.warehouse.items(ctx.run_id, "collect")
            for item in page
            if item.kind == "query"
        }
        for source in self.sources:
            for page in ctx.warehouse.items(ctx.run_id, source):
                yield [Checked(item, siblings(cores.get(item.group_id), item)) for item in page if conditioned(item)]

    def decide(self, env: Env, page: list[Checked]) -> Iterable[Decided]:
        params = env.params
        assert isinstance(params, InfoSearchParams)
        return [(entry.document.item_id, rule_outcome(env, entry, params)) for entry in page]


def conditioned(item: ItemRecord) -> bool:
    """A query negative, or a document whose condition is named: what the rules check."""
    return item.kind != "query" and not (item.kind == "document" and item.read(Document).condition is None)


def siblings(core: CoreQuery | None, item: ItemRecord) -> list[str]:
    """The texts of the other positives of the item's core query (a negative has none)."""
    if core is None or item.kind == "negative":
        return []
    own = item.read(Document).doc_id
    return [passage.text for passage in core.passages if passage.doc_id != own]


def rule_outcome(env: Env, entry: Checked, params: InfoSearchParams) -> Outcome:
    """One ``rule`` verdict: on rejection the first failing rule by its value and limit, the others in the
    reason; on a pass every measured value. A passing document continues as a ``document`` (a rewrite too)."""
    document = entry.document
    checks = document_checks(document, params, entry.siblings)
    failed = [check for check in checks if not check.passed]
    if failed:
        first, *others = failed
        reason = f"{first.rule}: {first.detail}" + "".join(f"; also {c.rule}: {c.detail}" for c in others)
        verdict = env.verdict(
            document.item_id,
            "reject",
            judge="rule",
            reason=reason,
            score=first.value,
            threshold=first.threshold,
            rule=first.rule,
        )
        return Outcome("reject", verdicts=[verdict])
    verdicts = []
    if checks:  # one verdict per item and stage: the measured values of every rule it passed
        reason = "; ".join(f"{c.rule}: {c.detail}" for c in checks)
        verdicts.append(env.verdict(document.item_id, "pass", judge="rule", reason=reason))
    kind = document.kind if document.kind == "negative" else "document"
    kept = env.child(document, kind, document.payload, call_keys=document.call_keys, id_as="document")
    return Outcome("pass", items=[kept], verdicts=verdicts)
