"""Rule checks: the properties of an InfoSearch document that can be measured without an LLM.

Each rule is a pure function returning the measured value and the decision. The ``rules`` stage writes one
``rule`` verdict per document: on rejection it names the first failing rule, with its measured value as the
score and its limit as the threshold (other failures follow in the reason), so `ifsynth audit` shows why a
document left and by how much; on a pass the reason lists every measured value.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ifsynth.flows.recipes.infosearch.settings import InfoSearchParams
from ifsynth.flows.run.context import RunContext
from ifsynth.flows.run.stage import Outcome, StageWriter
from ifsynth.schemas.records import ItemRecord, StageCounts


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
    payload = document.payload
    if document.kind == "negative":
        return [query_overlap(payload["query"], payload["passage"], params.min_negative_overlap)]
    spec = params.dimension_specs[payload["dimension"]]
    condition, text = payload["condition"], payload["passage"]
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


def check_documents(ctx: RunContext, order: int, *, stage: str, sources: Sequence[str]) -> StageCounts:
    """Documents from ``sources`` that pass every rule continue as items of this stage.

    Siblings (the other positives of a core query) come from the core query items of ``collect``, held in
    memory: an InfoSearch run has hundreds of core queries, not millions.
    """
    params = ctx.params
    assert isinstance(params, InfoSearchParams)
    cores = {
        item.group_id: item.payload
        for page in ctx.warehouse.items(ctx.run_id, "collect")
        for item in page
        if item.kind == "query"
    }
    total = sum(ctx.warehouse.count_items(ctx.run_id, source) for source in sources)
    writer = StageWriter(ctx, stage, order, total)
    for source in sources:
        for page in ctx.warehouse.items(ctx.run_id, source):
            for document in page:
                if document.kind == "query" or (
                    document.kind == "document" and document.payload.get("condition") is None
                ):
                    continue
                writer.add(document.item_id, _judge(ctx, writer, document, params, cores))
                ctx.progress.advance(stage)
    return writer.close()


def _judge(
    ctx: RunContext,
    writer: StageWriter,
    document: ItemRecord,
    params: InfoSearchParams,
    cores: dict[str, dict],
) -> Outcome:
    payload = document.payload
    core = cores.get(document.group_id, {})
    siblings = [p["text"] for p in core.get("passages", []) if p["doc_id"] != payload.get("doc_id")]
    checks = document_checks(document, params, siblings)
    failed = [check for check in checks if not check.passed]
    if failed:
        first, *others = failed
        reason = f"{first.rule}: {first.detail}" + "".join(f"; also {c.rule}: {c.detail}" for c in others)
        verdict = writer.verdict(
            document.item_id, "reject", judge="rule", reason=reason, score=first.value, threshold=first.threshold
        )
        return Outcome("reject", verdicts=[verdict])
    verdicts = []
    if checks:  # one verdict per item and stage: the measured values of every rule it passed
        reason = "; ".join(f"{c.rule}: {c.detail}" for c in checks)
        verdicts.append(writer.verdict(document.item_id, "pass", judge="rule", reason=reason))
    kind = document.kind if document.kind == "negative" else "document"
    kept = writer.child(document, kind, payload, call_keys=document.call_keys, id_as="document")
    return Outcome("pass", items=[kept], verdicts=verdicts)
