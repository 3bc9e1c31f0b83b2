"""The offline judge: deterministic lexical verdicts, no network, no key, no model weights.

- preprocess: each summary sentence, or each clause of a compound one, is a claim, supported
  when the few source sentences that best cover it hold most of its content terms, every number,
  name and date in it appears in the source, its neighbouring words stand together there, no name is
  put in another's role, it does not stutter ("age age"), and the source agrees with it on
  negation (read per phrase). Questions are the source's most salient sentences, asked as "Does
  the text say that ...?".
- analyze: a question is answered when the summary holds most of the question's content terms.
  The step receives ``AnalyzeInput``, which has no source: the verdict can only come from the
  summary.
- reason: a template over the verdicts.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable
from typing import Any

from summeval_runner._judges._protocol import (
    AnalyzeInput,
    JudgeReply,
    JudgeRequest,
    PreprocessInput,
    ReasonInput,
)
from summeval_runner._judges._text import (
    STOP_WORDS,
    Analysed,
    Term,
    analyse,
    quote,
    shorten,
    split_claims,
    split_sentences,
    words,
)

QUESTION_PREFIX = "Does the text say that "
# Share of a claim's content terms that its supporting source sentences must hold.
_SUPPORT_RECALL = 0.8
# Neighbouring claim words must stand within this many content words of each other in a source
# sentence, for at least this share of the claim's pairs.
_PAIR_WINDOW = 4
_PAIR_SUPPORT = 0.5
# Source sentences that may support one claim: a summary sentence often fuses two or three.
_MAX_EVIDENCE = 3
# How much an earlier sentence is preferred as a question: news puts the key facts first.
_LEAD_BIAS = 0.15
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
        t.surface
        for t in claim.terms
        if (t.is_number or t.is_name or t.is_date) and t.key not in source_keys
    ]
    if invented:
        verdict["reason"] = f"the source does not mention {quote(invented)}"
        return verdict
    support = _supporting_sentences(claim, sentences)
    if not support:
        verdict["reason"] = "the source has no sentence to support it"
        return verdict
    best = support[0]
    evidence = frozenset().union(*(s.keys for s in support))
    missing = [t.surface for t in claim.terms if t.key not in evidence]
    recall = 1 - len({t.key for t in claim.terms if t.key not in evidence}) / len(claim.keys)
    if recall < _SUPPORT_RECALL:
        verdict["reason"] = f"the source does not say this: it lacks {quote(missing)}"
    elif (stutter := _stutter(claim, support)) is not None:
        verdict["reason"] = stutter
    elif (apart := _pairs_apart(claim, support)) is not None:
        verdict["reason"] = apart
    elif conflict := _negation_conflict(claim, best):
        verdict["reason"] = conflict
    else:
        verdict["supported"] = True
        verdict["reason"] = f"the source says: '{shorten(best.text)}'"
    return verdict


def _supporting_sentences(claim: Analysed, sentences: list[Analysed]) -> list[Analysed]:
    """The few source sentences that together hold most of the claim: a greedy cover.

    A summary sentence often fuses two or three source sentences; each one added must bring
    at least two of the claim's words the others lack, so stray matches do not count.
    """
    chosen: list[Analysed] = []
    uncovered = set(claim.keys)
    for _ in range(_MAX_EVIDENCE):
        best = max(sentences, key=lambda s: len(uncovered & s.keys), default=None)
        if best is None:
            break
        gain = len(uncovered & best.keys)
        if gain == 0 or (chosen and gain < 2):
            break
        chosen.append(best)
        uncovered -= best.keys
    return chosen


def _stutter(claim: Analysed, sentences: list[Analysed]) -> str | None:
    """A content word said twice in a row ("at an early age age"), which no supporting sentence
    says so: a generation error, and the claim it garbles is not one the source makes."""
    for word, following in itertools.pairwise(words(claim.text)):
        if word == following and word not in STOP_WORDS and not word[0].isdigit():
            doubled = (word, word)
            if not any(doubled in itertools.pairwise(words(s.text)) for s in sentences):
                return f"the claim says '{word} {word}', which the source does not"
    return None


def _pairs_apart(claim: Analysed, sentences: list[Analysed]) -> str | None:
    """Why the claim's words, though all in the source, do not make its statement there.

    Each pair of neighbouring content words in the claim should stand close together in one of
    the supporting sentences: "the group has been killed" built from "the group" and "killed"
    in different phrases is not what the source says.
    """
    positions = []
    for sentence in sentences:
        where: dict[str, list[int]] = {}
        for index, term in enumerate(sentence.terms):
            where.setdefault(term.key, []).append(index)
        positions.append(where)

    def together(a: Term, b: Term) -> bool:
        return any(
            abs(i - j) <= _PAIR_WINDOW
            for where in positions
            for i in where.get(a.key, ())
            for j in where.get(b.key, ())
        )

    if (swapped := _swapped_name(claim, sentences, together)) is not None:
        return swapped
    terms = claim.terms
    pairs = [(a, b) for a, b in itertools.pairwise(terms) if a.key != b.key]
    if len(pairs) < 2:
        return None
    apart = [(a, b) for a, b in pairs if not together(a, b)]
    if len(apart) / len(pairs) <= 1 - _PAIR_SUPPORT:
        return None
    a, b = apart[0]
    return f"the source has '{a.surface}' and '{b.surface}' but not together as the claim puts them"


def _swapped_name(
    claim: Analysed, sentences: list[Analysed], together: Callable[[Term, Term], bool]
) -> str | None:
    """A name put where the source has another: "Mayor Erik Holm" when the source's mayor is
    Anna Lindqvist. Said only on positive evidence: the word before the name (a title, a role)
    comes right before a different name in the source, and never near this one."""
    terms = claim.terms
    index = 0
    while index < len(terms):
        if not terms[index].is_name:
            index += 1
            continue
        end = index
        while end + 1 < len(terms) and terms[end + 1].is_name:
            end += 1
        names = terms[index : end + 1]
        keys = {name.key for name in names}
        if index > 0 and not terms[index - 1].is_number:
            word = terms[index - 1]
            others = [
                following
                for sentence in sentences
                for before, following in itertools.pairwise(sentence.terms)
                if before.key == word.key and following.is_name and following.key not in keys
            ]
            if others and not any(together(name, word) for name in names):
                who = " ".join(name.surface for name in names)
                return (
                    f"the source puts '{word.surface}' with '{others[0].surface}', not with '{who}'"
                )
        index = end + 1
    return None


def _negation_conflict(claim: Analysed, sentence: Analysed) -> str | None:
    """Why the claim and the sentence disagree on negation, or None when they agree.

    Negation is a phrase's, not a sentence's: "the dog stayed in its mouth, not moving" denies
    only "moving". They disagree when a word one of them denies is in the other, not denied.
    """
    denied = sorted((sentence.negated_keys & claim.keys) - claim.negated_keys)
    if denied:
        words = [t.surface for t in claim.terms if t.key in denied]
        return f"the source says the opposite about {quote(words)}: '{shorten(sentence.text)}'"
    asserted = sorted((claim.negated_keys & sentence.keys) - sentence.negated_keys)
    if asserted:
        words = [t.surface for t in claim.terms if t.key in asserted]
        quoted = shorten(sentence.text)
        return f"the claim denies {quote(words)}, which the source states: '{quoted}'"
    return None


def _questions(sentences: list[Analysed], limit: int) -> list[str]:
    return [_as_question(sentence.text) for sentence in salient_sentences(sentences, limit)]


def salient_sentences(
    sentences: list[Analysed], limit: int, lead_bias: float = _LEAD_BIAS
) -> list[Analysed]:
    """The ``limit`` sentences the questions are asked about, most salient first."""
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
        scored.append((centrality / (1 + lead_bias * index), index, sentence))
    scored.sort(key=lambda item: (-item[0], item[1]))
    return [sentence for _, _, sentence in scored[:limit]]


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
