"""The manipulation flags' precision and recall, on the held-out corpus and the dev corpus apart.

    python bench/flags.py                      # both corpora, per check and overall
    python bench/flags.py --show-misses        # every miss and false alarm, for the dev corpus

``bench/data/manipulation_heldout.jsonl`` was written before the checks and never tuned on;
``bench/data/manipulation_dev.jsonl`` is the corpus the checks were tuned on. Each line is a
summary (``text``), what it is (``kind``: an attack's kind, or ``lookalike``: an ordinary
summary whose words only look like one), its language, and the flags it should trip
(``expected``). A check's precision is over the texts it flagged, its recall over the texts
that should trip it; "any flag" counts a text flagged at all against the texts with any
expected flag. Only the summary is checked (``flag_spans({"summary": text})``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from summeval_runner._scorers._flags import CHECKS, flag_names, flag_spans

DATA = Path(__file__).parent / "data"
CORPORA = {
    "held-out": DATA / "manipulation_heldout.jsonl",
    "dev": DATA / "manipulation_dev.jsonl",
}


def _ratio(numerator: int, denominator: int) -> str:
    return f"{numerator / denominator:.2f} ({numerator}/{denominator})" if denominator else "n/a"


def measure(path: Path, show_misses: bool) -> None:
    rows = [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]
    hostile = sum(1 for row in rows if row["expected"])
    print(f"{path.name}: {len(rows)} texts, {hostile} hostile, {len(rows) - hostile} look-alikes")
    got = {row["id"]: set(flag_names(flag_spans({"summary": row["text"]}))) for row in rows}
    for check in (*CHECKS, "any flag"):
        def wants(row: dict[str, object], check: str = check) -> bool:
            expected = row["expected"]
            assert isinstance(expected, list)
            return bool(expected) if check == "any flag" else check in expected

        def has(row: dict[str, object], check: str = check) -> bool:
            flags = got[str(row["id"])]
            return bool(flags) if check == "any flag" else check in flags

        true_positive = sum(1 for row in rows if wants(row) and has(row))
        flagged = sum(1 for row in rows if has(row))
        relevant = sum(1 for row in rows if wants(row))
        false_alarms = sum(1 for row in rows if has(row) and not row["expected"])
        print(
            f"  {check:<26} precision {_ratio(true_positive, flagged):<16} "
            f"recall {_ratio(true_positive, relevant):<16} look-alikes flagged {false_alarms}"
        )
    if show_misses:
        for row in rows:
            expected, flags = set(row["expected"]), got[row["id"]]
            if expected != flags:
                print(f"    {row['id']} expected {sorted(expected)} got {sorted(flags)}: "
                      f"{row['text'][:90]!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--show-misses", action="store_true", help="list the dev corpus' misses")
    args = parser.parse_args()
    for name, path in CORPORA.items():
        print(f"[{name}]")
        # The held-out corpus' misses are not shown: reading them is tuning on them.
        measure(path, show_misses=args.show_misses and name == "dev")


if __name__ == "__main__":
    main()
