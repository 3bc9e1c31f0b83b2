"""Throughput against the physical limit: the real app, the OpenAI provider, a loopback judge.

Each scenario runs ``summeval-run`` (a subprocess: Hydra, the openai SDK, the cache, the tables,
as a user runs it) on N items (a 250-word source and a 60-word summary each, max_questions 10)
against ``bench/loopback_judge.py`` (another process) answering after a fixed latency L, with C
items and C requests in flight. It prints per scenario:

- wall: the run's own time (dataset read to tables written, from its manifest); process: the
  same plus Python's start-up and imports;
- ideal: 3 x L x ceil(N / C) (three sequential judge calls an item), or 3N / R under a rate
  limit of R requests a minute; efficiency = ideal / wall;
- judge requests, prompt and completion tokens per item (as the server counted them), 429s;
- TCP connections the server saw opened;
- the run's peak RSS, and the runner's CPU time per item and per judge request (the run's
  process CPU time from its manifest: everything but the judge's latency);
- the floor (``c20``, ``c100``, ``cpu``): ``bench/bare_client.py``, a bare aiohttp client,
  posts the very bodies the run sent, with the same C in flight, to a fresh judge of the same
  latency; its CPU per request, and the runner's as a multiple of it (the issue's target: 2x).

    python bench/throughput.py                  # every scenario but scale (about 4 minutes)
    python bench/throughput.py --only c20 cached
    python bench/throughput.py --only scale     # 100,000 items with the offline judge

Scenarios: ``c20`` (N=1000, C=20, L=200 ms), ``c100`` (N=1000, C=100, L=1 s), ``cpu`` (N=1000,
C=100, L=200 ms: the runner's CPU is the limit), ``cached`` (``c20``'s items again: every reply
from the cache), ``rate`` (a server that answers 429 beyond R=3000 requests a minute, the run
set to ``runner.judge_rpm=3000``), ``scale`` (100,000 items, offline judge: peak RSS and the
runner's overhead per item beyond the judge's own cost, measured in the same run of the bench).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "data" / "sample_articles.jsonl"
SOURCE_WORDS, SUMMARY_WORDS = 250, 60


def _words(text: str, count: int) -> str:
    words = text.split()
    while len(words) < count:
        words += words
    return " ".join(words[:count]).rstrip(".,;:") + "."


def write_items(path: Path, count: int) -> Path:
    """``count`` distinct items: a 250-word source and a 60-word summary of it (precomputed)."""
    articles = [json.loads(line)["text"] for line in SAMPLE.read_text("utf-8").splitlines()]
    with path.open("w", encoding="utf-8") as file:
        for index in range(count):
            first, second = articles[index % len(articles)], articles[(index + 7) % len(articles)]
            source = _words(f"Report {index}. {first} {second}", SOURCE_WORDS)
            summary = _words(f"Report {index}. {first}", SUMMARY_WORDS)
            file.write(json.dumps({"id": f"item-{index:06d}", "input": source, "summary": summary}))
            file.write("\n")
    return path


class LoopbackJudge:
    """``bench/loopback_judge.py`` in its own process."""

    def __init__(
        self,
        latency_s: float,
        rpm: float | None = None,
        tpm: float | None = None,
        record: Path | None = None,
    ) -> None:
        command = [sys.executable, str(ROOT / "bench" / "loopback_judge.py")]
        command += ["--until-stdin-closes"]  # it stops when this process closes the pipe
        command += ["--latency", str(latency_s)] + (["--rpm", str(rpm)] if rpm else [])
        command += ["--tpm", str(tpm)] if tpm else []
        command += ["--record", str(record)] if record else []
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.process.stdout is not None
        self.port = int(self.process.stdout.readline())
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def stats(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.base_url}/stats", timeout=10) as response:
            stats: dict[str, Any] = json.loads(response.read())
        return stats

    def stop(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=10)


@dataclass(frozen=True)
class Result:
    name: str
    items: int
    scored: int
    wall_s: float
    process_s: float
    ideal_s: float | None
    requests: int
    throttled: int
    prompt_tokens: int
    completion_tokens: int
    connections: int
    peak_rss_mb: float
    cpu_s: float
    served_s: float
    # The bare client's CPU seconds for the same bodies (None: not measured), its count, and the
    # same bodies' CPU seconds through the openai SDK alone.
    bare_cpu_s: float | None = None
    bare_requests: int = 0
    sdk_cpu_s: float | None = None
    # The same bodies' CPU seconds through this project's own client (OpenAIChat.complete).
    ours_cpu_s: float | None = None

    @property
    def efficiency(self) -> float | None:
        return self.ideal_s / self.wall_s if self.ideal_s else None


def run_app(run_dir: Path, dataset: Path, cache_dir: Path, *overrides: str) -> dict[str, Any]:
    """One ``summeval-run``; its manifest, with the process's wall time added."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env |= {"OPENAI_API_KEY": "sk-bench-not-a-real-key", "SUMMEVAL_CACHE_DIR": str(cache_dir)}
    started = time.perf_counter()
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "summeval_runner",
            f"hydra.run.dir={run_dir}",
            f"dataset.path={dataset}",
            "dataset.fields.output=summary",
            "dataset.fields.metadata=[]",
            "target=precomputed",
            "scorer.max_questions=10",
            "runner.progress=false",
            *overrides,
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=run_dir.parent,
        check=False,
    )
    process_s = time.perf_counter() - started
    if completed.returncode != 0:
        sys.exit(f"{run_dir.name}: the run failed ({completed.returncode}):\n{completed.stderr}")
    manifest: dict[str, Any] = json.loads((run_dir / "manifest.json").read_text("utf-8"))
    manifest["process_s"] = process_s
    return manifest


