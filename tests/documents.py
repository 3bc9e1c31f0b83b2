"""Datasets of any size for tests and benches, made from the bundled sample documents."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The sample that ships inside the package (summeval-run's default dataset).
SAMPLE = ROOT / "data" / "sample_articles.jsonl"


def write_dataset(path: Path, count: int) -> Path:
    """``count`` distinct documents (JSONL, fields ``id`` and ``text``) cycling the sample."""
    sample = [json.loads(line) for line in SAMPLE.read_text("utf-8").splitlines()]
    with path.open("w", encoding="utf-8") as file:
        for index in range(count):
            doc = sample[index % len(sample)]
            text = f"{doc['text']} This is copy {index} of the article."
            file.write(json.dumps({"id": f"doc-{index:05d}", "text": text}) + "\n")
    return path
