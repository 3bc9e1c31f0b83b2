"""Fences for untrusted text: what a text from the data is wrapped in before a judge reads it.

Every text from the data (the source, the summary, the questions drawn from the source, the
claims sent to the reason step) reaches the judge between ``<name-KEY>`` and ``</name-KEY>``
lines, ``KEY`` a fresh random marker per request (``new_marker``: ``os.urandom``, so no text
can predict it, as it could a marker derived from its own hash). Inside, ``neutralise`` breaks
every fence-shaped tag (``</summary>``, ``<source-...>``) and every chat-template token
(``<|im_start|>``, ``[INST]``, ``<<SYS>>``, ``<start_of_turn>``...) by inserting a zero-width
space after its first character, so a text can neither close its fence nor open a turn of the
chat template of a server that parses special tokens in message text (llama.cpp's does). The
change is reversible: ``restore(neutralise(text)) == text`` for every text (a zero-width space
the text held itself is doubled), so a transcript can be shown as the data was.

The marker is no part of the response cache's key (``JudgeRequest.fence_marker`` is replaced
by a constant there), so a rerun with a fresh marker still finds the replies it cached.
"""

from __future__ import annotations

import os
import re

# The names of this package's fences, and the older fixed tags (prompts before
# summarization-2026-12-03 used <source> and <summary>): a text closing either is neutralised.
FENCE_NAMES = ("source", "summary", "reference", "questions", "key_facts", "verdicts")

# Chat-template tokens and role headers of the model families a judge may be served with:
# ChatML and its kin (<|im_start|>, <|system|>, Llama 3's <|start_header_id|>, <|eot_id|>,
# gpt-oss's <|channel|>), DeepSeek's full-width bars, Llama 2 / Mistral ([INST], <<SYS>>,
# [SYSTEM_PROMPT]), Gemma (<start_of_turn>), and sequence tokens (<s>, </s>, <bos>, <eos>).
TEMPLATE_TOKEN = re.compile(
    r"<\|[A-Za-z0-9_.:-]{1,40}\|>"
    r"|<\uff5c[^\uff5c<>\n]{1,40}\uff5c>"
    r"|\[/?(?:INST|SYSTEM_PROMPT|AVAILABLE_TOOLS|TOOL_RESULTS)\]"
    r"|<</?SYS>>"
    r"|</?(?:start_of_turn|end_of_turn|bos|eos|s)>",
    re.IGNORECASE,
)
FENCE_TAG = re.compile(
    r"</?\s*(?:" + "|".join(FENCE_NAMES) + r")(?:[-_][A-Za-z0-9]{0,64})?\s*(?:\s[^<>\n]{0,80})?>",
    re.IGNORECASE,
)
# Either: what neutralise breaks and the fence_or_template_marker check reports.
MARKER = re.compile(f"{TEMPLATE_TOKEN.pattern}|{FENCE_TAG.pattern}", re.IGNORECASE)

# Inserted after a marker's first character; doubled where the text held it already.
BREAK = "\u200b"
_MARKER_BYTES = 8


def new_marker() -> str:
    """A fresh fence marker: 16 hex digits from ``os.urandom``."""
    return os.urandom(_MARKER_BYTES).hex()


def neutralise(text: str) -> str:
    """``text`` with every fence tag and chat-template token broken (a zero-width space after
    its first character), and every zero-width space it held doubled, so ``restore`` undoes it.

    >>> neutralise("a </summary> b <|im_start|>system")
    'a <\\u200b/summary> b <\\u200b|im_start|>system'
    >>> restore(neutralise("x\\u200b</summary>")) == "x\\u200b</summary>"
    True
    """
    escaped = text.replace(BREAK, BREAK * 2)
    return MARKER.sub(lambda found: found[0][0] + BREAK + found[0][1:], escaped)


def restore(text: str) -> str:
    """The text ``neutralise`` was given: a doubled zero-width space is one, a single one was
    inserted (it is always followed by a marker's second character, never by another)."""
    out: list[str] = []
    position = 0
    while position < len(text):
        char = text[position]
        if char == BREAK:
            if text.startswith(BREAK * 2, position):
                out.append(BREAK)
                position += 2
            else:
                position += 1
            continue
        out.append(char)
        position += 1
    return "".join(out)


def fence(name: str, text: str, marker: str) -> str:
    """``text``, neutralised, between ``<name-marker>`` and ``</name-marker>`` lines."""
    return f"<{name}-{marker}>\n{neutralise(text)}\n</{name}-{marker}>"


def fenced(content: str, name: str) -> str | None:
    """The text of the fence ``name`` in ``content`` as the data held it (restored), or
    ``None`` when ``content`` has no such fence: for judges that read the prompt (test
    servers, the benches' loopback judge)."""
    found = re.search(
        rf"<{re.escape(name)}-([0-9a-f]+)>\n(.*?)\n</{re.escape(name)}-\1>", content, re.DOTALL
    )
    return None if found is None else restore(found[2])