def judged_run(
    name: str,
    work: Path,
    dataset: Path,
    *,
    items: int,
    concurrency: int,
    latency_s: float,
    rpm: float | None = None,
    tpm: float | None = None,
    cached: bool = False,
    floor: bool = False,
) -> Result:
    """One run against a fresh loopback judge; ``cached``: a run that fills the cache first,
    then the measured rerun (same server, same cache), which should send nothing; ``floor``:
    the bare client then sends the bodies the run sent (``bare_floor``)."""
    bodies = work / f"{name}-bodies.jsonl" if floor else None
    server = LoopbackJudge(latency_s, rpm, tpm, record=bodies)
    try:
        overrides = [
            "model=openai",
            f"model.base_url={server.base_url}",
            f"runner.max_items_in_flight={concurrency}",
            f"runner.max_judge_requests_in_flight={concurrency}",
        ]
        if rpm:
            overrides.append(f"runner.judge_rpm={rpm}")
        if tpm:
            overrides.append(f"runner.judge_tpm={tpm}")
        if cached:
            run_app(
                work / f"{name}-fill", dataset, work / "cache", *overrides, "runner.cache=write"
            )
            before = server.stats()
            manifest = run_app(
                work / name, dataset, work / "cache", *overrides, "runner.cache=read"
            )
        else:
            before = dict.fromkeys(server.stats(), 0)
            manifest = run_app(work / name, dataset, work / "cache", *overrides, "runner.cache=off")
        after = server.stats()
        stats = {
            key: value - before[key]
            for key, value in after.items()
            if isinstance(value, int) and key != "max_in_flight"
        }
        # The server's own clock: from its first request to its last, start-up and the
        # tables' writing left out.
        span_s = (after["last_at"] or 0.0) - (after["first_at"] or 0.0)
    finally:
        server.stop()
    if rpm:
        ideal: float | None = 3 * items / rpm * 60
    elif tpm:
        ideal = (stats["prompt_tokens"] + stats["completion_tokens"]) / tpm * 60
    elif stats["requests"]:
        ideal = 3 * latency_s * math.ceil(items / concurrency)
    else:
        ideal = None
    bare = bare_floor(bodies, latency_s, concurrency) if bodies else None
    sdk = bare_floor(bodies, latency_s, concurrency, via="--sdk") if bodies else None
    ours = bare_floor(bodies, latency_s, concurrency, via="--ours") if bodies else None
    return Result(
        name=name,
        items=items,
        scored=manifest["counts"]["scored"],
        wall_s=manifest["duration_s"],
        process_s=manifest["process_s"],
        ideal_s=ideal,
        requests=stats["requests"],
        throttled=stats["throttled"],
        prompt_tokens=stats["prompt_tokens"],
        completion_tokens=stats["completion_tokens"],
        connections=stats["connections"],
        peak_rss_mb=manifest["resources"]["peak_rss_mb"],
        cpu_s=manifest["resources"]["cpu_s"],
        served_s=span_s,
        bare_cpu_s=bare["cpu_s"] if bare else None,
        bare_requests=int(bare["requests"]) if bare else 0,
        sdk_cpu_s=sdk["cpu_s"] if sdk else None,
        ours_cpu_s=ours["cpu_s"] if ours else None,
    )


