"""What a panel of judges costs: its calls, tokens and cost against one judge's, in one run each.

Runs the real ``summeval-run`` (a subprocess: Hydra, the OpenAI provider with the official SDK, the
cache, the journal, the tables) on N items (``bench/throughput.py``'s: a 250-word source and a
60-word summary each, all distinct, ``max_questions`` 10), against the test suite's loopback server
(``tests/chat_server.py``, in this process) answering as ``bench/loopback_judge.py`` does (a careful
model's replies, tokens at four bytes a token), a fresh server for each run and no response cache
(``runner.cache=off``: every call is sent), every judge at the same price (``model.price`` input
0.40 / output 1.60 USD per million tokens: gpt-4.1-mini's):

- one judge: ``model=openai model.name=gpt-4.1-mini``;
- a panel of two: ``model=panel 'model.judges=[{name: openai/gpt-4.1-mini, ...},
  {name: openai/gpt-4.1-nano, ...}]'`` (two models on the one server);
- a panel of one model and the offline judge (``[openai/gpt-4.1-mini, offline]``).

For each it prints the judge calls of every judge (the manifest's ``judge.requests``; the offline
judge's are made in the process), the requests the server received (per model and step), the judge's
tokens and cost from the run's manifest, and the ratio of each to the one judge's; and the
panel's disagreement figures from its manifest. The panel's second judge draws no questions: its
preprocess call asks for claims only (the first judge's questions are shared), so a panel of two
costs less than twice one judge.

    python bench/panel.py                 # 200 items: about 30 s
    python bench/panel.py --items 1000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "bench"))

from loopback_judge import reply_for  # noqa: E402
from throughput import write_items  # noqa: E402

import tests.chat_server  # noqa: E402
from summeval_runner import PanelDisagreement  # noqa: E402
from tests.chat_server import ChatServer  # noqa: E402


def careful_reply(body: dict[str, Any], questions_follow_summary: bool = False) -> dict[str, Any]:
    return reply_for(body)


# The loopback server answers as a careful model would (each reply its own), not with its
# fixed test replies.
tests.chat_server.valid_content = careful_reply

PRICE = "{input: 0.4, output: 1.6}"


def command(run_dir: Path, dataset: Path, *model: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "summeval_runner",
        f"hydra.run.dir={run_dir}",
        f"dataset.path={dataset}",
        "dataset.fields.metadata=[]",
        "dataset.fields.output=summary",
        "target=precomputed",
        *model,
        # No response cache: two items' identical reason requests would be answered by it, and
        # the figures are of the calls each judge makes.
        "runner.cache=off",
        "runner.progress=false",
    ]


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    return env | {"OPENAI_API_KEY": "sk-bench-not-a-real-key"}


def run(run_dir: Path, dataset: Path, model: list[str] | None = None) -> dict[str, Any]:
    """One run against a fresh loopback server: its manifest, the server's requests by model
    and step, and the run's wall time."""
    server = ChatServer().start()
    try:
        judge = model or [
            "model=openai",
            "model.name=gpt-4.1-mini",
            f"model.base_url={server.base_url}",
            f"model.price={PRICE}",
        ]
        entry = f"base_url: '{server.base_url}', price: {PRICE}"
        judge = [part.replace("<server>", entry) for part in judge]
        started = time.perf_counter()
        completed = subprocess.run(
            command(run_dir, dataset, *judge),
            capture_output=True,
            text=True,
            env=environment(),
            check=False,
        )
        wall = time.perf_counter() - started
        if completed.returncode != 0:
            sys.exit(f"{run_dir.name}: exit {completed.returncode}\n{completed.stderr}")
        by_model = Counter(str(request.body.get("model")) for request in server.requests)
        steps = Counter((str(r.body.get("model")), r.step) for r in server.requests)
    finally:
        server.stop()
    manifest: dict[str, Any] = json.loads((run_dir / "manifest.json").read_text("utf-8"))
    return {"manifest": manifest, "by_model": by_model, "steps": steps, "wall": wall}


def line(label: str, found: dict[str, Any], n: int, base: dict[str, Any] | None) -> str:
    manifest = found["manifest"]
    requests = sum(found["by_model"].values())
    calls = manifest["judge"]["requests"]
    tokens = manifest["tokens"]["input"] + manifest["tokens"]["output"]
    cost = manifest["cost"]["judge"]
    text = (
        f"  {label:<18} {calls:>6,} judge calls ({calls / n:.2f}/item; {requests:,} to the "
        f"server), "
        f"{manifest['tokens']['input']:>9,} tokens in, {manifest['tokens']['output']:>8,} out, "
        f"judge ${cost:.4f}, {manifest['counts']['scored']} of {n} scored, "
        f"wall {found['wall']:.1f} s"
    )
    if base is not None:
        b = base["manifest"]
        b_calls = b["judge"]["requests"]
        b_tokens = b["tokens"]["input"] + b["tokens"]["output"]
        text += (
            f"\n  {'':<18} = {calls / b_calls:.2f} x the judge calls, "
            f"{tokens / b_tokens:.2f} x the tokens, {cost / b['cost']['judge']:.2f} x the cost "
            "of one judge"
        )
    for model, count in sorted(found["by_model"].items()):
        steps = ", ".join(
            f"{step} {c}" for (m, step), c in sorted(found["steps"].items()) if m == model
        )
        text += f"\n  {'':<18}   {model}: {count:,} requests ({steps})"
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=200)
    args = parser.parse_args()
    n = args.items
    two = [
        "model=panel",
        "model.judges=[{name: openai/gpt-4.1-mini, <server>},"
        "{name: openai/gpt-4.1-nano, <server>}]",
    ]
    with_offline = ["model=panel", "model.judges=[{name: openai/gpt-4.1-mini, <server>},offline]"]
    with tempfile.TemporaryDirectory(prefix="summeval-panel-") as folder:
        work = Path(folder)
        dataset = write_items(work / "items.jsonl", n)
        one = run(work / "one", dataset)
        panel = run(work / "panel", dataset, two)
        offline = run(work / "offline", dataset, with_offline)

    print(
        f"{n} items (250-word sources, 60-word summaries, max_questions 10), every judge at "
        "input 0.40 / output 1.60 USD per million tokens, runner.cache=off"
    )
    print(line("one judge", one, n, None))
    print(line("panel of two", panel, n, one))
    print(line("model + offline", offline, n, one))
    for label, found in (("panel of two", panel), ("model + offline", offline)):
        figures = PanelDisagreement.model_validate(found["manifest"]["judge_panel"])
        print(f"  {label}: {figures.describe()}")


if __name__ == "__main__":
    main()
