"""What every checkpoint backend shares: the record it stores, its options and its lifecycle.

A record is one JSON object, written byte for byte as::

    {"daimon_checkpoint":1,"seq":42,"saved_at":1730000000123,"sha256":"<hex>","state":<payload>}

``<payload>`` is ``codec.dumps(state)`` (versioned JSON), ``seq`` the checkpoint's number within its
run, ``saved_at`` milliseconds since the epoch, and ``sha256`` the digest of
``b"<seq>:<saved_at>:" + payload``: a truncated record or any flipped bit fails the check before a
single byte is decoded.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
import socket
import time
from dataclasses import dataclass

from daimon.core import codec
from daimon.core.checkpoints import CheckpointState, Lease
from daimon.core.errors import (
    BuilderError,
    CheckpointConflictError,
    CheckpointCorruptError,
    RunLeasedError,
    SerializationError,
)
from daimon.core.ids import check_id
from daimon.kit.checks import check_positive, check_seconds
from daimon.kit.lifecycle import SetupOnEnter

__all__ = (
    "BaseCheckpoint",
    "DEFAULT_LEASE",
    "Record",
    "check_lease",
    "check_retention",
    "check_run_id",
    "conflict",
    "decode",
    "decode_lease",
    "encode",
    "encode_lease",
    "expired",
    "lease_lost",
    "lease_owner",
    "leased",
    "now_ms",
    "rebind",
)

DEFAULT_LEASE = 30.0
"""Seconds a run's lease lasts unless renewed (renewed every third of it while the run goes on)."""

_HEAD = re.compile(
    rb'\{"daimon_checkpoint":1,"seq":([0-9]{1,18}),"saved_at":([0-9]{1,18}),'
    rb'"sha256":"([0-9a-f]{64})","state":'
)


@dataclass(frozen=True, slots=True)
class Record:
    """A decoded, verified checkpoint."""

    seq: int
    saved_at: int
    state: CheckpointState


def now_ms() -> int:
    """Wall-clock milliseconds since the epoch (records are compared across processes)."""
    return time.time_ns() // 1_000_000


def _digest(seq: int, saved_at: int, payload: bytes) -> str:
    return hashlib.sha256(b"%d:%d:" % (seq, saved_at) + payload).hexdigest()


def encode(state: CheckpointState, seq: int, saved_at: int | None = None) -> bytes:
    """The record for ``state`` as checkpoint number ``seq``."""
    try:
        payload = codec.dumps(state).encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate cannot be stored as UTF-8
        raise SerializationError(f"cannot store the checkpoint as UTF-8: {exc.reason}") from exc
    # The codec writes some values it refuses to read back (a "__class__" key in custom data, for
    # one): refuse them now rather than store a checkpoint that can never be loaded.
    codec.loads(payload, CheckpointState)
    at = now_ms() if saved_at is None else saved_at
    head = b'{"daimon_checkpoint":1,"seq":%d,"saved_at":%d,"sha256":"%s","state":' % (
        seq,
        at,
        _digest(seq, at, payload).encode("ascii"),
    )
    return head + payload + b"}"


def decode(data: bytes, *, run_id: str, seq: int | None = None) -> Record:
    """Verify and decode a record of run ``run_id`` (stored as number ``seq`` when known).

    Raises:
        CheckpointCorruptError: the record is truncated, altered, or stored in the wrong place.
        SerializationError: the record is intact but its payload is not a ``CheckpointState``
            (for example it carries a code-reviving marker, or a newer codec version).
    """
    match = _HEAD.match(data)
    if match is None or not data.endswith(b"}"):
        raise CheckpointCorruptError(f"checkpoint of run {run_id!r} is truncated or malformed")
    found_seq, saved_at = int(match[1]), int(match[2])
    payload = data[match.end() : -1]
    if _digest(found_seq, saved_at, payload) != match[3].decode("ascii"):
        raise CheckpointCorruptError(f"checkpoint of run {run_id!r} failed its sha256 check")
    if seq is not None and found_seq != seq:
        raise CheckpointCorruptError(
            f"checkpoint {seq} of run {run_id!r} holds checkpoint number {found_seq}"
        )
    state = codec.loads(payload, CheckpointState)
    if state.run_id != run_id:
        raise CheckpointCorruptError(
            f"checkpoint {found_seq} of run {run_id!r} belongs to run {state.run_id!r}"
        )
    return Record(found_seq, saved_at, state)