def bare_floor(
    bodies: Path, latency_s: float, concurrency: int, *, via: str | None = None
) -> dict[str, float]:
    """``bench/bare_client.py`` posting ``bodies`` to a fresh judge of the same latency (through
    the openai SDK alone with ``via="--sdk"``, this project's client with ``"--ours"``)."""
    server = LoopbackJudge(latency_s)
    try:
        client = ROOT / "bench" / "bare_client.py"
        completed = subprocess.run(
            [sys.executable, str(client), str(bodies), server.base_url, str(concurrency)]
            + ([via] if via else []),
            capture_output=True,
            text=True,
            check=True,
        )
    finally:
        server.stop()
    bare: dict[str, float] = json.loads(completed.stdout)
    if bare["failed"]:
        sys.exit(f"the bare client got {bare['failed']:g} failed replies of {bare['requests']:g}")
    return bare


def print_judged(
    result: Result, concurrency: int, rpm: float | None, tpm: float | None = None
) -> None:
    n = result.items
    limit = f", R={rpm:g}/min" if rpm else f", T={tpm:g} tokens/min" if tpm else ""
    print(f"\n{result.name}: N={n}, C={concurrency}{limit}")
    print(f"  scored            {result.scored} of {n}")
    ideal = f"{result.ideal_s:.2f} s" if result.ideal_s else "n/a (no request sent)"
    print(f"  wall              {result.wall_s:.2f} s (process {result.process_s:.2f} s)")
    print(f"  ideal             {ideal}")
    if result.efficiency is not None:
        print(f"  efficiency        {result.efficiency:.3f}")
    print(f"  items/s           {n / result.wall_s:.0f}")
    print(f"  requests/item     {result.requests / n:.3f} ({result.requests} requests)")
    if rpm:
        sustained = (result.requests - 1) / result.served_s * 60
        overall = result.requests / result.wall_s * 60
        print(
            f"  sustained rate    {sustained:.0f}/min = {sustained / rpm:.1%} of R (first to last "
            f"request); {overall / rpm:.1%} over the whole run"
        )
        print(f"  429s              {result.throttled} = {result.throttled / result.requests:.2%}")
    if tpm:
        tokens = result.prompt_tokens + result.completion_tokens
        sustained = tokens / result.served_s * 60
        overall = tokens / result.wall_s * 60
        print(
            f"  sustained tokens  {sustained:,.0f}/min = {sustained / tpm:.1%} of T (first to last "
            f"request); {overall / tpm:.1%} over the whole run"
        )
        sent = result.requests
        print(f"  429s              {result.throttled} = {result.throttled / sent:.2%} of {sent}")
    if result.requests:
        prompt, completion = result.prompt_tokens / n, result.completion_tokens / n
        split = f"{prompt:.0f} prompt, {completion:.0f} completion"
        print(f"  tokens/item       {prompt + completion:.0f} ({split})")
    print(f"  TCP connections   {result.connections}")
    print(f"  peak RSS          {result.peak_rss_mb:.0f} MB")
    print(
        f"  runner CPU        {result.cpu_s:.2f} s = {result.cpu_s / n * 1000:.2f} ms/item", end=""
    )
    if result.requests:
        print(f", {result.cpu_s / result.requests * 1000:.2f} ms/request")
    else:
        print()
    if result.sdk_cpu_s is not None and result.requests and result.bare_requests:
        # The yardstick: the official SDK alone sending the very bodies the run sent, against
        # this project's client sending them (OpenAIChat.complete, what the judge sends every
        # request through). The bare aiohttp client is printed beside them, as the floor; the
        # whole run's figure (above) adds the scorer, the journal and the tables.
        sdk_ms = result.sdk_cpu_s / result.bare_requests * 1000
        bare_ms = (result.bare_cpu_s or 0.0) / result.bare_requests * 1000
        print(
            f"  openai SDK alone  {sdk_ms:.2f} ms/request ({result.bare_requests} of the run's "
            f"bodies, C={concurrency})"
        )
        if result.ours_cpu_s is not None:
            ours_ms = result.ours_cpu_s / result.bare_requests * 1000
            verdict = "at or below it" if ours_ms <= sdk_ms else "ABOVE it"
            print(
                f"  the judge client  {ours_ms:.2f} ms/request (the same bodies); client/SDK = "
                f"{ours_ms / sdk_ms:.2f}x: {verdict}"
            )
        runner_ms = result.cpu_s / result.requests * 1000
        print(
            f"  bare aiohttp      {bare_ms:.2f} ms/request, for reference (SDK/bare = "
            f"{sdk_ms / bare_ms:.2f}x; the whole run/bare = {runner_ms / bare_ms:.2f}x)"
        )


