"""Score a batch with an OpenAI judge. Needs OPENAI_API_KEY; OPENAI_BASE_URL selects another
OpenAI-compatible server (vLLM, Ollama, a gateway)."""

import asyncio

from summeval_runner import create_summarization_scorer

items = [
    (
        "The museum reopened in May after a two-year renovation. Visitor numbers doubled.",
        "The museum reopened in May and visitor numbers doubled.",
    ),
    (
        "The river flooded three villages on Sunday. Nobody was hurt.",
        "Floods hit five villages; several people were injured.",
    ),
]


async def main() -> None:
    # One event loop, one HTTP client, evaluations in parallel; the client closes with the block.
    async with create_summarization_scorer("openai/gpt-4o-mini", {"max_questions": 5}) as scorer:
        results = await asyncio.gather(*(scorer.run(input=s, output=m) for s, m in items))
    for result in results:
        print(f"{result.status:<8} score={result.score} reason={result.reason}")


asyncio.run(main())
