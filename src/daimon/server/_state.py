"""The server's shared state: one :class:`~daimon.core.StateStore` handle for every front end.

Everything a server remembers between requests (paused runs, stored and background responses,
the events of its streams) goes through :class:`ServerState`, so replicas that share a store
(``ServerSettings(store="postgresql://...")``) answer each other's follow-ups. The store is set up
on first use (not at import or construction), so building an app stays cheap and a database
that is down is reported by ``/ready``, not by a crash.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from daimon.core.errors import BuilderError
from daimon.kit.lifecycle import Once

if TYPE_CHECKING:
    from daimon.core.state_store import StateStore

__all__ = ("ServerState", "state_store_for")

logger = logging.getLogger("daimon.server")

_PROBE_KIND = "server"
_PROBE_KEY = "ready"


def state_store_for(store: StateStore | str | None) -> tuple[StateStore, bool]:
    """The store ``ServerSettings.store`` names, and whether the server made it (and closes it).

    ``None`` is a :class:`~daimon.serverstate.MemoryStateStore`: this process only, bounded.
    """
    from daimon.serverstate import MemoryStateStore, state_store_from_url

    if store is None:
        return MemoryStateStore(), True
    if isinstance(store, str):
        return state_store_from_url(store), True
    if not callable(getattr(store, "append", None)):
        raise BuilderError(f"store must be a StateStore or a URL, got {store!r}")
    return store, False


class ServerState:
    """The server's store, set up once on first use and closed at shutdown if the server made it."""

    __slots__ = ("_owned", "_set_up", "store")

    def __init__(self, store: StateStore | str | None) -> None:
        self.store, self._owned = state_store_for(store)
        self._set_up = Once()

    async def open(self) -> StateStore:
        """The store, set up (its tables made) before the first use."""
        await self._set_up.run(self.store.setup)
        return self.store

    async def check(self) -> str | None:
        """Why the store cannot be used right now (for ``/ready``); ``None`` when it can."""
        try:
            store = await self.open()
            await store.get(_PROBE_KIND, _PROBE_KEY)
        except Exception as exc:  # any failure of a store's client means "not ready"
            return f"the state store cannot be reached: {type(exc).__name__}: {exc}"
        return None

    async def aclose(self) -> None:
        """Close the store if the server opened it; safe to call again."""
        if self._owned:
            await self.store.aclose()
        self._set_up.reset()