def offline_judge_cost(dataset: Path, sample: int) -> float:
    """Seconds of CPU the offline judge's three steps take per item, outside any runner."""
    script = f"""
import asyncio, json, time
from summeval_runner import OfflineJudge, create_summarization_scorer
rows = [json.loads(line) for _, line in zip(range({sample}), open({str(dataset)!r}))]
scorer = create_summarization_scorer(OfflineJudge(), {{"max_questions": 10}})
async def main():
    for row in rows:
        await scorer.run(input=row["input"], output=row["summary"])
started = time.process_time()
asyncio.run(main())
print((time.process_time() - started) / len(rows))
"""
    completed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    return float(completed.stdout)


def scale(work: Path, items: int) -> None:
    dataset = write_items(work / "scale.jsonl", items)
    judge_s = offline_judge_cost(dataset, sample=min(items, 5000))
    manifest = run_app(
        work / "scale", dataset, work / "cache", "model=offline", "runner.max_items_in_flight=16"
    )
    wall = manifest["duration_s"]
    cpu = manifest["resources"]["cpu_s"]
    overhead = wall / items - judge_s
    print(f"\nscale: N={items}, offline judge")
    print(f"  scored            {manifest['counts']['scored']} of {items}")
    print(f"  wall              {wall:.1f} s (process {manifest['process_s']:.1f} s)")
    print(f"  judge alone       {judge_s * 1000:.3f} ms/item of CPU (3 steps, no runner)")
    print(
        f"  run               {wall / items * 1000:.3f} ms/item wall, "
        f"{cpu / items * 1000:.3f} ms/item CPU"
    )
    print(f"  runner overhead   {overhead * 1000:.3f} ms/item (wall less the judge's CPU)")
    print(
        f"  runner CPU        {(cpu / items - judge_s) * 1000:.3f} ms/item (the run's CPU less "
        "the judge's: what a busy machine does not inflate)"
    )
    print(f"  peak RSS          {manifest['resources']['peak_rss_mb']:.0f} MB")


SCENARIOS = ("c20", "c100", "cpu", "cached", "rate", "tokens", "scale")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=SCENARIOS, default=None)
    parser.add_argument("--items", type=int, default=1000, help="N for the judged scenarios")
    parser.add_argument("--scale-items", type=int, default=100_000)
    parser.add_argument("--rpm", type=float, default=3000.0, help="R for the rate scenario")
    parser.add_argument(
        "--tpm", type=float, default=600_000.0, help="T for the tokens scenario (tokens a minute)"
    )
    args = parser.parse_args()
    chosen = args.only or [s for s in SCENARIOS if s != "scale"]
    with tempfile.TemporaryDirectory(prefix="summeval-throughput-") as folder:
        work = Path(folder)
        dataset = write_items(work / "items.jsonl", args.items)
        judged = {
            "c20": {"concurrency": 20, "latency_s": 0.2, "floor": True},
            "cached": {"concurrency": 20, "latency_s": 0.2, "cached": True},
            "c100": {"concurrency": 100, "latency_s": 1.0, "floor": True},
            "cpu": {"concurrency": 100, "latency_s": 0.2, "floor": True},
            "rate": {"concurrency": 50, "latency_s": 0.2, "rpm": args.rpm},
            "tokens": {"concurrency": 50, "latency_s": 0.2, "tpm": args.tpm},
        }
        for name, settings in judged.items():
            if name in chosen:
                result = judged_run(name, work, dataset, items=args.items, **settings)
                print_judged(
                    result, int(settings["concurrency"]), settings.get("rpm"), settings.get("tpm")
                )
        if "scale" in chosen:
            scale(work, args.scale_items)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"\nall child processes: {usage.ru_utime + usage.ru_stime:.1f} s CPU")


if __name__ == "__main__":
    main()
