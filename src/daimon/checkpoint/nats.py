"""Checkpoints in a NATS JetStream key-value bucket: one key per run, one revision per checkpoint.

The bucket's per-key history keeps a run's checkpoints (at most 64, a JetStream limit), and every
save is a compare-and-set on the key's revision, so two writers can never both continue a run.

A run's lease is the key ``lease.<run_id>``: taken, renewed and released by compare-and-set on its
revision; its token is the revision at which it was taken.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from typing import Any
from urllib.parse import quote, unquote

from daimon.core.checkpoints import CheckpointState, Lease
from daimon.core.errors import BuilderError, CheckpointCorruptError, DaimonError
from daimon.core.optional import require
from daimon.kit import checkpoint_records as _base
from daimon.kit.checkpoint_records import BaseCheckpoint

nats = require("nats", extra="nats")
nats_errors = require("nats.js.errors", extra="nats")

__all__ = ("NatsKVCheckpoint",)

_log = logging.getLogger("daimon.checkpoint")
_MAX_HISTORY = 64


def _key(run_id: str, kind: str = "run") -> str:
    """``run.<run_id>``, every byte outside ``[A-Za-z0-9_-]`` written as ``=XX`` (a valid key)."""
    quoted = quote(_base.check_run_id(run_id), safe="")
    return f"{kind}." + quoted.replace(".", "%2E").replace("~", "%7E").replace("%", "=")


def _run_id(key: str) -> str:
    return unquote(key.removeprefix("run.").replace("=", "%"), errors="strict")


class NatsKVCheckpoint(BaseCheckpoint):
    """Stores checkpoints in a JetStream key-value bucket, shared by every process using it.

    ``save`` refuses (:class:`~daimon.core.errors.DaimonError`) to write over checkpoints this
    handle has not seen: ``load`` a run before continuing it from another handle or process.
    ``load`` verifies each record's checksum and falls back to the newest intact one. Retention
    is the server's: :meth:`setup` creates the bucket with ``history=keep_last`` and ``ttl=ttl``.

    Args:
        client: A connected ``nats.aio.client.Client`` (left open by :meth:`aclose`), or a URL
            such as ``"nats://localhost:4222"`` (connected on first use, closed by :meth:`aclose`).
        bucket: The key-value bucket's name.
        keep_last: Keep at most this many checkpoints per run, 1 to 64 (``None``: 64).
        ttl: Seconds a checkpoint is kept after it was saved (``None``: forever).
        lease: Seconds a run's lease lasts unless renewed (see :meth:`acquire`). Lease expiry is
            judged by wall-clock time, so processes sharing the bucket need clocks in step.
    """

    def __init__(
        self,
        client: Any,
        *,
        bucket: str = "daimon_checkpoints",
        keep_last: int | None = None,
        ttl: float | None = None,
        lease: float = _base.DEFAULT_LEASE,
    ) -> None:
        super().__init__(keep_last=keep_last, ttl=ttl, lease=lease)
        if keep_last is not None and keep_last > _MAX_HISTORY:
            raise BuilderError(f"keep_last must be at most {_MAX_HISTORY} on NATS, got {keep_last}")
        self._url = client if isinstance(client, str) else None
        self._nc: Any = None if self._url is not None else client
        self._bucket = bucket
        self._kv_handle: Any = None
        self._revisions: dict[str, int] = {}
        self._lease_revisions: dict[str, int] = {}
        self._lock = asyncio.Lock()
        self._closed = False

    @classmethod
    def from_url(cls, url: str, **options: Any) -> NatsKVCheckpoint:
        """A handle on its own connection to ``url``."""
        return cls(url, **options)

    @property
    def bucket(self) -> str:
        """The key-value bucket's name."""
        return self._bucket

    async def setup(self) -> None:
        """Create the bucket if it is missing (an existing bucket keeps its settings)."""
        await self._kv()

    async def aclose(self) -> None:
        """Close the connection if this handle opened it; safe to call again."""
        if self._url is not None and self._nc is not None and not self._closed:
            self._closed = True
            await self._nc.close()

    async def _kv(self) -> Any:
        if self._kv_handle is not None:
            return self._kv_handle
        async with self._lock:
            if self._kv_handle is None:
                if self._nc is None:
                    self._nc = await nats.connect(self._url)
                js = self._nc.jetstream()
                try:
                    self._kv_handle = await js.key_value(self._bucket)
                except nats_errors.BucketNotFoundError:
                    self._kv_handle = await js.create_key_value(
                        bucket=self._bucket,
                        history=self._keep_last or _MAX_HISTORY,
                        ttl=self._ttl,
                        description="daimon checkpoints",
                    )
        return self._kv_handle

    async def _acquire(self, run_id: str, owner: str) -> Lease:
        kv, key = await self._kv(), _key(run_id, "lease")
        now = _base.now_ms()
        lease = Lease(run_id=run_id, owner=owner, token=0, expires_at=now + self._lease_ms)
        data = _base.encode_lease(lease)
        try:
            revision = await kv.create(key, data)  # a run never leased: one request
        except nats_errors.KeyWrongLastSequenceError:
            revision = await self._take_over(kv, key, lease, now)
        self._lease_revisions[run_id] = int(revision)
        return dataclasses.replace(lease, token=int(revision))

    async def _take_over(self, kv: Any, key: str, lease: Lease, now: int) -> int:
        """Replace the run's lease by ``lease`` if it ended; its new revision."""
        entry = await _entry(kv, key)
        current = _base.decode_lease(entry.value or b"", lease.run_id) if entry else None
        if current is not None and current.expires_at > now:
            raise _base.leased(lease.run_id, current)
        try:
            if entry is None:  # released by a purge meanwhile
                return int(await kv.create(key, _base.encode_lease(lease)))
            return int(await kv.update(key, _base.encode_lease(lease), last=entry.revision))
        except nats_errors.KeyWrongLastSequenceError:  # another process took it first
            rival = await _entry(kv, key)
            held = _base.decode_lease(rival.value or b"", lease.run_id) if rival else None
            raise _base.leased(lease.run_id, held, lease) from None

    async def _renew(self, lease: Lease) -> Lease:
        kv, key = await self._kv(), _key(lease.run_id, "lease")
        renewed = dataclasses.replace(lease, expires_at=_base.now_ms() + self._lease_ms)
        last = self._lease_revisions.get(lease.run_id, lease.token)
        try:
            revision = await kv.update(key, _base.encode_lease(renewed), last=last)
        except nats_errors.KeyWrongLastSequenceError:
            raise _base.lease_lost(lease.run_id, f"(token {lease.token}) was taken over") from None
        self._lease_revisions[lease.run_id] = int(revision)
        return renewed

    async def _release(self, lease: Lease) -> None:
        kv, key = await self._kv(), _key(lease.run_id, "lease")
        last = self._lease_revisions.pop(lease.run_id, lease.token)
        ended = _base.encode_lease(dataclasses.replace(lease, expires_at=0))
        with contextlib.suppress(nats_errors.KeyWrongLastSequenceError):  # taken over meanwhile
            await kv.update(key, ended, last=last)

    async def save(self, state: CheckpointState) -> None:
        """Store ``state`` as the next checkpoint of its run."""
        run_id = state.run_id
        key = _key(run_id)
        kv = await self._kv()
        self.fence(run_id)  # a lease ended by this clock; the revision check below does the rest
        expected = self._seen.get(run_id)
        seq = (expected or 0) + 1
        record = _base.encode(state, seq)
        revision = self._revisions.get(run_id)
        try:
            if revision is None:
                new_revision = await kv.create(key, record)
            else:
                try:
                    new_revision = await kv.update(key, record, last=revision)
                except nats_errors.KeyWrongLastSequenceError:
                    if await self._alive(kv, key):
                        raise
                    new_revision = await kv.create(key, record)  # deleted or expired meanwhile
        except nats_errors.KeyWrongLastSequenceError:
            raise _base.conflict(run_id, expected, None) from None
        self._seen[run_id] = seq
        self._revisions[run_id] = int(new_revision)

    @staticmethod
    async def _alive(kv: Any, key: str) -> bool:
        try:
            await kv.get(key)
        except nats_errors.KeyNotFoundError:
            return False
        return True

    async def load(self, run_id: str) -> CheckpointState | None:
        """The newest intact checkpoint of the run, or ``None`` when it has none."""
        key = _key(run_id)
        kv = await self._kv()
        try:
            entry = await kv.get(key)
        except nats_errors.KeyNotFoundError:
            self._seen.pop(run_id, None)
            self._revisions.pop(run_id, None)
            return None
        self._revisions[run_id] = int(entry.revision)
        try:
            record = _base.decode(entry.value, run_id=run_id)
        except CheckpointCorruptError as exc:
            _log.warning("skipping a damaged checkpoint: %s", exc)
            records, damaged = await self._entries(key, run_id)
            newer = sum(1 for r in damaged if r > (records[-1][0] if records else 0))
            self._seen[run_id] = (records[-1][1].seq if records else 0) + newer
            now = _base.now_ms()
            if records and not _base.expired(records[-1][1], self._ttl, now):
                return records[-1][1].state
            raise CheckpointCorruptError(f"run {run_id!r} has no intact checkpoint: {exc}") from exc
        self._seen[run_id] = record.seq
        return None if _base.expired(record, self._ttl, _base.now_ms()) else record.state

    async def _entries(
        self, key: str, run_id: str
    ) -> tuple[list[tuple[int, _base.Record]], list[int]]:
        """The key's intact records with their revisions, oldest first, and damaged revisions.

        Reads the key's stored revisions one request at a time (next message on the subject):
        nats-py's ``kv.history()`` watches the bucket and, under load, can stop early.
        """
        js = self._nc.jetstream()
        stream, subject = f"KV_{self._bucket}", f"$KV.{self._bucket}.{key}"
        records: list[tuple[int, _base.Record]] = []
        damaged: list[int] = []
        seq = 1
        while True:
            try:
                msg = await js.get_msg(stream, seq=seq, subject=subject, next=True)
            except nats_errors.NotFoundError:
                return records, damaged
            revision = int(msg.seq or seq)
            seq = revision + 1
            if _is_marker(msg.headers):  # a delete or purge: what came before is gone
                records, damaged = [], []
                continue
            try:
                records.append((revision, _base.decode(msg.data or b"", run_id=run_id)))
            except CheckpointCorruptError as exc:
                _log.warning("skipping a damaged checkpoint: %s", exc)
                damaged.append(revision)

    async def history(self, run_id: str) -> list[CheckpointState]:
        """Every intact, unexpired checkpoint of the run, newest last."""
        return [r.state for r in await self._intact(run_id)]

    async def _intact(self, run_id: str) -> list[_base.Record]:
        await self._kv()
        records, _ = await self._entries(_key(run_id), run_id)
        now = _base.now_ms()
        kept = [r for _, r in records if not _base.expired(r, self._ttl, now)]
        return kept[-(self._keep_last or 0) :]

    async def list_runs(self) -> list[str]:
        """Ids of the runs that have checkpoints, sorted."""
        kv = await self._kv()
        # The stream's own count per subject, in one request: nats-py's kv.keys() watches the
        # bucket and, under load, can stop before it has seen every key.
        prefix = f"$KV.{self._bucket}."
        info = await self._nc.jetstream().stream_info(
            f"KV_{self._bucket}", subjects_filter=f"{prefix}run.>"
        )
        runs: list[str] = []
        for subject in info.state.subjects or {}:
            key = subject.removeprefix(prefix)
            try:
                await kv.get(key)  # a deleted run leaves a marker on its subject
            except (nats_errors.KeyNotFoundError, nats_errors.KeyDeletedError):
                continue
            runs.append(_run_id(key))
        return sorted(runs)

    async def delete(self, run_id: str) -> None:
        """Remove every checkpoint of the run and its lease (nothing happens if it has none).

        The id can be run again at once; a holder of the purged lease can no longer renew it.
        """
        kv = await self._kv()
        await kv.purge(_key(run_id))
        await kv.purge(_key(run_id, "lease"))
        self._seen.pop(run_id, None)
        self._revisions.pop(run_id, None)
        self._lease_revisions.pop(run_id, None)

    async def fork(self, run_id: str, new_run_id: str) -> None:
        """Copy the run's intact checkpoints to a new run.

        The copy is written one checkpoint at a time; a save to the new run meanwhile fails.

        Raises:
            DaimonError: ``run_id`` has no checkpoint, or ``new_run_id`` already has some.
        """
        target = _key(new_run_id)
        records = await self._intact(run_id)
        if not records:
            raise DaimonError(f"cannot fork run {run_id!r}: it has no intact checkpoint")
        kv = await self._kv()
        revision: int | None = None
        for r in records:
            data = _base.encode(_base.rebind(r.state, new_run_id), r.seq, r.saved_at)
            try:
                if revision is None:
                    revision = int(await kv.create(target, data))
                else:
                    revision = int(await kv.update(target, data, last=revision))
            except nats_errors.KeyWrongLastSequenceError:
                raise DaimonError(
                    f"cannot fork into run {new_run_id!r}: it already has checkpoints"
                ) from None
        self._seen[new_run_id] = records[-1].seq
        self._revisions[new_run_id] = revision or 0

    async def prune(self) -> int:
        """Nothing to do: the server applies ``keep_last`` and ``ttl`` itself.

        Returns:
            How many checkpoints were deleted: always 0.
        """
        await self._kv()
        return 0


async def _entry(kv: Any, key: str) -> Any:
    """The key's newest entry, or ``None`` when it has none (never written, or deleted)."""
    try:
        return await kv.get(key)
    except nats_errors.KeyNotFoundError:  # KeyDeletedError is one too
        return None


def _is_marker(headers: dict[str, str] | None) -> bool:
    """Whether a stored KV message is a delete, purge or server expiry marker."""
    return headers is not None and ("KV-Operation" in headers or "Nats-Marker-Reason" in headers)
