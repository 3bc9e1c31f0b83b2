"""What a finished run prints: its counts, where its results are, and its aggregates."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

from summeval_runner._rundir._manifest import JudgeNoise, JudgeTokenTotals, Manifest
from summeval_runner._runner._estimate import RunEstimate
from summeval_runner._scorers._outcome import RunCounts
from summeval_runner._secrets import scrub

# The distinct errors a run's summary lists, the most frequent first; a message is cut at this.
_ERRORS_SHOWN = 5
_MESSAGE_CHARS = 200


def counts_line(manifest: Manifest) -> str:
    """The run's items by how they ended. Unfinished items and hook errors are shown even when
    0: a reader of a nightly log should not have to infer that nothing was lost."""
    counts = manifest.counts or RunCounts()
    line = (
        f"{counts.total} items: {counts.scored} scored, "
        f"{counts.blank_summaries} blank summaries (scored 0), "
        f"{counts.unscorable} unscorable{_unscorable_named(manifest)}, "
        f"{counts.errors} errors; {manifest.unfinished or 0} unfinished; "
        f"{manifest.hook_errors} hook errors"
    )
    if manifest.verdicts_missing:
        # Shown when some are: a judge that left verdicts out lowered those items' coverage.
        line += (
            f"; {manifest.verdicts_missing} with verdicts missing after re-asks (counted "
            "unanswered; no claim: alignment 0)"
        )
    return line


def _unscorable_named(manifest: Manifest) -> str:
    """`` (blank source: a, b and 3 more)``: the data's rows to fix, as the manifest names them."""
    named = manifest.unscorable_items
    total = manifest.counts.unscorable if manifest.counts else len(named)
    if not total:
        return ""
    shown = ", ".join(named[:3])
    more = total - min(len(named), 3)
    return f" (blank source: {shown}{f' and {more} more' if more else ''})"


def _dollars(value: float | None) -> str:
    return "unknown" if value is None else f"${value:,.4f}"


def cost_line(manifest: Manifest) -> str:
    """What the run's calls cost and the tokens they took: the judge's and the agent's."""
    cost = manifest.cost
    assert cost is not None
    tokens = manifest.tokens or JudgeTokenTotals()
    line = (
        f"cost: {_dollars(cost.total)} (judge {_dollars(cost.judge)}, agent "
        f"{_dollars(cost.target)}); judge tokens {tokens.input:,} in, {tokens.output:,} out"
    )
    if tokens.reasoning:
        line += f" ({tokens.reasoning:,} of them reasoning)"
    target = manifest.target_tokens
    if target is not None and (target.input or target.output):
        line += f"; agent tokens {target.input:,} in, {target.output:,} out"
    unknown = [
        setting
        for setting, part in (("model.price", cost.judge), ("target.price", cost.target))
        if part is None
    ]
    if unknown:
        line += f" (a price is not known: set {' and '.join(unknown)})"
    if cost.target_unreported:
        calls = cost.target_unreported
        line += (
            f"; the agent's {calls:,} call{'s' if calls != 1 else ''} counted $0: it reported "
            "no usage and has no price"
        )
    return line


def format_estimate(estimate: RunEstimate) -> str:
    """A run's estimate, as ``runner.estimate=true`` prints it."""
    trials = f" x {estimate.trials} trials" if estimate.trials > 1 else ""
    mode = " through the Batch API" if estimate.batch else ""
    lines = [
        f"estimate for {estimate.items} items{trials}, judged by {estimate.judge}{mode} "
        "(no judge call was made, no agent called):",
        f"  judge requests  {estimate.requests:,} to send, {estimate.cached:,} answered by the "
        "cache",
    ]
    for kind in ("preprocess", "claims", "analyze", "reason"):
        step = estimate.steps.get(kind)
        if step is not None and (step.requests or step.cached):
            lines.append(
                f"    {kind:<13} {step.requests:,} to send ({step.input_tokens:,} tokens in, "
                f"{step.output_tokens:,} out), {step.cached:,} cached"
            )
    lines.append(f"  judge tokens    {estimate.input_tokens:,} in, {estimate.output_tokens:,} out")
    if len(estimate.judges) > 1:
        # A panel: each judge's part.
        for name, part in estimate.judges.items():
            lines.append(
                f"    {name}: {part.requests:,} to send ({part.input_tokens:,} tokens in, "
                f"{part.output_tokens:,} out), {part.cached:,} cached, {_dollars(part.cost)}"
            )
    price = estimate.price
    at = (
        f" at ${price.input:g} in, ${price.output:g} out per million tokens"
        + (f", the Batch API's {price.batch:g} of that" if estimate.batch else "")
        + (f" ({estimate.price_source})" if estimate.price_source else "")
        if price is not None
        else " (each judge at its own price)"
        if len(estimate.judges) > 1 and estimate.judge_cost is not None
        else " (the judge's price is not known: set model.price)"
    )
    lines.append(f"  judge cost      {_dollars(estimate.judge_cost)}{at}")
    if estimate.target_calls or estimate.target_cached:
        lines.append(
            f"  agent           {estimate.target_calls:,} calls, {estimate.target_input_tokens:,} "
            f"tokens in, {estimate.target_output_tokens:,} out, {_dollars(estimate.target_cost)}"
            f"; {estimate.target_cached:,} answered by the cache"
        )
    lines.append(f"  total cost      {_dollars(estimate.total_cost)}")
    lines += [f"  assumed: {assumption}" for assumption in estimate.assumptions]
    return "\n".join(lines)