def expired(record: Record, ttl: float | None, now: int) -> bool:
    """Whether ``record`` outlived ``ttl`` seconds at ``now`` (milliseconds)."""
    return ttl is not None and now - record.saved_at > ttl * 1000


def rebind(state: CheckpointState, run_id: str) -> CheckpointState:
    """``state`` as a state of run ``run_id`` (for forks)."""
    return dataclasses.replace(state, run_id=run_id)


def check_run_id(run_id: object) -> str:
    """``run_id`` if it can name a run anywhere; :class:`InvalidIdError` otherwise."""
    return check_id("run", run_id)


def check_retention(keep_last: object, ttl: object) -> None:
    """Refuse retention settings that make no sense, at construction."""
    if keep_last is not None:
        check_positive("keep_last", keep_last, "or None")
    if ttl is not None and (
        isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not 0 < ttl < math.inf
    ):
        raise BuilderError(f"ttl must be a positive number of seconds or None, got {ttl!r}")


def check_lease(lease: object) -> float:
    """``lease`` as seconds if it is a positive, finite number; :class:`BuilderError` otherwise."""
    return check_seconds("lease", lease)


def lease_owner() -> str:
    """``host:pid`` of this process: who a lease names as its holder."""
    return f"{socket.gethostname()}:{os.getpid()}"


def encode_lease(lease: Lease) -> bytes:
    """A lease as a file or key stores it, versioned JSON.

    ``{"daimon_lease":1,"owner":"host:pid","token":3,"expires_at":<milliseconds since the epoch>}``
    """
    return json.dumps(
        {
            "daimon_lease": 1,
            "owner": lease.owner,
            "token": lease.token,
            "expires_at": lease.expires_at,
        },
        separators=(",", ":"),
    ).encode("utf-8")


def decode_lease(data: bytes, run_id: str) -> Lease | None:
    """The lease stored as ``data``; ``None`` when it is unreadable (a write cut short by a crash).

    An unreadable lease counts as ended: whoever wrote it is gone.
    """
    try:
        fields = json.loads(data)
        owner, token, expires_at = fields["owner"], fields["token"], fields["expires_at"]
    except (ValueError, TypeError, KeyError):
        return None
    if (
        fields.get("daimon_lease") != 1
        or not isinstance(owner, str)
        or not all(type(n) is int for n in (token, expires_at))
    ):
        return None
    return Lease(run_id=run_id, owner=owner, token=token, expires_at=expires_at)


def leased(run_id: str, held: Lease | None, fallback: Lease | None = None) -> RunLeasedError:
    """The refusal of a lease because ``held`` (or, when it is unreadable, ``fallback``) is live."""
    lease = held or fallback
    assert lease is not None
    return RunLeasedError(run_id, lease.owner, lease.expires_at)


def lease_lost(run_id: str, why: str) -> CheckpointConflictError:
    """The error for a holder whose lease ended: it may no longer save the run."""
    return CheckpointConflictError(
        run_id,
        None,
        None,
        message=f"run {run_id!r}: this handle's lease {why}, so it may no longer save the run "
        "(another process may be running it now)",
    )


def conflict(run_id: str, expected: int | None, found: int | None) -> CheckpointConflictError:
    """The error for a save that would overwrite checkpoints this handle has not seen."""
    return CheckpointConflictError(run_id, expected, found)


