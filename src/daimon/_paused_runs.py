"""Paused runs a front end keeps until they are resumed, in the server's state store.

A run that pauses (approvals pending, client tools called) ends its request, and the front end
keeps it until a request answers it: AG-UI by agent and thread, A2A by task, Responses by
response id and call ids, Chat Completions by call ids. They are kept in a
:class:`~daimon.core.StateStore`, as versioned JSON, so that with a shared store any replica
resumes a run another paused, and a restart loses none. A lookup never removes a run, so an
answer the front end refuses (an unknown interrupt, a wrong response id) leaves it waiting;
:meth:`PausedRuns.take` removes it for exactly one of racing resumes.

A resume of a run that is not kept (answered already, never paused here, past its time to live,
or forgotten by a bounded store) gets one error,
:class:`~daimon.core.errors.UnknownPausedRunError`, saying so; each front end answers it its own
way (a 4xx, a failed A2A task). Standard library and :mod:`daimon.core` only, so that every front
end can import it without importing another.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from daimon.core import codec
from daimon.core.errors import SerializationError, UnknownPausedRunError
from daimon.core.results import AgentResponse
from daimon.core.state_store import StateStore, check_ttl

__all__ = ("KEPT_PAUSED_RUNS", "PausedRun", "PausedRuns")

KEPT_PAUSED_RUNS = 1000
"""How many paused runs an in-memory store keeps per kind (the oldest is forgotten past this)."""

_FORMAT = 1


@dataclass(frozen=True, slots=True)
class PausedRun:
    """A paused run, and whose it is."""

    owner: str
    """The served promptable's name: only a resume for it continues the run."""
    response: AgentResponse[Any]
    key: str = ""
    """The front end's own name for it (a thread, a task id, a response id), if any."""
    shown: frozenset[str] = frozenset()
    """The calls whose results the front end already sent (AG-UI does not send them again)."""


def _record_key(*parts: str) -> str:
    """A store key for ``parts``, whatever characters they hold (a hash of them)."""
    return hashlib.sha256("\x1f".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


class PausedRuns:
    """Paused runs of one front end by owner and key, and by client call id.

    Args:
        store: Where they are kept (shared by replicas, or this process's memory).
        front: The front end's name (``agui``, ``responses``, ...): each keeps its own runs.
        ttl: Seconds a paused run is kept (``None``: until resumed, or a bounded store's limit).
    """

    __slots__ = ("_calls", "_runs", "store", "ttl")

    def __init__(self, store: StateStore, front: str, ttl: float | None = None) -> None:
        self.store = store
        self.ttl = check_ttl(ttl)
        self._runs = f"paused_{front}"
        self._calls = f"paused_{front}_calls"

    async def keep(
        self,
        owner: str,
        response: AgentResponse[Any],
        key: str = "",
        shown: frozenset[str] = frozenset(),
    ) -> PausedRun:
        """Keep a paused run until it is resumed; it replaces a run kept under the same key."""
        paused = PausedRun(owner, response, key, shown)
        name = self._name(paused)
        earlier = await self._read(name)
        if earlier is not None:  # replaced: its calls no longer lead here
            for call in earlier.response.client_calls:
                await self.store.delete(self._calls, _record_key(owner, call.id))
        value = codec.dumps(_Kept(owner, key, tuple(sorted(shown)), response))
        await self.store.put(self._runs, name, value, ttl=self.ttl)
        for call in response.client_calls:
            await self.store.put(self._calls, _record_key(owner, call.id), name, ttl=self.ttl)
        return paused

    def _name(self, paused: PausedRun) -> str:
        """The record of ``paused``: by key when it has one, else by its run."""
        if paused.key:
            return _record_key(paused.owner, "key", paused.key)
        return _record_key(paused.owner, "run", paused.response.run_id)

    async def get(self, owner: str, key: str) -> PausedRun | None:
        """The run of ``owner`` kept under ``key``, if any (it stays kept)."""
        return await self._read(_record_key(owner, "key", key))

    async def _read(self, name: str) -> PausedRun | None:
        value = await self.store.get(self._runs, name)
        return None if value is None else _decode(value)

    async def waiting_for(
        self, owner: str, call_ids: Iterable[str], where: Sequence[str] = ()
    ) -> PausedRun:
        """The run of ``owner`` that waits for every client call named (it stays kept).

        ``where`` says where each id came from in the request, for the error.

        Raises:
            UnknownPausedRunError: A call no kept run of ``owner`` waits for, calls of two
                runs, or no call at all.
        """
        asked = list(call_ids)
        found: str | None = None
        for index, call_id in enumerate(asked):
            name = await self.store.get(self._calls, _record_key(owner, call_id))
            if name is None or (found is not None and name != found):
                at = f" ({where[index]})" if index < len(where) else ""
                raise self.unknown(owner, call_id, f"tool call {call_id!r}{at}")
            found = name
        if found is None:
            raise UnknownPausedRunError(owner, "", "no tool results were given")
        paused = await self._read(found)
        waits_for = {call.id for call in paused.response.client_calls} if paused else set()
        missing = [call_id for call_id in asked if call_id not in waits_for]
        if paused is None or missing:  # answered, replaced or expired meanwhile
            gone = missing[0] if missing else asked[0]
            raise self.unknown(owner, gone, f"tool call {gone!r}")
        return paused

    async def take(self, paused: PausedRun) -> bool:
        """Stop keeping ``paused`` (to resume it): ``True`` for exactly one of racing callers."""
        taken = await self.store.take(self._runs, self._name(paused)) is not None
        if taken:
            for call in paused.response.client_calls:
                await self.store.delete(self._calls, _record_key(paused.owner, call.id))
        return taken

    def unknown(self, owner: str, key: str, what: str, hint: str = "") -> UnknownPausedRunError:
        """The error for a resume of ``what`` (naming ``key``): no run of ``owner`` waits for it."""
        kept = "until resumed" if self.ttl is None else f"for {self.ttl:g} s"
        return UnknownPausedRunError(
            owner,
            key,
            f"no paused run of {owner!r} waits for {what}: it was answered already, is unknown, "
            f"or is no longer kept (paused runs are kept {kept}; a server keeping them in memory "
            f"keeps only the newest {KEPT_PAUSED_RUNS} and none across a restart)"
            + (f"; {hint}" if hint else ""),
        )


@dataclass(frozen=True, slots=True)
class _Kept:
    """A paused run as stored (versioned JSON through :mod:`daimon.core.codec`)."""

    owner: str
    key: str
    shown: tuple[str, ...]
    response: AgentResponse  # unparameterized: the codec decodes no parameterized class
    format: int = _FORMAT


def _decode(value: str) -> PausedRun:
    kept = codec.loads(value, _Kept)
    if kept.format != _FORMAT:
        raise SerializationError(
            f"a paused run of format {kept.format}; this daimon reads {_FORMAT}"
        )
    return PausedRun(kept.owner, kept.response, kept.key, frozenset(kept.shown))
