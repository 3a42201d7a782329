"""Holding one run while it runs: in this process, and by the store's lease across processes.

Agent runs and graph runs both use :class:`RunHold`: :meth:`~RunHold.hold` marks the run as in
progress in this process, :meth:`~RunHold.take` takes the run's lease (with a store that leases
runs, :class:`~daimon.core.RunLeases`) before the run is loaded and renews it every third of its
length, :meth:`~RunHold.end` gives it up, and :meth:`~RunHold.release` ends the hold.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time

from daimon.core.checkpoints import Lease, RunLeases
from daimon.core.errors import CheckpointConflictError

__all__ = ()  # private to daimon: agent runs and graph runs share it, nothing here is public API

_log = logging.getLogger("daimon.checkpoint")

_IN_PROGRESS: set[tuple[int, str]] = set()
"""``(id(store), run_id)`` of every run this process is running with a checkpoint store.

Handles remember the checkpoint numbers they have seen, so two runs of one id through one handle
would each pass the other's compare-and-set: this set turns the second away before it starts.
"""


def leasing(store: object) -> RunLeases | None:
    """``store`` when it leases runs, else ``None``."""
    return store if isinstance(store, RunLeases) else None


class RunHold:
    """One run's place: held in this process, and its lease held while the run goes on."""

    __slots__ = ("_deadline", "_held", "_lease", "_leases", "_renewer", "_stop", "_store")

    def __init__(self, store: object) -> None:
        self._store = store
        self._leases = leasing(store)
        self._held: tuple[int, str] | None = None
        self._lease: Lease | None = None
        self._stop: asyncio.Event | None = None
        self._renewer: asyncio.Task[None] | None = None
        self._deadline = math.inf
        """``time.monotonic()`` after which the lease may have ended (from before each request)."""

    def hold(self, run_id: str) -> None:
        """Mark the run as in progress in this process until :meth:`release`.

        Raises:
            CheckpointConflictError: This process already runs it with the same store.
        """
        key = (id(self._store), run_id)
        if key in _IN_PROGRESS:
            raise CheckpointConflictError(
                run_id, None, None, message=f"run {run_id!r} is already running in this process"
            )
        _IN_PROGRESS.add(key)
        self._held = key

    def release(self) -> None:
        """End what :meth:`hold` started (safe to call when it did not).

        A lease :meth:`end` did not give up is no longer renewed: it expires by itself.
        """
        if self._held is not None:
            _IN_PROGRESS.discard(self._held)
            self._held = None
        if self._stop is not None:
            self._stop.set()

    async def take(self, run_id: str) -> None:
        """Hold the run's lease, renewed every third of its length (when the store leases runs).

        Raises:
            RunLeasedError: Another holder has a live lease on the run.
        """
        store = self._leases
        if store is None:
            return
        asked = time.monotonic()
        self._lease = await store.acquire(run_id)
        self._deadline = asked + store.lease
        self._stop = asyncio.Event()
        self._renewer = asyncio.create_task(self._renew(store, store.lease / 3, self._stop))

    def check(self) -> None:
        """Refuse to go on once the lease may have ended (by this process's clock).

        Called right before each tool runs: a runner stalled past its lease must not start a
        call the run's new owner may start too (its next save would be refused, but too late).

        Raises:
            CheckpointConflictError: The lease ended: the run may be someone else's now.
        """
        lease = self._lease
        if lease is not None and time.monotonic() >= self._deadline:
            raise CheckpointConflictError(
                lease.run_id,
                None,
                None,
                message=f"run {lease.run_id!r}: its lease ended before the tool call could start "
                "(another process may be running it now)",
            )

    async def end(self) -> None:
        """Stop renewing the run's lease and give it up (safe to call when none is held).

        A store that fails to release it is logged, not raised: the lease then expires by itself.
        """
        lease, self._lease = self._lease, None
        store = self._leases
        if lease is None or store is None or self._stop is None or self._renewer is None:
            return
        self._stop.set()
        await asyncio.wait([self._renewer])  # a renewal in flight lands before the release
        try:
            await store.release(lease)
        except Exception as exc:  # the lease expires by itself
            _log.warning("could not release the lease of run %r: %s", lease.run_id, exc)

    async def _renew(self, store: RunLeases, every: float, stop: asyncio.Event) -> None:
        """Renew the lease every ``every`` seconds until ``stop`` is set or the lease is lost."""
        while not stop.is_set():
            try:
                async with asyncio.timeout(every):
                    await stop.wait()
                return
            except TimeoutError:
                pass
            lease = self._lease
            if lease is None:
                return
            asked = time.monotonic()
            try:
                self._lease = await store.renew(lease)
            except CheckpointConflictError as exc:  # the run's next save is refused
                _log.warning("run %r lost its lease: %s", lease.run_id, exc)
                self._deadline = -math.inf
                return
            except Exception as exc:  # tried again next time; saves stop at the lease's end
                _log.warning("could not renew the lease of run %r: %s", lease.run_id, exc)
            else:
                self._deadline = asked + store.lease
