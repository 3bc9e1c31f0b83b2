"""One SDK client per event loop, closed when the loop ends if no one closed it before.

An HTTP connection pool belongs to the loop it was opened in, so each loop gets its own client,
and it is closed by ``aclose()``, or when that loop shuts down its async generators, whichever
comes first: ``asyncio.run`` does that at its end, so a script that never closes anything leaks
no connection. A loop run by hand must call ``loop.shutdown_asyncgens()`` before
``loop.close()`` (as ``asyncio.run`` does), or the code must call ``aclose()``. Every provider's
client (OpenAI's, Anthropic's) is kept this way.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

Client = TypeVar("Client")


@dataclass(frozen=True)
class _LoopClient(Generic[Client]):
    """The client of one event loop, and the generator that closes it when the loop ends."""

    client: Client
    closer: AsyncGenerator[None, None]


class LoopClients(Generic[Client]):
    """The clients ``open()`` makes, one per event loop; ``close(client)`` closes one."""

    def __init__(
        self, open: Callable[[], Client], close: Callable[[Client], Awaitable[object]]
    ) -> None:
        self._open = open
        self._close = close
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopClient[Client]] = (
            weakref.WeakKeyDictionary()
        )

    async def get(self) -> Client:
        """The running loop's client, opened on its first use."""
        loop = asyncio.get_running_loop()
        opened = self._clients.get(loop)
        if opened is None:
            client = self._open()
            opened = self._clients[loop] = _LoopClient(client, self._close_at_shutdown(client))
            # Started here, the generator is one the loop finalises when it shuts down.
            await opened.closer.asend(None)
        return opened.client

    async def aclose(self) -> None:
        """Close the running loop's client, if one was opened."""
        opened = self._clients.pop(asyncio.get_running_loop(), None)
        if opened is not None:
            await opened.closer.aclose()

    async def _close_at_shutdown(self, client: Client) -> AsyncGenerator[None, None]:
        """Suspended for the loop's lifetime; closes ``client`` when finalised, and forgets it.

        An event loop finalises the async generators started in it when it shuts down
        (``loop.shutdown_asyncgens()``, which ``asyncio.run`` calls before closing the loop),
        inside the loop: the one moment a client can still be closed cleanly when its owner
        never said so. The entry is dropped too: the client refers to its loop, so the loop
        could not be collected while the entry stayed.
        """
        try:
            yield
        finally:
            self._clients.pop(asyncio.get_running_loop(), None)
            await self._close(client)
