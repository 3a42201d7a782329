"""The A2A server's shared state store: set up on first use, closed with the server if it made it.

:func:`~daimon.a2a.a2a_app` takes ``store=`` as a :class:`~daimon.core.StateStore` or a URL
(``redis://...``, ``postgresql://...``, ``sqlite:///file.db``, ``memory://``). Its tables are made
on the first request, not when the app is built, so building stays cheap and works without a
running event loop; a store made from a URL is closed when the app shuts down.
"""

from __future__ import annotations

from daimon.core.errors import BuilderError
from daimon.core.state_store import StateRecord, StateStore
from daimon.kit.lifecycle import Once

__all__ = ("OpenedStore",)


class OpenedStore:
    """A :class:`~daimon.core.StateStore` that is set up before its first use.

    Args:
        store: The store, or the URL of one (made here, and closed by :meth:`aclose`).

    Raises:
        BuilderError: ``store`` is neither a state store nor a known store URL.
    """

    __slots__ = ("_owned", "_set_up", "store")

    def __init__(self, store: StateStore | str) -> None:
        if isinstance(store, str):
            from daimon.serverstate import state_store_from_url

            self.store, self._owned = state_store_from_url(store), True
        elif callable(getattr(store, "append", None)) and callable(getattr(store, "take", None)):
            self.store, self._owned = store, False
        else:
            raise BuilderError(
                f"store must be a StateStore or a URL (redis://..., postgresql://..., "
                f"sqlite:///file.db, memory://), got {store!r}"
            )
        self._set_up = Once()

    async def _open(self) -> StateStore:
        await self._set_up.run(self.store.setup)
        return self.store

    async def setup(self) -> None:
        """Set the store up (once)."""
        await self._open()

    async def aclose(self) -> None:
        """Close the store if it was made here from a URL; safe to call again."""
        if self._owned:
            await self.store.aclose()
        self._set_up.reset()

    async def put(self, kind: str, key: str, value: str, *, ttl: float | None = None) -> int:
        """See :meth:`daimon.core.StateStore.put`."""
        return await (await self._open()).put(kind, key, value, ttl=ttl)

    async def get(self, kind: str, key: str) -> str | None:
        """See :meth:`daimon.core.StateStore.get`."""
        return await (await self._open()).get(kind, key)

    async def read(self, kind: str, key: str) -> StateRecord | None:
        """See :meth:`daimon.core.StateStore.read`."""
        return await (await self._open()).read(kind, key)

    async def replace(
        self, kind: str, key: str, value: str, *, version: int, ttl: float | None = None
    ) -> int | None:
        """See :meth:`daimon.core.StateStore.replace`."""
        return await (await self._open()).replace(kind, key, value, version=version, ttl=ttl)

    async def take(self, kind: str, key: str) -> str | None:
        """See :meth:`daimon.core.StateStore.take`."""
        return await (await self._open()).take(kind, key)

    async def delete(self, kind: str, key: str) -> bool:
        """See :meth:`daimon.core.StateStore.delete`."""
        return await (await self._open()).delete(kind, key)

    async def append(self, kind: str, stream: str, value: str, *, ttl: float | None = None) -> int:
        """See :meth:`daimon.core.StateStore.append`."""
        return await (await self._open()).append(kind, stream, value, ttl=ttl)

    async def read_after(
        self, kind: str, stream: str, after: int = 0, limit: int = 1000
    ) -> list[tuple[int, str]]:
        """See :meth:`daimon.core.StateStore.read_after`."""
        return await (await self._open()).read_after(kind, stream, after, limit)

    async def wait_after(
        self, kind: str, stream: str, after: int, *, wait: float, limit: int = 1000
    ) -> list[tuple[int, str]]:
        """See :meth:`daimon.core.StateStore.wait_after`."""
        return await (await self._open()).wait_after(kind, stream, after, wait=wait, limit=limit)
