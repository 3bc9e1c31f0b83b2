"""No secret on disk or screen, however it arrives.

The chat server here echoes each request's ``Authorization`` header and URL (its query too)
into its error bodies and scripted replies, as careless servers and proxies do; the keys sit in
variables with names no pattern would call secret; and every file a run leaves (the journal,
the Parquet tables read as bytes and decoded, the manifest, ``.hydra/``, the log, a sweep's
report), every file name and everything printed is searched for each secret.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import sys
import urllib.error
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from summeval_runner import ItemResult, run_evals
from summeval_runner._cli import _app
from summeval_runner._cli._bundled import CONFIG_NAME
from summeval_runner._scorers._summarization import create_summarization_scorer
from summeval_runner._secrets import (
    redact_url,
    redact_urls,
    register_secret,
    register_url_secrets,
    scrub,
)
from tests.app import (
    SAMPLE,
    run_app,
    run_command,
    run_process,
    run_sweep,
    summeval_compare,
    table,
)
from tests.chat_server import MALFORMED, ChatServer, Fault, Reply, valid_content


def _secret(kind: str) -> str:
    return f"{kind}-{secrets.token_hex(12)}"


def _written_text(root: Path) -> Iterable[tuple[Path, str]]:
    """Every file under ``root`` as text: its name, its bytes, and a table's values decoded
    (Parquet compresses its pages, so a value can hide from a search of the bytes)."""
    for path in sorted(root.rglob("*")):
        yield path, str(path.relative_to(root))
        if not path.is_file():
            continue
        yield path, path.read_bytes().decode("utf-8", errors="replace")
        if path.suffix == ".parquet":
            yield path, pq.read_table(path).to_pandas().to_csv()


def assert_nowhere(values: Iterable[str], root: Path, *printed: str) -> None:
    leaks = [
        (value, str(where))
        for where, text in [*_written_text(root), *((Path("<output>"), p) for p in printed)]
        for value in values
        if value in text
    ]
    assert not leaks, leaks


@pytest.fixture
def echoing_server(chat_server: ChatServer) -> ChatServer:
    chat_server.echo_credentials = True
    return chat_server


def _echoes_for_four_items(server: ChatServer) -> None:
    """One item at a time: the agent refused (HTTP 400), then the judge refused, then the judge
    malformed on every ask (its raw reply is kept), then a valid reply whose reason quotes the
    credentials (it is scored, and cached): each echoes the request's credentials."""
    preprocess = valid_content({"response_format": {"json_schema": {"name": "preprocess"}}})
    preprocess["alignment"][0]["reason"] = "{echo}"
    server.script(
        Fault(400, "agent refused"),
        Reply("A summary."),
        Fault(400, "judge refused"),
        Reply("A summary."),
        *[Reply(MALFORMED)] * 3,
        Reply("A summary."),
        Reply(json.dumps(preprocess)),
    )


def test_keys_and_base_url_credentials_never_reach_a_file_or_the_output(
    echoing_server: ChatServer, tmp_path: Path
) -> None:
    judge_key, agent_key = _secret("judge-cred"), _secret("agent-cred")
    judge_query, agent_query = _secret("judge-query"), _secret("agent-query")
    _echoes_for_four_items(echoing_server)
    run_dir = tmp_path / "run"

    completed = run_process(
        [
            sys.executable,
            "-m",
            "summeval_runner",
            f"hydra.run.dir={run_dir}",
            "model=openai",
            f"model.base_url='{echoing_server.base_url}?key={judge_query}'",
            # Names that no "KEY", "TOKEN" or "SECRET" pattern would flag.
            "model.api_key_env=MY_JUDGE_CRED",
            "target=llm_summarizer",
            # Double quotes, as a shell user writes them: the run's label holds them, and its
            # manifest escapes them as \" right where the redacted value ends.
            f'target.base_url="{echoing_server.base_url}?token={agent_query}"',
            "target.api_key_env=MY_AGENT_CRED",
            "dataset.limit=5",
            "runner.max_items_in_flight=1",
            f"runner.cache_path={tmp_path / 'cache.sqlite'}",
            "runner.progress=false",
            # The HTTP client's log names every request's URL, its query included.
            "hydra.job_logging.loggers.httpx2.level=INFO",
        ],
        cwd=tmp_path,
        env={"MY_JUDGE_CRED": judge_key, "MY_AGENT_CRED": agent_key},
    )

    assert completed.returncode == 1, completed.stderr
    manifest = json.loads((run_dir / "manifest.json").read_text("utf-8"))
    assert f'target.base_url="{echoing_server.base_url}?token=***"' in manifest["overrides"]
    items = table(run_dir, "items")
    assert list(items["status"]) == ["error", "error", "error", "scored", "scored"]
    # The server did echo the credentials: they were there to leak, and were scrubbed.
    assert "Bearer *** at /v1/?token=***" in items["error_message"][0]
    assert "Bearer *** at /v1/?key=***" in items["error_message"][1]
    assert "Bearer ***" in items["error_raw_reply"][2]
    alignment = table(run_dir, "alignment")
    assert "Bearer *** at /v1/?key=***" in "".join(alignment["reason"])
    assert (tmp_path / "cache.sqlite").is_file()
    assert "/v1/?key=*** " in (run_dir / "summeval-run.log").read_text()
    assert {"config.yaml", "hydra.yaml", "overrides.yaml"} <= {
        p.name for p in (run_dir / ".hydra").iterdir()
    }
    # The run directory and the judge cache beside it.
    assert_nowhere(
        [judge_key, agent_key, judge_query, agent_query],
        tmp_path,
        completed.stdout,
        completed.stderr,
    )