class BaseCheckpoint(SetupOnEnter):
    """Retention options, the sequence numbers a handle has seen, run leases, and ``async with``.

    A handle remembers, per run, the newest checkpoint number it loaded or saved; ``save`` writes
    the next number only if the store still holds that one as the newest.

    It also remembers the leases it holds. While it holds a run's lease, ``save`` refuses to write
    once the lease has ended by this process's clock (a deadline measured from before each
    acquire or renew request was sent), and each store refuses it too once another holder took
    the lease over. A store implements ``_acquire``, ``_renew`` and ``_release``, each atomic.
    """

    def __init__(
        self,
        *,
        keep_last: int | None = None,
        ttl: float | None = None,
        lease: float = DEFAULT_LEASE,
    ) -> None:
        check_retention(keep_last, ttl)
        self._keep_last = keep_last
        self._ttl = ttl
        self._lease = check_lease(lease)
        self._seen: dict[str, int] = {}
        self._leases: dict[str, Lease] = {}
        self._deadlines: dict[str, float] = {}
        """Per leased run, the ``time.monotonic()`` after which its lease may have ended."""

    @property
    def keep_last(self) -> int | None:
        """At most this many checkpoints are kept per run (``None``: all)."""
        return self._keep_last

    @property
    def ttl(self) -> float | None:
        """Seconds a checkpoint is kept after it was saved (``None``: forever)."""
        return self._ttl

    @property
    def lease(self) -> float:
        """Seconds a run's lease lasts unless renewed."""
        return self._lease

    @property
    def _lease_ms(self) -> int:
        return max(1, round(self._lease * 1000))

    async def acquire(self, run_id: str) -> Lease:
        """Take the run's lease for ``lease`` seconds.

        Raises:
            RunLeasedError: another holder's lease on the run is live.
        """
        started = time.monotonic()
        lease = await self._acquire(check_run_id(run_id), lease_owner())
        self._hold(lease, started)
        return lease

    async def renew(self, lease: Lease) -> Lease:
        """Extend ``lease`` by ``lease`` seconds from now.

        Raises:
            CheckpointConflictError: the lease ended (expired, or another holder took it over).
        """
        started = time.monotonic()
        self.fence(lease.run_id)
        try:
            renewed = await self._renew(lease)
        except CheckpointConflictError:
            self._deadlines[lease.run_id] = -math.inf  # lost: every later save is refused
            raise
        self._hold(renewed, started)
        return renewed

    async def release(self, lease: Lease) -> None:
        """Give ``lease`` up, so that another process can take the run at once."""
        held = self._leases.get(lease.run_id)
        if held is not None and held.token == lease.token:
            del self._leases[lease.run_id], self._deadlines[lease.run_id]
        await self._release(lease)

    def fence(self, run_id: str) -> Lease | None:
        """The lease this handle holds on the run, if any, checked to be live by this clock.

        Raises:
            CheckpointConflictError: the lease ended: the run may be someone else's now.
        """
        lease = self._leases.get(run_id)
        if lease is not None and time.monotonic() >= self._deadlines[run_id]:
            raise lease_lost(run_id, f"(generation {lease.token}) ended")
        return lease

    def _hold(self, lease: Lease, started: float) -> None:
        self._leases[lease.run_id] = lease
        self._deadlines[lease.run_id] = started + self._lease

    async def _acquire(self, run_id: str, owner: str) -> Lease:
        """Atomically take the run's lease if no live one is held; see :meth:`acquire`."""
        raise NotImplementedError

    async def _renew(self, lease: Lease) -> Lease:
        """Atomically extend ``lease`` if it is still the run's current one; see :meth:`renew`."""
        raise NotImplementedError

    async def _release(self, lease: Lease) -> None:
        """Atomically end ``lease`` if it is still the run's current one."""
        raise NotImplementedError

    async def setup(self) -> None:
        """Create what the store needs; safe to call again."""

    async def aclose(self) -> None:
        """Release connections this handle opened; safe to call again."""
