from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from tests.chat_server import ChatServer


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C reaches the processes the tests start, however the suite was started.

    The tests send SIGINT to processes they start and expect what a terminal's Ctrl-C does. A
    process inherits an ignored SIGINT, and a non-interactive shell ignores it in its background
    jobs (``pytest &`` in a script): every process the suite started would then ignore Ctrl-C,
    and a Ctrl-C test would wait out its timeout and fail. (Python resets its own handler to the
    default in a child; only "ignored" is passed on.)
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def private_cache(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each test (and every app it starts) gets its own judge cache, never the user's."""
    monkeypatch.setenv("SUMMEVAL_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    server = ChatServer().start()
    yield server
    server.stop()


@pytest.fixture
def no_openai_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests see no key or base URL from the machine they run on."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"):
        monkeypatch.delenv(name, raising=False)