def test_an_internal_error_is_told_without_the_secrets_of_the_command_line(
    tmp_path: Path,
) -> None:
    # A bug of ours: left to Hydra, it prints the job's overrides as typed, token included.
    token = _secret("crash-token")

    def crash(config: Any, job: Any) -> Any:
        raise RuntimeError(f"cannot plan for {config.target.base_url}")

    run_dir = tmp_path / "run"
    completed = run_command(
        lambda argv: _app.run_app(
            argv, program="summeval-run", config_name=CONFIG_NAME, prepare=crash
        ),
        [
            f"hydra.run.dir={run_dir}",
            "target=llm_summarizer",
            f'target.base_url="http://127.0.0.1:9/v1?token={token}"',
        ],
        cwd=tmp_path,
    )

    assert completed.returncode == 1
    printed = completed.stdout + completed.stderr
    assert "summeval-run: internal error" in printed
    assert "RuntimeError: cannot plan for http://127.0.0.1:9/v1?token=***" in printed
    log = (run_dir / "summeval-run.log").read_text("utf-8")
    assert "RuntimeError: cannot plan for http://127.0.0.1:9/v1?token=***" in log
    assert_nowhere([token], tmp_path, printed)


def test_a_password_in_base_url_is_refused_and_shown_redacted(
    echoing_server: ChatServer, tmp_path: Path
) -> None:
    password = "pa55word-xyz"
    port = echoing_server.base_url.split(":")[2].split("/")[0]
    run_dir = tmp_path / "run"

    completed = run_app(
        run_dir,
        "model=openai",
        f"model.base_url=http://user:{password}@127.0.0.1:{port}/v1",
        "model.api_key_env=MY_JUDGE_CRED",
        env={"MY_JUDGE_CRED": _secret("judge-cred")},
    )

    # The SDK's HTTP client refuses every request to such a URL: refused before any call.
    assert completed.returncode == 2, completed.stderr
    assert f"http://***@127.0.0.1:{port}/v1 carries a user name or password" in completed.stderr
    assert echoing_server.arrivals == 0
    assert_nowhere([password, "user:"], tmp_path, completed.stdout, completed.stderr)


