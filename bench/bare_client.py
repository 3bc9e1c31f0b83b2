"""The floor for a runner's CPU per judge request: a bare aiohttp client posting the same bodies.

``python bench/bare_client.py BODIES BASE_URL CONCURRENCY [--sdk]`` reads the request bodies that
``bench/loopback_judge.py --record`` saved (one JSON body a line, as the runner sent them), posts
each once to ``BASE_URL/chat/completions`` with CONCURRENCY in flight over keep-alive
connections, reads and parses every reply, and prints one JSON line: requests, replies that
were not 200, wall seconds and this process's CPU seconds from the first request to the last
reply (start-up and imports left out, as the runner's figure leaves out its own).

It does what any client must (HTTP, JSON out and in) and nothing a runner adds (schemas,
validation, the cache, the journal, limits, retries, the tables): the ratio of the runner's
CPU per request to this one's is the price of everything the runner does for a request.

With ``--sdk`` the same bodies go through the official ``openai`` SDK instead
(``AsyncOpenAI`` on its aiohttp transport, ``chat.completions.create(**body)``, no retries), as a
user of the SDK would send them. With ``--ours`` they go through this project's own client, the
one the OpenAI judge sends every request through (``OpenAIChat.complete``: the SDK's transport,
its errors translated, the reply read into tokens and content): the client's CPU a request, to
hold against the SDK's.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import aiohttp


async def post_all(bodies: list[bytes], base_url: str, concurrency: int) -> dict[str, float]:
    url = f"{base_url.rstrip('/')}/chat/completions"
    headers = {"content-type": "application/json", "authorization": "Bearer sk-bench"}
    queue: asyncio.Queue[bytes] = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)
    failed = 0

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal failed
        while not queue.empty():
            body = queue.get_nowait()
            async with session.post(url, data=body, headers=headers) as response:
                reply = json.loads(await response.read())
                if response.status != 200 or "choices" not in reply:
                    failed += 1

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        started, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
        wall_s, cpu_s = time.perf_counter() - started, time.process_time() - cpu
    return {"requests": len(bodies), "failed": failed, "wall_s": wall_s, "cpu_s": cpu_s}


async def create_all(bodies: list[bytes], base_url: str, concurrency: int) -> dict[str, float]:
    import openai  # only for --sdk: its import is not this client's floor

    requests = [json.loads(body) for body in bodies]
    client = openai.AsyncOpenAI(
        api_key="sk-bench",
        base_url=base_url,
        max_retries=0,
        http_client=openai.DefaultAioHttpClient(),
    )
    queue: asyncio.Queue[dict[str, object]] = asyncio.Queue()
    for request in requests:
        queue.put_nowait(request)
    failed = 0

    async def worker() -> None:
        nonlocal failed
        while not queue.empty():
            reply = await client.chat.completions.create(**queue.get_nowait())  # type: ignore[call-overload]
            if not reply.choices:
                failed += 1

    async with client:
        started, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall_s, cpu_s = time.perf_counter() - started, time.process_time() - cpu
    return {"requests": len(bodies), "failed": failed, "wall_s": wall_s, "cpu_s": cpu_s}


async def ours_all(bodies: list[bytes], base_url: str, concurrency: int) -> dict[str, float]:
    from summeval_runner._judges._openai import OpenAIChat

    requests = [json.loads(body) for body in bodies]
    chat = OpenAIChat(base_url=base_url, api_key_env=None, timeout_s=60.0, max_retries=0)
    queue: asyncio.Queue[dict[str, object]] = asyncio.Queue()
    for request in requests:
        queue.put_nowait(request)
    failed = 0

    async def worker() -> None:
        nonlocal failed
        while not queue.empty():
            reply = await chat.complete(queue.get_nowait())
            if not reply.content:
                failed += 1

    started, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall_s, cpu_s = time.perf_counter() - started, time.process_time() - cpu
    await chat.aclose()
    return {"requests": len(bodies), "failed": failed, "wall_s": wall_s, "cpu_s": cpu_s}


def main() -> None:
    bodies_path, base_url, concurrency = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    bodies = [line for line in bodies_path.read_bytes().splitlines() if line.strip()]
    send = post_all
    if "--sdk" in sys.argv[4:]:
        send = create_all
    elif "--ours" in sys.argv[4:]:
        send = ours_all
    print(json.dumps(asyncio.run(send(bodies, base_url, concurrency))))


if __name__ == "__main__":
    main()
