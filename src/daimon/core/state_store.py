"""The server's own state, shared by replicas: :class:`StateStore`, and the rules of its input.

``daimon serve`` keeps stored responses, paused runs, resumable-stream events and A2A tasks.
A :class:`StateStore` holds them where every replica of a server can reach them: in memory (one
process), in Redis or in PostgreSQL (:mod:`daimon.serverstate`). It holds two things, each named
by a *kind* (what it is: ``"response"``, ``"paused_run"``) and a name within the kind:

* **records**: one JSON text under a key, with a version that changes on every write, so that
  racing updates can be made safe (:meth:`StateStore.replace`), and an optional time to live;
* **streams**: events appended in order, numbered per stream, read from a number on and waited
  for (to replay what a reconnecting client missed), with a time to live.

Values are JSON text (never pickle) that the store keeps as given and does not parse; callers
put their own format version inside. Every store applies the checks below before it reads or
writes anything, so bad input fails the same way in each.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from daimon.core.errors import InvalidIdError, SerializationError, StateStoreError
from daimon.core.ids import check_id

__all__ = ("StateRecord", "StateStore")
# The check_* functions below are the input rules every backend applies: backends import them
# from this module; daimon.core does not re-export them.

_KIND = re.compile(r"[a-z][a-z0-9_]{0,39}")


@dataclass(frozen=True, slots=True)
class StateRecord:
    """A record as stored: its value and its version."""

    value: str
    """The JSON text that was written."""
    version: int
    """The write that made it: positive, never given twice by one store (0 means "none")."""


@runtime_checkable
class StateStore(Protocol):
    """Records and event streams that every replica of a server shares.

    Guarantees, in every implementation:

    * Each call is atomic: a reader sees a record whole, before or after a write, never between.
    * :meth:`take` gives a record to exactly one caller, however many take it at once.
    * Every write gives the record a new version, never given before by the store (so a record
      deleted and written again never matches a version read before); :meth:`replace` writes
      only over the version it names, so of racing replaces exactly one wins.
    * Each write sets the time to live afresh: ``ttl`` seconds from now, ``None`` for no expiry;
      an expired record or stream reads as absent (it may linger in storage until cleaned up).
    * A stream's events are numbered from 1, each append one higher than the last, so numbers are
      unique and in append order even with many appenders; a stream that expired may number from
      1 again. A bounded store may drop a stream's oldest events; reads then start at the oldest
      kept.
    * Kinds are ``[a-z][a-z0-9_]*`` (at most 40 characters), keys and stream names are ids as
      :func:`~daimon.core.ids.check_id` takes them; values are ``str``: valid Unicode without
      NUL (JSON text has none). Bad input raises a :class:`~daimon.core.errors.DaimonError`
      (:class:`~daimon.core.errors.InvalidIdError`, :class:`~daimon.core.errors.SerializationError`
      or :class:`StateStoreError`) before anything is read or written.
    """

    async def setup(self) -> None:
        """Create what the store needs (tables); safe to call again."""
        ...

    async def aclose(self) -> None:
        """Release connections; safe to call again."""
        ...

    async def put(self, kind: str, key: str, value: str, *, ttl: float | None = None) -> int:
        """Write ``value`` under ``key``, whatever was there; its new version."""
        ...

    async def get(self, kind: str, key: str) -> str | None:
        """The value under ``key``; ``None`` if there is none (or it expired)."""
        ...

    async def read(self, kind: str, key: str) -> StateRecord | None:
        """The value under ``key`` with its version, for a later :meth:`replace`."""
        ...

    async def replace(
        self, kind: str, key: str, value: str, *, version: int, ttl: float | None = None
    ) -> int | None:
        """Compare and set: write ``value`` only if the record's version is ``version``.

        ``version=0`` writes only if there is no record (a create that one caller wins).

        Returns:
            The new version; ``None`` (nothing written) when the record changed, was deleted,
            expired, or (for ``version=0``) exists.
        """
        ...

    async def take(self, kind: str, key: str) -> str | None:
        """Remove the record and return its value: exactly one of racing callers gets it."""
        ...

    async def delete(self, kind: str, key: str) -> bool:
        """Remove the record; whether there was one."""
        ...

    async def append(self, kind: str, stream: str, value: str, *, ttl: float | None = None) -> int:
        """Add ``value`` as the stream's next event; its number (the stream starts at 1).

        ``ttl`` is how long the whole stream is kept after this append.
        """
        ...

    async def read_after(
        self, kind: str, stream: str, after: int = 0, limit: int = 1000
    ) -> list[tuple[int, str]]:
        """The kept events numbered above ``after``, oldest first, at most ``limit`` of them."""
        ...

    async def wait_after(
        self, kind: str, stream: str, after: int, *, wait: float, limit: int = 1000
    ) -> list[tuple[int, str]]:
        """Like :meth:`read_after`, but waits up to ``wait`` seconds for an event to come.

        Returns at once when there are events above ``after``; else as soon as one is appended
        (by any handle on the store); ``[]`` when ``wait`` passes first.
        """
        ...


def check_kind(kind: object) -> str:
    """``kind`` if it can name a kind of state; :class:`InvalidIdError` otherwise."""
    if isinstance(kind, str) and _KIND.fullmatch(kind):
        return kind
    raise InvalidIdError(
        "state kind",
        kind,
        "a kind is 1-40 lowercase letters, digits or '_', starting with a letter",
    )


def check_name(kind: str, name: object, what: str = "key") -> str:
    """``name`` (a record's key or a stream's name) if it is a valid id (see ``check_id``)."""
    try:
        return check_id("session", name)  # the rules are the same for every id
    except InvalidIdError as exc:
        raise InvalidIdError(f"{kind} {what}", name, exc.reason) from None


def check_value(kind: str, value: object) -> str:
    """``value`` if every store can hold it as text; :class:`SerializationError` otherwise."""
    if not isinstance(value, str):
        raise SerializationError(
            f"a {kind} value must be JSON text (str), got {type(value).__name__}"
        )
    if "\0" in value:
        raise SerializationError(f"a {kind} value holds a NUL character, which JSON text never has")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise SerializationError(
                f"a {kind} value is not valid Unicode text (it holds a lone surrogate)"
            ) from None
    return value


def check_ttl(ttl: object) -> float | None:
    """``ttl`` if it is ``None`` or a positive, finite number of seconds."""
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not 0 < ttl < math.inf:
        raise StateStoreError(f"ttl must be a positive number of seconds or None, got {ttl!r}")
    return float(ttl)


def check_version(version: object) -> int:
    """``version`` if it is an int of at least 0 (0: "no record")."""
    if type(version) is not int or version < 0:
        raise StateStoreError(f"version must be an integer of at least 0, got {version!r}")
    return version


def check_after(after: object) -> int:
    """``after`` if it is an event number to read after: an int of at least 0."""
    if type(after) is not int or after < 0:
        raise StateStoreError(f"after must be an integer of at least 0, got {after!r}")
    return after


def check_limit(limit: object) -> int:
    """``limit`` if it is a positive int."""
    if type(limit) is not int or limit < 1:
        raise StateStoreError(f"limit must be a positive integer, got {limit!r}")
    return limit


def check_wait(wait: object) -> float:
    """``wait`` if it is a positive, finite number of seconds."""
    if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 < wait < math.inf:
        raise StateStoreError(f"wait must be a positive, finite number of seconds, got {wait!r}")
    return float(wait)