def test_a_sweep_its_directories_and_its_report_hold_no_credential(
    echoing_server: ChatServer, tmp_path: Path
) -> None:
    judge_key, query = _secret("judge-cred"), _secret("judge-query")
    echoing_server.script(Fault(400, "judge refused"))
    sweep_dir = tmp_path / "sweep"

    completed = run_sweep(
        sweep_dir,
        "model=openai",
        f"model.base_url='{echoing_server.base_url}?key={query}'",
        "model.api_key_env=MY_JUDGE_CRED",
        "dataset.limit=2",
        "runner.max_items_in_flight=1",
        "runner.progress=false",
        "scorer.scale=1,5",
        env={"MY_JUDGE_CRED": judge_key},
    )

    assert (sweep_dir / "multirun.yaml").is_file()
    assert (sweep_dir / "report.html").is_file(), completed.stdout + completed.stderr
    runs = [p.parent for p in sweep_dir.rglob("manifest.json")]
    assert len(runs) == 2
    # Each run's label and directory name carry its base_url, less the credential.
    assert any("?key=***" in str(p) for p in runs)
    assert "Bearer *** at /v1/?key=***" in "".join(
        table(r, "items")["error_message"].dropna().sum() for r in runs
    )
    # The variants differ in scale on purpose: compared anyway, and the warnings that name them
    # must not carry the credential either.
    compared = summeval_compare(
        *map(str, runs), "--allow-mismatch", "--out", str(tmp_path / "compared"), cwd=tmp_path
    )
    assert compared.returncode == 0, compared.stderr
    assert (tmp_path / "compared" / "report.html").is_file()
    assert_nowhere(
        [judge_key, query],
        tmp_path,
        completed.stdout,
        completed.stderr,
        compared.stdout,
        compared.stderr,
    )


