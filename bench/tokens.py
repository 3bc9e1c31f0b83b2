"""Where a judged item's tokens go, as the loopback judge counts and sizes them.

    python bench/tokens.py            # the bundled sample, summarised by the lead-3 baseline

Each of the bundled sample's 26 articles, summarised by the lead-3 baseline (the main job's
agent), is scored with the default scorer (``max_questions`` 10, questions per item). Every
request is built as the OpenAI judge sends it (``request_body``: the messages and the step's
JSON schema) and answered as ``bench/loopback_judge.py`` answers it (its replies are sized as a
careful model's, reasons included), and counted as that server counts: a message's UTF-8
bytes over four, plus four, and the schema's. Per step, and per item over the three steps, it
prints the system prompt (and, of it, the paragraph on fenced text that every step repeats),
the user message (and, of it, the fence lines and labels around the texts), the schema, and the
reply. Deterministic: the same figures each run.
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loopback_judge import completion, reply_for, tokens  # bench/ is not a package

from summeval_runner import create_summarization_scorer
from summeval_runner._agents import LeadK
from summeval_runner._judges._protocol import JudgeReply, JudgeRequest, TokenUsage
from summeval_runner._scorers._prompts import UNTRUSTED

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample_articles.jsonl"
# A fence's lines and the label before it: what fencing adds around a text.
FENCE_LINE = re.compile(r"(?m)^(?:[A-Z][A-Z ]+:\n)?</?[a-z_]+-[0-9a-f]{16}>\n?")
PARTS = ("system", "of it: fenced-text rule", "user", "of it: fences, labels", "schema", "reply")


class CountingJudge:
    """Builds each request as the OpenAI judge does, answers as the loopback judge does."""

    name = "counting"

    def __init__(self) -> None:
        self._openai = create_summarization_scorer(
            {"provider": "openai", "name": "gpt-4o-mini", "api_key_env": None,
             "base_url": "http://127.0.0.1:9/v1"}
        ).judge  # fmt: skip
        self.counted: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        body: dict[str, Any] = dict(self._openai.request_body(request))
        content = json.dumps(reply_for(body))
        usage = completion(body, content)["usage"]
        system, user = (str(m["content"]) for m in body["messages"])
        schema = body["response_format"]["json_schema"]["schema"]
        step = request.step
        counts = self.counted[step]
        counts["calls"] += 1
        counts["system"] += tokens(system) + 4
        counts["of it: fenced-text rule"] += tokens(UNTRUSTED) if UNTRUSTED in system else 0
        counts["user"] += tokens(user) + 4
        counts["of it: fences, labels"] += sum(tokens(m[0]) for m in FENCE_LINE.finditer(user))
        counts["schema"] += tokens(json.dumps(schema, separators=(",", ":")))
        counts["reply"] += usage["completion_tokens"]
        assert usage["prompt_tokens"] == counts_of_request(system, user, schema)
        return JudgeReply(content=content, usage=TokenUsage(usage["prompt_tokens"], 0))


def counts_of_request(system: str, user: str, schema: Any) -> int:
    return tokens(system) + 4 + tokens(user) + 4 + tokens(json.dumps(schema, separators=(",", ":")))


def main() -> None:
    articles = [json.loads(line) for line in SAMPLE.read_text("utf-8").splitlines()]
    judge = CountingJudge()
    scorer = create_summarization_scorer(judge)
    lead = LeadK()
    for article in articles:
        result = scorer.run_sync(input=article["text"], output=lead(article["text"]))
        assert result.status == "scored", result.error
    items = len(articles)
    print(f"{items} items of {SAMPLE.name}, lead-3 summaries; tokens an item, by step and part")
    print(f"{'step':<12}" + "".join(f"{part:>26}" for part in PARTS) + f"{'total':>8}")
    total = 0.0
    by_part: dict[str, float] = defaultdict(float)
    for step, counts in judge.counted.items():
        whole = sum(counts[p] for p in ("system", "user", "schema", "reply")) / items
        total += whole
        for part in PARTS:
            by_part[part] += counts[part] / items
        cells = "".join(f"{counts[part] / items:>26.0f}" for part in PARTS)
        print(f"{step:<12}{cells}{whole:>8.0f}")
    cells = "".join(f"{by_part[part]:>26.0f}" for part in PARTS)
    print(f"{'an item':<12}{cells}{total:>8.0f}")


if __name__ == "__main__":
    main()
