"""The offline judge: deterministic lexical verdicts, no network, no key, no model weights.

- preprocess: each summary sentence, or each clause of a compound one, is a claim, supported
  when the source sentences closest to it hold its content terms, every number and name in it
  appears in the source, and the closest sentence agrees with it on negation. Questions are the
  source's most salient sentences, asked as "Does the text say that ...?".
- analyze: a question is answered when the summary holds most of the question's content terms.
  The step receives ``AnalyzeInput``, which has no source: the verdict can only come from the
  summary.
- reason: a template over the verdicts.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from summeval_runner._judges._protocol import (
    AnalyzeInput,
    JudgeReply,
    JudgeRequest,
    PreprocessInput,
    ReasonInput,
)
from summeval_runner._judges._text import (
    Analysed,
    analyse,
    quote,
    shorten,
    split_claims,
    split_sentences,
)

QUESTION_PREFIX = "Does the text say that "
# Share of a claim's content terms that the closest source sentences must hold.
_SUPPORT_RECALL = 0.6
# Share of a question's content terms that the summary must hold to answer it.
_ANSWER_RECALL = 0.5
# Source sentences with fewer content terms make poor questions ("Read more.").
_MIN_QUESTION_TERMS = 4
_CAPITALISED_OPENERS = frozenset(
    "a an the in on at for this that these those it its he she they we his her their there as"
    " after before when while but and".split()
)


class OfflineJudge:
    """The built-in judge: same steps, same structures as an LLM judge, computed from the text."""

    name = "offline"

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        payload = request.payload
        content: dict[str, Any]
        if isinstance(payload, PreprocessInput):
            content = preprocess(payload)
        elif isinstance(payload, AnalyzeInput):
            content = analyze(payload)
        else:
            content = {"reason": explain(payload)}
        return JudgeReply(content=content)


def preprocess(payload: PreprocessInput) -> dict[str, Any]:
    source_sentences = [analyse(s) for s in split_sentences(payload.source)]
    source_keys = frozenset().union(*(s.keys for s in source_sentences))
    claims = [a for a in (analyse(c) for c in split_claims(payload.summary)) if a.keys]
    return {
        "alignment": [_judge_claim(claim, source_sentences, source_keys) for claim in claims],
        "questions": _questions(source_sentences, payload.max_questions),
    }


def _judge_claim(
    claim: Analysed, sentences: list[Analysed], source_keys: frozenset[str]
) -> dict[str, Any]:
    verdict = {"claim": claim.text, "supported": False, "reason": ""}
    invented = [
        t.surface for t in claim.terms if (t.is_number or t.is_name) and t.key not in source_keys
    ]
    if invented:
        verdict["reason"] = f"the source does not mention {quote(invented)}"
        return verdict
    ranked = sorted(sentences, key=lambda s: len(claim.keys & s.keys), reverse=True)
    if not ranked:
        verdict["reason"] = "the source has no sentence to support it"
        return verdict
    best = ranked[0]
    # A summary sentence often fuses two source sentences: judge against the best pair.
    evidence = best.keys | (ranked[1].keys if len(ranked) > 1 else frozenset())
    missing = [t.surface for t in claim.terms if t.key not in evidence]
    recall = 1 - len({t.key for t in claim.terms if t.key not in evidence}) / len(claim.keys)
    if recall < _SUPPORT_RECALL:
        verdict["reason"] = f"the source does not say this: it lacks {quote(missing)}"
    elif claim.negated != (closest := _closest_clause(claim, best)).negated:
        which = "the claim denies" if claim.negated else "the claim asserts the opposite of"
        verdict["reason"] = f"{which} what the source says: '{shorten(closest.text)}'"
    else:
        verdict["supported"] = True
        verdict["reason"] = f"the source says: '{shorten(best.text)}'"
    return verdict


def _closest_clause(claim: Analysed, sentence: Analysed) -> Analysed:
    # Negation belongs to a clause: "fires damaged furniture; nobody was injured" negates only
    # its second half.
    clauses = [analyse(clause) for clause in split_claims(sentence.text)]
    return max(clauses, key=lambda clause: len(claim.keys & clause.keys), default=sentence)


def _questions(sentences: list[Analysed], limit: int) -> list[str]:
    frequency = Counter(key for s in sentences for key in s.keys)
    # A short source may hold only short sentences; they still make questions then.
    minimum = (
        _MIN_QUESTION_TERMS if any(len(s.keys) >= _MIN_QUESTION_TERMS for s in sentences) else 1
    )
    scored: list[tuple[float, int, Analysed]] = []
    seen: set[frozenset[str]] = set()
    for index, sentence in enumerate(sentences):
        if len(sentence.keys) < minimum or sentence.keys in seen:
            continue
        seen.add(sentence.keys)
        # Terms the article repeats mark its topic; news puts the key facts first.
        centrality = sum(math.log1p(frequency[k]) for k in sentence.keys) / math.sqrt(
            len(sentence.keys)
        )
        scored.append((centrality / (1 + 0.15 * index), index, sentence))
    scored.sort(key=lambda item: (-item[0], item[1]))
    return [_as_question(sentence.text) for _, _, sentence in scored[:limit]]


def _as_question(sentence: str) -> str:
    statement = sentence.strip().rstrip(".!?;:")
    first, _, rest = statement.partition(" ")
    if first.lower() in _CAPITALISED_OPENERS:
        statement = f"{first.lower()} {rest}".strip()
    return f"{QUESTION_PREFIX}{statement}?"


def analyze(payload: AnalyzeInput) -> dict[str, Any]:
    summary_keys = analyse(payload.summary).keys
    return {"coverage": [_answer(question, summary_keys) for question in payload.questions]}


def _answer(question: str, summary_keys: frozenset[str]) -> dict[str, Any]:
    statement = question.removeprefix(QUESTION_PREFIX).rstrip("?")
    asked = analyse(statement)
    if not asked.keys:
        return {
            "question": question,
            "answered": False,
            "reason": "the question has no content to look for",
        }
    found = [t.surface for t in asked.terms if t.key in summary_keys]
    missing = [t.surface for t in asked.terms if t.key not in summary_keys]
    recall = len(asked.keys & summary_keys) / len(asked.keys)
    if recall >= _ANSWER_RECALL:
        return {
            "question": question,
            "answered": True,
            "reason": f"the summary mentions {quote(found)}",
        }
    return {
        "question": question,
        "answered": False,
        "reason": f"the summary does not mention {quote(missing)}",
    }


def explain(payload: ReasonInput) -> str:
    if payload.claim_count == 0:
        return "Score 0: the summary makes no claim that can be checked against the source."
    if payload.question_count == 0:
        return "Score 0: no coverage question could be drawn from the source."
    setter = "alignment" if payload.alignment_score < payload.coverage_score else "coverage"
    if payload.alignment_score == payload.coverage_score:
        setter = "alignment and coverage"
    parts = [
        f"Score {payload.score:.2f} of {payload.scale:g}, set by {setter} "
        f"(alignment {payload.alignment_score:.2f}, coverage {payload.coverage_score:.2f})."
    ]
    if payload.unsupported_claims:
        cited = "; ".join(
            f"'{shorten(v.claim, 60)}' ({v.reason})" for v in payload.unsupported_claims[:3]
        )
        parts.append(f"Unsupported: {cited}.")
    if payload.unanswered_questions:
        cited = "; ".join(f"'{shorten(q, 70)}'" for q in payload.unanswered_questions[:3])
        parts.append(f"Not answered by the summary: {cited}.")
    if not payload.unsupported_claims and not payload.unanswered_questions:
        parts.append("Every claim is supported and every question is answered.")
    return " ".join(parts)