def test_the_library_scrubs_a_key_it_read_from_any_variable(
    echoing_server: ChatServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = secrets.token_hex(16)
    monkeypatch.setenv("SOME_CRED", key)
    # The second item's raw reply is cut at 2000 characters: the key's first 7 inside.
    cut = 2000 - len(" [Bearer ") - 7
    echoing_server.script(Fault(400, "judge refused"), *[Reply("x" * cut)] * 3)
    scorer = create_summarization_scorer(
        {
            "provider": "openai",
            "name": "judge-model",
            "base_url": echoing_server.base_url,
            "api_key_env": "SOME_CRED",
            "max_retries": 0,
        }
    )
    source = SAMPLE.read_text(encoding="utf-8").splitlines()[:2]

    result = asyncio.run(
        run_evals(
            target=lambda text: "A summary.",
            scorers=[scorer],
            data=[{"input": line} for line in source],
            output_dir=tmp_path / "run",
            max_items_in_flight=1,
            cache="off",
        )
    )

    assert result.counts.errors == 2
    items = table(tmp_path / "run", "items")
    assert "Bearer ***" in items["error_message"][0]
    assert " [Bearer ***" in items["error_raw_reply"][1]
    assert_nowhere([key, key[:7]], tmp_path / "run")


def test_what_is_scrubbed_and_what_is_too_short_to_be() -> None:
    register_secret("EMPTY")  # the dummy key local servers take: scrubbing it would mangle data
    register_url_secrets("http://ops:pw@10.0.0.1/v1?api-version=2024-01&sig=abc")

    assert scrub("EMPTY fields; call ops:pw@10.0.0.1 with sig=abc") == (
        "EMPTY fields; call ***@10.0.0.1 with sig=***"
    )
    assert redact_url("https://ops:pw@h/v1?api-version=2024-01&sig=abc") == (
        "https://***@h/v1?api-version=2024-01&sig=***"
    )


def test_a_url_in_json_text_keeps_the_json_whole() -> None:
    # A manifest is scrubbed as JSON text, where a quoted URL ends at an escaped quote.
    text = json.dumps({"variant": 'base_url="http://h/v1?x=1&token=abcdefgh123",limit=2'})

    redacted = redact_urls(text)

    assert json.loads(redacted) == {"variant": 'base_url="http://h/v1?x=1&token=***",limit=2'}


def test_the_echoing_server_does_echo(echoing_server: ChatServer) -> None:
    """The fault the tests above rely on: unscrubbed, the key is in the error body."""
    echoing_server.script(Fault(400, "bad"))
    request = urllib.request.Request(
        f"{echoing_server.base_url}/chat/completions?key=q",
        data=b"{}",
        headers={"Authorization": "Bearer k-123"},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request)
    assert "Bearer k-123 at /v1/chat/completions?key=q" in refused.value.read().decode()


def test_a_hook_failure_that_quotes_a_key_is_logged_without_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    key = secrets.token_hex(16)
    register_secret(key)

    def hook(event: ItemResult) -> None:
        raise RuntimeError(f"refused with Bearer {key}")

    # The plain log records of a script, not those summeval-run makes (scrubbed as made).
    factory = logging.getLogRecordFactory()
    logging.setLogRecordFactory(logging.LogRecord)
    try:
        with caplog.at_level(logging.ERROR, logger="summeval_runner"):
            asyncio.run(
                run_evals(
                    target=lambda text: text,
                    scorers=[create_summarization_scorer("offline")],
                    data=[{"input": "One sentence. Another one."}],
                    on_item_complete=hook,
                )
            )
    finally:
        logging.setLogRecordFactory(factory)

    assert "refused with Bearer ***" in caplog.text
    assert key not in caplog.text


def test_a_gateway_page_that_quotes_the_key_leaves_no_part_of_it(
    echoing_server: ChatServer, tmp_path: Path
) -> None:
    from tests.chat_server import BrokenReply

    # A 200 text/html page whose first 80 characters hold the key: the error message quotes
    # the page's start, which must be scrubbed before it is cut (a key cut in two is no longer
    # found whole).
    key = "zq9" + secrets.token_hex(40)  # longer than what is left of the 80 characters
    echoing_server.fail_every_request(BrokenReply("html"))
    run_dir = tmp_path / "run"

    completed = run_app(
        run_dir,
        "model=openai",
        f"model.base_url={echoing_server.base_url}",
        "model.api_key_env=GATEWAY_CRED",
        "dataset.limit=1",
        # One try: the page's own message is the item's (a retry on a connection the page
        # closed could end as a dropped connection instead).
        "runner.retry.max_attempts=1",
        f"runner.cache_path={tmp_path / 'cache.sqlite'}",
        "runner.progress=false",
        env={"GATEWAY_CRED": key},
    )

    assert completed.returncode == 1, completed.stderr
    message = table(run_dir, "items")["error_message"][0]
    assert "was not JSON: it began '<html>Authorization: Bearer ***" in message
    assert_nowhere([key[:12]], tmp_path, completed.stdout, completed.stderr)


def test_a_query_credential_is_scrubbed_however_the_client_encodes_it() -> None:
    register_url_secrets("http://127.0.0.1:9/v1?sig=zq9Sas%2Bab%2Fcd%3D")

    # The client sends "/" unescaped; a log may show it decoded.
    assert scrub("GET /v1/?sig=zq9Sas%2Bab/cd%3D") == "GET /v1/?sig=***"
    assert scrub("sig is zq9Sas+ab/cd=") == "sig is ***"


def test_an_ordinary_word_in_a_secret_named_variable_is_the_datas_not_a_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 44 pt 3: CACHE_KEY=approved rewrote every "approved" of the data as ***. A value
    in a variable whose name says KEY, TOKEN, SECRET or PASSWORD is scrubbed when the run reads
    it as a key, when the variable is a provider's, or when it has a credential's shape."""
    token = "ghp" + secrets.token_hex(12)  # letters and digits, no space: a credential's shape
    env = {
        "CACHE_KEY": "approved",
        "DEPLOY_TOKEN": token,
        "ANTHROPIC_API_KEY": "plainwordsonly",  # a provider's variable: scrubbed whatever it is
    }
    run_dir = tmp_path / "run"

    done = run_app(run_dir, "dataset.limit=3", "runner.progress=false", env=env)

    assert done.returncode == 0, done.stderr
    items = table(run_dir, "items")
    assert items["source"].str.contains("approved").any()  # the sample's own word, kept
    assert not items["source"].str.contains(r"\*\*\*", regex=True).any()
    journal = (run_dir / "journal.jsonl").read_text(encoding="utf-8")
    assert "approved" in journal
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert scrub(f"deploy with {token}, key plainwordsonly") == "deploy with ***, key ***"
    assert scrub("the budget was approved") == "the budget was approved"


@pytest.mark.parametrize(
    "scalar",
    ["2026-12-07", "2026-12-07T10:00:00", "yes", "0x1f", "1e3", "12:30", "~", "1_000", "abc"],
)
def test_the_quick_read_of_hydras_files_sees_a_string_wherever_omegaconf_does(
    scalar: str,
) -> None:
    """Before: libyaml's safe loader read 2026-12-07 as a date where OmegaConf reads a string,
    so the quick check for secrets did not look inside it."""
    from omegaconf import OmegaConf

    from summeval_runner._cli._callbacks import _QuickLoader

    quick = yaml.load(f"a: {scalar}\n", Loader=_QuickLoader)["a"]
    read = OmegaConf.to_container(OmegaConf.create(f"a: {scalar}\n"))["a"]  # type: ignore[index]

    assert isinstance(quick, str) or not isinstance(read, str)
