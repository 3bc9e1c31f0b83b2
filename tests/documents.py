"""Datasets of any size for tests and benches, made from the bundled sample documents."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The sample that ships inside the package (summeval-run's default dataset).
SAMPLE = ROOT / "data" / "sample_articles.jsonl"


def write_dataset(path: Path, count: int) -> Path:
    """``count`` distinct documents (JSONL, the seed's fields ``id`` and ``input``, which a
    ``dataset.path`` of one's own reads by default) cycling the sample."""
    sample = [json.loads(line) for line in SAMPLE.read_text("utf-8").splitlines()]
    with path.open("w", encoding="utf-8") as file:
        for index in range(count):
            doc = sample[index % len(sample)]
            text = f"{doc['text']} This is copy {index} of the article."
            file.write(json.dumps({"id": f"doc-{index:05d}", "input": text}) + "\n")
    return path


def copy_sample(path: Path) -> Path:
    """The bundled sample at ``path`` in the seed's field names (``id``, ``input``; ``title``
    and ``domain`` as columns no run carries unless told), as a dataset of one's own is read."""
    with path.open("w", encoding="utf-8") as file:
        for line in SAMPLE.read_text("utf-8").splitlines():
            row = json.loads(line)
            row["input"] = row.pop("text")
            file.write(json.dumps(row) + "\n")
    return path
