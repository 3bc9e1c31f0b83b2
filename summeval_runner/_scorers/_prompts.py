"""The summarization scorer's prompts: named constants, versioned as one.

Change any text here and bump ``PROMPT_VERSION``: the version is recorded with every result and
is part of every cache key, so cached verdicts from another prompt are never reused.

Each ``*_messages`` function takes only its step's payload type, so what a step can show the judge
is fixed by its signature: ``analyze_messages`` cannot include the source, because
``AnalyzeInput`` has none.
"""

from __future__ import annotations

import json

from summeval_runner._judges._protocol import (
    AnalyzeInput,
    PreprocessInput,
    PromptMessage,
    ReasonInput,
)

PROMPT_VERSION = "summarization-2026-11-30"

PREPROCESS_SYSTEM = """\
You check summaries against the text they condense. You do two independent tasks.

Task 1, claims. Split the SUMMARY into atomic claims: short statements that each assert one fact \
the summary makes, in the summary's own words. For each claim decide whether the SOURCE supports \
it: "supported" is true only if the source states it or it follows directly from the source. A \
claim with a number, name, date or negation that differs from the source is not supported. Give a \
one-sentence reason that names the words that decided it.

Task 2, questions. Without looking at the summary, write closed questions about the SOURCE, each \
answerable "yes" from the source alone, each about one important fact, most important first. \
Write at most the number of questions the user asks for; fewer if the source has fewer facts. \
Phrase each so a person can read it on its own, e.g. "Does the text say that ...?".

Reply with one JSON object and nothing else:
{"alignment": [{"claim": str, "supported": bool, "reason": str}], "questions": [str]}"""

ANALYZE_SYSTEM = """\
You check what a summary tells its reader. You are given a SUMMARY and numbered QUESTIONS. \
Answer each question using only the summary: "answered" is true only if the summary itself \
states the fact the question asks about. Do not use outside knowledge, and do not guess what the \
original text said. Give a one-sentence reason that names the words of the summary that decided \
it, or the fact it lacks. Answer every question, in the order given.

Reply with one JSON object and nothing else:
{"coverage": [{"question": str, "answered": bool, "reason": str}]}"""

REASON_SYSTEM = """\
You explain a summary's score to the person who wrote the summarizer. You are given the score, \
its two dimensions (alignment: share of the summary's claims the source supports; coverage: share \
of the source's key questions the summary answers) and the verdicts that lowered them. In one or \
two sentences, name the dimension that set the score (the lower one), give both dimension \
scores, and cite the unsupported claims or unanswered questions that matter most.

Reply with one JSON object and nothing else:
{"reason": str}"""

REASK_INSTRUCTION = (
    "Your previous reply could not be used. Reply again with only the JSON object described in the "
    "instructions, with every field present and of the right type. The problem was:"
)


def preprocess_messages(payload: PreprocessInput) -> tuple[PromptMessage, ...]:
    user = (
        f"SOURCE:\n<source>\n{payload.source}\n</source>\n\n"
        f"SUMMARY:\n<summary>\n{payload.summary}\n</summary>\n\n"
        f"Write at most {payload.max_questions} questions."
    )
    return (PromptMessage("system", PREPROCESS_SYSTEM), PromptMessage("user", user))


def analyze_messages(payload: AnalyzeInput) -> tuple[PromptMessage, ...]:
    numbered = "\n".join(f"{i}. {question}" for i, question in enumerate(payload.questions, 1))
    user = f"SUMMARY:\n<summary>\n{payload.summary}\n</summary>\n\nQUESTIONS:\n{numbered}"
    return (PromptMessage("system", ANALYZE_SYSTEM), PromptMessage("user", user))


def reason_messages(payload: ReasonInput) -> tuple[PromptMessage, ...]:
    facts = {
        "score": payload.score,
        "scale": payload.scale,
        "alignment": round(payload.alignment_score, 4),
        "coverage": round(payload.coverage_score, 4),
        "claims": payload.claim_count,
        "questions": payload.question_count,
        "unsupported_claims": [
            {"claim": v.claim, "reason": v.reason} for v in payload.unsupported_claims
        ],
        "unanswered_questions": list(payload.unanswered_questions),
    }
    user = json.dumps(facts, ensure_ascii=False, indent=1)
    return (PromptMessage("system", REASON_SYSTEM), PromptMessage("user", user))


def reask_messages(
    previous: tuple[PromptMessage, ...], raw_reply: str, problem: str
) -> tuple[PromptMessage, ...]:
    """The previous prompt, the unusable reply, and what was wrong with it."""
    return (
        *previous,
        PromptMessage("assistant", raw_reply),
        PromptMessage("user", f"{REASK_INSTRUCTION} {problem}"),
    )