def error_lines(run_dir: Path, manifest: Manifest) -> list[str]:
    """The run's distinct errors (type, step and message, as ``items.parquet`` holds them),
    the most frequent first, each with how many items had it; secrets scrubbed."""
    items = manifest.tables.get("items")
    if items is None or not (run_dir / items).is_file():
        return []
    columns = ["item_id", "error_type", "error_step", "error_message"]
    found: Counter[tuple[str, str, str]] = Counter()
    seen: set[tuple[str, tuple[str, str, str]]] = set()
    # The errors' rows only, a batch of rows at a time: a row a Python dict for each of a
    # million items was most of a resumed run's peak memory, and the four columns read whole
    # (the filter's way) added 11 MB to a 200,000-item merge's peak.
    with pq.ParquetFile(run_dir / items) as file:
        batches = file.iter_batches(columns=columns)
        errored = (batch.filter(pc.is_valid(batch.column("error_type"))) for batch in batches)
        for row in (row for batch in errored for row in batch.to_pylist()):
            message = " ".join(str(row["error_message"] or "").split())
            if len(message) > _MESSAGE_CHARS:
                message = message[: _MESSAGE_CHARS - 3] + "..."
            error = (row["error_type"], row["error_step"] or "?", scrub(message))
            # An item counts once per error, whatever its scorers and trials.
            if (row["item_id"], error) not in seen:
                seen.add((row["item_id"], error))
                found[error] += 1
    if not found:
        return []
    # Counter.most_common keeps first-seen order among equal counts: dataset order.
    ranked = found.most_common()
    lines = ["errors (items; error_type in error_step: error_message, in items.parquet):"]
    width = len(str(ranked[0][1]))
    lines += [
        f"  {count:>{width}}  {kind} in {step}: {message}"
        for (kind, step, message), count in ranked[:_ERRORS_SHOWN]
    ]
    if len(ranked) > _ERRORS_SHOWN:
        more = len(ranked) - _ERRORS_SHOWN
        lines.append(f"  ... and {more} more distinct error{'s' if more > 1 else ''}")
    return lines


def flag_lines(run_dir: Path, manifest: Manifest) -> list[str]:
    """How many items a manipulation check tripped on, and which checks, when any did (a run
    with none says so in its manifest's ``counts.flagged``: 0)."""
    counts = manifest.counts
    items = manifest.tables.get("items")
    if counts is None or not counts.flagged or items is None:
        return []
    table = pq.read_table(run_dir / items, columns=["item_id", "flags"])
    by_check: Counter[str] = Counter()
    seen: set[tuple[str, str]] = set()
    for row in table.to_pylist():
        for check in row["flags"] or ():
            # An item counts once per check, whatever its scorers and trials.
            if (row["item_id"], check) not in seen:
                seen.add((row["item_id"], check))
                by_check[check] += 1
    checks = ", ".join(f"{check} {count}" for check, count in by_check.most_common())
    return [
        f"flagged: {counts.flagged} of {counts.total} items tripped a manipulation check "
        f"({checks}; the flags and flag_spans columns of items.parquet; not in the score)"
    ]


def print_summary(run_dir: Path, manifest: Manifest) -> None:
    """The counts (unfinished items and hook errors included), the results directory, a table
    of the aggregates and the most frequent errors, on stdout; why the run stopped, if it did
    not complete, on stderr."""
    if manifest.stopped_because:
        print(f"summeval-run: stopped: {manifest.stopped_because}", file=sys.stderr)
    counts = manifest.counts
    # A merge's duration is its shards' summed work, not a wall time: not shown.
    timed = manifest.duration_s is not None and manifest.merged_from is None
    took = f", in {manifest.duration_s:.1f} s" if timed else ""
    if counts is not None:
        print(counts_line(manifest) + took)
    for line in flag_lines(run_dir, manifest):
        print(line)
    if manifest.cost is not None:
        print(cost_line(manifest))
    print(f"results: {run_dir}")
    aggregates = manifest.tables.get("aggregates")
    if aggregates is not None:
        _print_aggregates(run_dir / aggregates, manifest)
    for line in error_lines(run_dir, manifest):
        print(line)


def _print_aggregates(aggregates: Path, manifest: Manifest) -> None:
    rows = pq.read_table(aggregates).to_pylist()
    if not rows:
        return
    print(f"{'scorer':<22} {'metric':<10} {'n':>5} {'mean':>7}  {'95% CI':<17}")
    for row in rows:
        mean = f"{row['mean']:.3f}" if row["mean"] is not None else "n/a"
        ci = (
            f"[{row['ci95_low']:.3f}, {row['ci95_high']:.3f}]"
            if row["ci95_low"] is not None
            else ""
        )
        print(f"{row['scorer_id']:<22} {row['metric']:<10} {row['n']:>5} {mean:>7}  {ci:<17}")
    noise = manifest.judge_noise
    if noise is not None:
        print(judge_noise_line(noise))
    if manifest.judge_panel is not None:
        print(manifest.judge_panel.describe())


def judge_noise_line(noise: JudgeNoise) -> str:
    """How much the judge disagreed with itself over the trials of each item."""
    std = "n/a" if noise.score_std_mean is None else f"{noise.score_std_mean:.3f}"
    top = "" if noise.score_std_max is None else f" (at most {noise.score_std_max:.3f})"

    def share(changed: int, compared: int) -> str:
        return f"{changed} of {compared}" + (f" ({changed / compared:.1%})" if compared else "")

    return (
        f"judge noise over {noise.trials} trials: score std {std} per item{top} over "
        f"{noise.items} items; verdicts that changed between trials: claims "
        f"{share(noise.claims_changed, noise.claims_compared)}, questions "
        f"{share(noise.questions_changed, noise.questions_compared)}"
    )
