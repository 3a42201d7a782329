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
import math
import re
import time
from dataclasses import dataclass

from daimon.core import codec
from daimon.core.checkpoints import CheckpointState
from daimon.core.errors import (
    BuilderError,
    CheckpointConflictError,
    CheckpointCorruptError,
    SerializationError,
)
from daimon.core.ids import check_id
from daimon.kit.checks import check_positive
from daimon.kit.lifecycle import SetupOnEnter

__all__ = (
    "BaseCheckpoint",
    "Record",
    "check_retention",
    "check_run_id",
    "conflict",
    "decode",
    "encode",
    "expired",
    "now_ms",
    "rebind",
)

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


def conflict(run_id: str, expected: int | None, found: int | None) -> CheckpointConflictError:
    """The error for a save that would overwrite checkpoints this handle has not seen."""
    return CheckpointConflictError(run_id, expected, found)


class BaseCheckpoint(SetupOnEnter):
    """Retention options, the sequence numbers a handle has seen, and ``async with``.

    A handle remembers, per run, the newest checkpoint number it loaded or saved; ``save`` writes
    the next number only if the store still holds that one as the newest.
    """

    def __init__(self, *, keep_last: int | None = None, ttl: float | None = None) -> None:
        check_retention(keep_last, ttl)
        self._keep_last = keep_last
        self._ttl = ttl
        self._seen: dict[str, int] = {}

    @property
    def keep_last(self) -> int | None:
        """At most this many checkpoints are kept per run (``None``: all)."""
        return self._keep_last

    @property
    def ttl(self) -> float | None:
        """Seconds a checkpoint is kept after it was saved (``None``: forever)."""
        return self._ttl

    async def setup(self) -> None:
        """Create what the store needs; safe to call again."""

    async def aclose(self) -> None:
        """Release connections this handle opened; safe to call again."""
