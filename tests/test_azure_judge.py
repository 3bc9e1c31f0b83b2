"""The Azure OpenAI provider, driven by the SDK's ``AsyncAzureOpenAI`` against the loopback
server playing an Azure OpenAI resource: its deployment path, its ``api-version`` and its
``api-key`` header."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from summeval_runner import AzureJudge, AzureJudgeConfig, ConfigError, create_summarization_scorer
from summeval_runner._judges._prices import price_of
from tests.app import openai_run, run_app, table
from tests.chat_server import ChatServer
from tests.documents import write_dataset
from tests.test_secrets import assert_nowhere

SOURCE = "The Halvorsen bridge opened on Monday after six years of work. It cost 40 million."
SUMMARY = "A bridge opened on Monday."
AZURE_KEY = "azure-test-SECRET-4f0c2b9e77"
API_VERSION = "2024-10-21"


@pytest.fixture
def azure_env(no_openai_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AZURE_OPENAI_API_KEY", "AZURE_OPENAI_ENDPOINT", "OPENAI_API_VERSION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", AZURE_KEY)


def azure_run(server: ChatServer, dataset: Path, *overrides: str) -> tuple[str, ...]:
    # openai_run's model=openai and base_url, replaced by Azure's.
    kept = [o for o in openai_run(server.base_url, dataset) if not o.startswith("model")]
    return (
        "model=azure",
        "model.name=judge-deployment",
        f"model.base_url={server.azure_endpoint}",
        f"model.api_version={API_VERSION}",
        *kept,
        *overrides,
    )


@pytest.mark.usefixtures("azure_env")
def test_a_twenty_item_run_is_scored_through_the_deployment_path_and_no_file_holds_the_key(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    chat_server.azure_deployments = {"judge-deployment"}
    dataset = write_dataset(tmp_path / "docs.jsonl", 20)

    done = run_app(
        tmp_path / "run",
        *azure_run(chat_server, dataset),
        env={"AZURE_OPENAI_API_KEY": AZURE_KEY},
    )

    assert done.returncode == 0, done.stderr
    items = table(tmp_path / "run", "items")
    assert len(items) == 20
    assert (items["status"] == "scored").all()
    assert set(items["judge"]) == {"azure/judge-deployment"}
    assert chat_server.requests
    for request in chat_server.requests:
        assert request.path == (
            f"/openai/deployments/judge-deployment/chat/completions?api-version={API_VERSION}"
        )
        # Azure's key header; no bearer token.
        assert request.headers["api-key"] == AZURE_KEY
        assert "authorization" not in request.headers
        assert request.body["response_format"]["type"] == "json_schema"
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["judge"]["name"] == "azure/judge-deployment"
    assert manifest["cost"]["judge"] is None  # a deployment name the price table does not know
    assert_nowhere([AZURE_KEY], tmp_path / "run", done.stdout, done.stderr)


@pytest.mark.usefixtures("azure_env")
def test_an_unknown_deployment_is_azures_404_an_item_error_with_its_words(
    chat_server: ChatServer,
) -> None:
    chat_server.azure_deployments = {"another-deployment"}
    judge = AzureJudge(
        AzureJudgeConfig(
            name="judge-deployment",
            base_url=chat_server.azure_endpoint,
            api_version=API_VERSION,
            max_retries=0,
        )
    )

    result = create_summarization_scorer(judge).run_sync(input=SOURCE, output=SUMMARY)

    assert result.status == "error"
    assert result.error is not None
    assert "HTTP 404" in result.error.message
    assert "deployment for this resource does not exist" in result.error.message
    assert chat_server.requests == []  # refused before it reached a deployment


@pytest.mark.usefixtures("azure_env")
def test_a_reasoning_deployment_learns_its_refusals_and_is_priced_by_the_model_it_serves(
    chat_server: ChatServer,
) -> None:
    chat_server.azure_deployments = {"reasoner"}
    chat_server.reasoning_model = True
    judge = AzureJudge(
        AzureJudgeConfig(
            name="reasoner",
            base_url=chat_server.azure_endpoint,
            api_version=API_VERSION,
            deployed_model="gpt-5-mini",
            max_output_tokens=400,
        )
    )

    result = create_summarization_scorer(judge).run_sync(input=SOURCE, output=SUMMARY)

    assert result.status == "scored"
    assert chat_server.counts["refused temperature"] == 1
    assert chat_server.counts["refused max_tokens"] == 1
    assert chat_server.requests[-1].body["max_completion_tokens"] == 400
    endpoint = chat_server.azure_endpoint
    known = price_of("gpt-5-mini", provider="azure", base_url=endpoint, given=None)
    assert known is not None
    assert judge.price == known.price
    assert result.usage.cost is not None
    assert result.usage.cost > 0
    identity = judge.cache_identity()
    assert (identity["provider"], identity["api_version"]) == ("azure", API_VERSION)


@pytest.mark.usefixtures("azure_env")
def test_what_an_azure_judge_lacks_is_refused_before_any_call(
    tmp_path: Path, chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConfigError, match="api_version"):
        create_summarization_scorer(
            {"provider": "azure", "name": "d", "base_url": chat_server.azure_endpoint}
        )
    with pytest.raises(ConfigError, match="AZURE_OPENAI_ENDPOINT"):
        create_summarization_scorer({"provider": "azure", "name": "d", "api_version": "v"})
    with pytest.raises(ConfigError, match="deployment"):
        create_summarization_scorer({"provider": "azure", "api_version": "v"})
    with pytest.raises(ConfigError, match="api_key_env") as raised:
        create_summarization_scorer({"provider": "azure", "name": "d", "api_key": "secret-x"})
    assert "secret-x" not in str(raised.value)
    # The SDK's own variables are honoured, as the SDK does.
    monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", chat_server.azure_endpoint)
    monkeypatch.setenv("OPENAI_API_VERSION", API_VERSION)
    chat_server.azure_deployments = {"d"}
    scorer = create_summarization_scorer("azure/d")
    assert scorer.run_sync(input=SOURCE, output=SUMMARY).status == "scored"
    monkeypatch.delenv("AZURE_OPENAI_ENDPOINT")
    monkeypatch.delenv("OPENAI_API_VERSION")

    dataset = write_dataset(tmp_path / "docs.jsonl", 1)
    sent = len(chat_server.requests)
    missing = run_app(
        tmp_path / "nokey", *azure_run(chat_server, dataset), env={"AZURE_OPENAI_API_KEY": ""}
    )
    batch = run_app(
        tmp_path / "batch",
        *azure_run(chat_server, dataset, "runner.mode=batch"),
        env={"AZURE_OPENAI_API_KEY": AZURE_KEY},
    )
    assert missing.returncode == 2
    assert "AZURE_OPENAI_API_KEY" in missing.stderr
    assert batch.returncode == 2
    assert "has none" in batch.stderr
    assert len(chat_server.requests) == sent
