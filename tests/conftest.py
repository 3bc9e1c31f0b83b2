from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.chat_server import ChatServer


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
