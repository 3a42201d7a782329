"""Paused runs a front end keeps until they are resumed: one bounded store for every front end.

A run that pauses (approvals pending, client tools called) ends its request, and the front end
keeps it here until a request answers it: AG-UI by agent and thread, A2A by task, Responses by
response id and call ids, Chat Completions by call ids. A lookup never removes a run, so an
answer the front end refuses (an unknown interrupt, a wrong response id) leaves it waiting;
:meth:`PausedRuns.forget` removes it once the answer is taken.

The store is bounded: past ``limit`` runs the oldest is forgotten. A resume of a run that is not
kept (forgotten, answered already, never paused here, or kept before a restart) gets one error,
:class:`~daimon.core.errors.UnknownPausedRunError`, saying so; each front end answers it its own
way (a 4xx, a failed A2A task). Standard library and :mod:`daimon.core` only, so that every front
end can import it without importing another.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from daimon.core.errors import UnknownPausedRunError
from daimon.core.results import AgentResponse
from daimon.kit.checks import check_non_negative

__all__ = ("KEPT_PAUSED_RUNS", "PausedRun", "PausedRuns")

KEPT_PAUSED_RUNS = 1000
"""How many paused runs a front end keeps by default (the oldest is forgotten past this)."""


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


class PausedRuns:
    """Paused runs by owner and key and by client call id, the newest ``limit`` of them."""

    __slots__ = ("_by_call", "_by_key", "_runs", "limit")

    def __init__(self, limit: int = KEPT_PAUSED_RUNS) -> None:
        self.limit = check_non_negative("limit", limit)
        self._runs: OrderedDict[int, PausedRun] = OrderedDict()  # oldest first, by id()
        self._by_key: dict[tuple[str, str], PausedRun] = {}
        self._by_call: dict[str, PausedRun] = {}

    def __len__(self) -> int:
        return len(self._runs)

    def keep(
        self,
        owner: str,
        response: AgentResponse[Any],
        key: str = "",
        shown: frozenset[str] = frozenset(),
    ) -> PausedRun:
        """Keep a paused run until it is resumed; it replaces a run kept under the same key."""
        if key and (earlier := self._by_key.get((owner, key))) is not None:
            self.forget(earlier)
        paused = PausedRun(owner, response, key, shown)
        self._runs[id(paused)] = paused
        if key:
            self._by_key[(owner, key)] = paused
        for call in response.client_calls:
            self._by_call[call.id] = paused
        while len(self._runs) > self.limit:
            self.forget(next(iter(self._runs.values())))
        return paused

    def get(self, owner: str, key: str) -> PausedRun | None:
        """The run of ``owner`` kept under ``key``, if any (it stays kept)."""
        return self._by_key.get((owner, key))

    def waiting_for(
        self, owner: str, call_ids: Iterable[str], where: Sequence[str] = ()
    ) -> PausedRun:
        """The run of ``owner`` that waits for every client call named (it stays kept).

        ``where`` says where each id came from in the request, for the error.

        Raises:
            UnknownPausedRunError: A call no kept run of ``owner`` waits for, calls of two
                runs, or no call at all.
        """
        found: PausedRun | None = None
        for index, call_id in enumerate(call_ids):
            paused = self._by_call.get(call_id)
            if paused is None or paused.owner != owner or (found and paused is not found):
                at = f" ({where[index]})" if index < len(where) else ""
                raise self.unknown(owner, call_id, f"tool call {call_id!r}{at}")
            found = paused
        if found is None:
            raise UnknownPausedRunError(owner, "", "no tool results were given")
        return found

    def forget(self, paused: PausedRun) -> None:
        """No longer keep ``paused`` (resumed, cancelled or the oldest); no-op if not kept."""
        if self._runs.pop(id(paused), None) is None:
            return
        if paused.key and self._by_key.get((paused.owner, paused.key)) is paused:
            del self._by_key[(paused.owner, paused.key)]
        for call in paused.response.client_calls:
            if self._by_call.get(call.id) is paused:
                del self._by_call[call.id]

    def unknown(self, owner: str, key: str, what: str, hint: str = "") -> UnknownPausedRunError:
        """The error for a resume of ``what`` (naming ``key``): no run of ``owner`` waits for it."""
        return UnknownPausedRunError(
            owner,
            key,
            f"no paused run of {owner!r} waits for {what}: it was answered already, is unknown, "
            f"or is no longer kept (only the newest {self.limit} paused runs are kept, in memory: "
            "none survive a restart)" + (f"; {hint}" if hint else ""),
        )
