"""Checkpoints in a local folder: one folder per run, one file per checkpoint.

Standard library only. Every file is written whole (temp file, ``fsync``, link into place,
``fsync`` of the folder), so a crash leaves either the old checkpoint or the new one, and every
record carries a sha256 so a damaged file is detected instead of resumed from.

A run's lease is a file per generation, ``<run_id>/.lease-00000003``: a new holder creates the next
generation's file (only one can), a holder renews by replacing its own generation's file whole and
releases it by renaming it to ``.released-00000003``, and a holder whose next generation exists has
lost the lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import logging
import os
import re
import secrets
import shutil
import time
from pathlib import Path

from daimon.core.checkpoints import CheckpointState, Lease
from daimon.core.errors import CheckpointCorruptError, DaimonError, InvalidIdError
from daimon.kit import checkpoint_records as _base
from daimon.kit.checkpoint_records import BaseCheckpoint

__all__ = ("FileCheckpoint",)

_log = logging.getLogger("daimon.checkpoint")
_RECORD = re.compile(r"[0-9]{8,18}\.json")
_LEASE = re.compile(r"\.(lease|released)-([0-9]{8,18})")
_LEFTOVER_SECONDS = 600.0
"""Temporary files and folders older than this are a crash's leftovers; ``prune`` removes them."""
_NO_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV}


def _fsync_dir(path: Path) -> None:
    if os.name == "nt":  # Windows cannot open a folder to fsync it
        return
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _path(run_dir: Path, seq: int) -> Path:
    return run_dir / f"{seq:08d}.json"


def _lease_path(run_dir: Path, token: int) -> Path:
    return run_dir / f".lease-{token:08d}"


def _released_path(run_dir: Path, token: int) -> Path:
    return run_dir / f".released-{token:08d}"


def _lease_tokens(run_dir: Path) -> list[int]:
    """Generations of the run's lease files, held or released, oldest first."""
    return sorted(int(m[2]) for name in os.listdir(run_dir) if (m := _LEASE.fullmatch(name)))


def _read_lease(run_dir: Path, run_id: str, token: int) -> Lease | None:
    """The lease of generation ``token``; ``None`` when it is gone or unreadable (ended)."""
    try:
        data = _lease_path(run_dir, token).read_bytes()
    except FileNotFoundError:
        return None
    return _base.decode_lease(data, run_id)


def _write_lease(run_dir: Path, lease: Lease, *, new: bool) -> None:
    """Put ``lease`` in its generation's file: a new file (only one writer can), or replaced whole.

    A new file is written in place: a reader that finds it half written reads it as ended and
    tries the next generation, then backs off when it reads it again (see ``_take_lease``). No
    ``fsync``: a lease guards against other processes, which read the page cache; after a machine
    crash an empty or torn lease file reads as ended, as its holder is.

    Raises:
        FileExistsError: ``new`` and the generation's file exists: another holder took it.
    """
    final = _lease_path(run_dir, lease.token)
    data = _base.encode_lease(lease)
    if new:
        fd = os.open(
            final, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o644
        )
        try:
            os.write(fd, data)  # a few dozen bytes: one write
        finally:
            os.close(fd)
        return
    tmp = run_dir / f"{final.name}.{secrets.token_hex(6)}.tmp"
    try:
        tmp.write_bytes(data)
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)


def _write_new(path: Path, data: bytes, *, mtime_ms: int | None = None) -> None:
    """Write ``data`` to a new file at ``path`` and flush it to disk."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    if mtime_ms is not None:
        os.utime(path, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))


class FileCheckpoint(BaseCheckpoint):
    r"""Stores checkpoints as files under ``directory``: ``<run_id>/00000042.json``.

    A run id names a folder, so one that could escape ``directory`` raises
    :class:`~daimon.core.errors.BuilderError`: empty, ``.`` or ``..``, containing ``/``, ``\\`` or
    NUL, or absolute. Names starting with ``.`` are reserved for temporary files and refused too.

    ``load`` verifies each record's checksum: when the newest is damaged it falls back to the
    newest intact one (never a wrong state), and raises
    :class:`~daimon.core.errors.CheckpointCorruptError` when none is intact.

    ``save`` refuses (:class:`~daimon.core.errors.DaimonError`) to write over checkpoints this
    handle has not seen: ``load`` a run before continuing it from another handle or process.

    Args:
        directory: The folder holding every run; created by :meth:`setup` or the first save.
        keep_last: Keep at most this many checkpoints per run (``None``: all).
        ttl: Seconds a checkpoint is kept after it was saved (``None``: forever). Expired ones are
            never returned, and :meth:`prune` deletes them.
        lease: Seconds a run's lease lasts unless renewed (see :meth:`acquire`). Lease expiry is
            judged by wall-clock time, so processes sharing the folder need clocks in step.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        keep_last: int | None = None,
        ttl: float | None = None,
        lease: float = _base.DEFAULT_LEASE,
    ) -> None:
        super().__init__(keep_last=keep_last, ttl=ttl, lease=lease)
        self._root = Path(directory)

    @property
    def directory(self) -> Path:
        """The folder holding every run."""
        return self._root

    async def setup(self) -> None:
        """Create ``directory`` if it is missing."""
        await asyncio.to_thread(self._root.mkdir, parents=True, exist_ok=True)

    async def save(self, state: CheckpointState) -> None:
        """Store ``state`` as the next checkpoint of its run."""
        await asyncio.to_thread(self._save, state)

    async def load(self, run_id: str) -> CheckpointState | None:
        """The newest intact checkpoint of the run, or ``None`` when it has none."""
        return await asyncio.to_thread(self._load, run_id)

    async def history(self, run_id: str) -> list[CheckpointState]:
        """Every intact, unexpired checkpoint of the run, newest last."""
        records = await asyncio.to_thread(self._intact, run_id, self._run_dir(run_id))
        return [r.state for r in records]

    async def list_runs(self) -> list[str]:
        """Ids of the runs that have checkpoints, sorted."""
        return await asyncio.to_thread(self._list_runs)

    async def delete(self, run_id: str) -> None:
        """Remove every checkpoint of the run (nothing happens if it has none)."""
        await asyncio.to_thread(self._delete, run_id)

    async def fork(self, run_id: str, new_run_id: str) -> None:
        """Copy the run's intact checkpoints to a new run, all at once.

        Raises:
            DaimonError: ``run_id`` has no checkpoint, or ``new_run_id`` already has some.
        """
        await asyncio.to_thread(self._fork, run_id, new_run_id)

    async def prune(self) -> int:
        """Apply ``keep_last`` and ``ttl`` to every run, and clear crash leftovers.

        Returns:
            How many checkpoints were deleted.
        """
        return await asyncio.to_thread(self._prune)

    async def _acquire(self, run_id: str, owner: str) -> Lease:
        return await asyncio.to_thread(self._take_lease, run_id, owner)

    async def _renew(self, lease: Lease) -> Lease:
        return await asyncio.to_thread(self._extend_lease, lease)

    async def _release(self, lease: Lease) -> None:
        await asyncio.to_thread(self._end_lease, lease)

    # -- blocking part, run in a worker thread

    def _take_lease(self, run_id: str, owner: str) -> Lease:
        run_dir = self._run_dir(run_id)
        if not run_dir.is_dir():
            run_dir.mkdir(parents=True, exist_ok=True)
            _fsync_dir(self._root)
        tokens = _lease_tokens(run_dir)
        last = tokens[-1] if tokens else 0
        now = _base.now_ms()
        current = _read_lease(run_dir, run_id, last) if last else None  # None: released or ended
        lease = Lease(run_id=run_id, owner=owner, token=last + 1, expires_at=now + self._lease_ms)
        if current is not None and current.expires_at > now:
            raise _base.leased(run_id, current, lease)
        try:
            _write_lease(run_dir, lease, new=True)
        except FileExistsError:  # another process took this generation first
            raise _base.leased(run_id, _read_lease(run_dir, run_id, lease.token), lease) from None
        if last:
            # Its holder may have renewed it between our read and our write: then it lives on,
            # and we back off (a holder renews first, then checks that no next generation exists).
            current = _read_lease(run_dir, run_id, last)
            if current is not None and current.expires_at > _base.now_ms():
                _lease_path(run_dir, lease.token).unlink(missing_ok=True)
                raise _base.leased(run_id, current, lease)
            for old in tokens:
                _lease_path(run_dir, old).unlink(missing_ok=True)
                _released_path(run_dir, old).unlink(missing_ok=True)
        return lease

    def _extend_lease(self, lease: Lease) -> Lease:
        run_dir = self._run_dir(lease.run_id)
        lost = _base.lease_lost(lease.run_id, f"(generation {lease.token}) was taken over")
        if _lease_path(run_dir, lease.token + 1).exists():
            raise lost
        renewed = dataclasses.replace(lease, expires_at=_base.now_ms() + self._lease_ms)
        try:
            _write_lease(run_dir, renewed, new=False)
        except FileNotFoundError:  # the run was deleted
            raise lost from None
        if _lease_path(run_dir, lease.token + 1).exists():  # taken over while we wrote
            raise lost
        return renewed

    def _end_lease(self, lease: Lease) -> None:
        run_dir = self._run_dir(lease.run_id)
        if _lease_path(run_dir, lease.token + 1).exists():  # taken over after it expired
            return
        # A rename to a new name: no data to write, and no flush as a replace would cause.
        with contextlib.suppress(FileNotFoundError):  # the run was deleted meanwhile
            os.rename(_lease_path(run_dir, lease.token), _released_path(run_dir, lease.token))

    def _run_dir(self, run_id: str) -> Path:
        _base.check_run_id(run_id)
        if (
            run_id.startswith(".")
            or any(c in run_id for c in "/\\\0")
            or os.path.isabs(run_id)
            or len(run_id.encode("utf-8")) > 200
        ):
            raise InvalidIdError("run", run_id, "it cannot name a folder safely")
        return self._root / run_id

    @staticmethod
    def _seqs(run_dir: Path) -> list[int]:
        try:
            names = os.listdir(run_dir)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(int(name[:-5]) for name in names if _RECORD.fullmatch(name))

    def _save(self, state: CheckpointState) -> None:
        run_id = state.run_id
        run_dir = self._run_dir(run_id)
        expected = self._seen.get(run_id)
        data = _base.encode(state, (expected or 0) + 1)
        if not run_dir.is_dir():
            run_dir.mkdir(parents=True, exist_ok=True)
            _fsync_dir(self._root)
        lease = self.fence(run_id)
        if lease is not None and _lease_path(run_dir, lease.token + 1).exists():
            raise _base.lease_lost(run_id, f"(generation {lease.token}) was taken over")
        seqs = self._seqs(run_dir)
        found = seqs[-1] if seqs else None
        if found is not None and found != expected:
            raise _base.conflict(run_id, expected, found)
        seq = (expected or 0) + 1
        final = _path(run_dir, seq)
        try:
            self._publish(run_dir, final, data, run_id, expected)
        except FileNotFoundError:  # ``prune`` removed the folder while it was still empty
            run_dir.mkdir(parents=True, exist_ok=True)
            self._publish(run_dir, final, data, run_id, expected)
        if any(s > seq for s in self._seqs(run_dir)):  # a writer raced past us and pruned
            final.unlink(missing_ok=True)
            raise _base.conflict(run_id, expected, max(self._seqs(run_dir), default=None))
        self._seen[run_id] = seq
        if self._keep_last is not None:
            for old in self._seqs(run_dir)[: -self._keep_last]:
                (_path(run_dir, old)).unlink(missing_ok=True)

    def _publish(
        self, run_dir: Path, final: Path, data: bytes, run_id: str, expected: int | None
    ) -> None:
        """Put ``data`` at ``final`` whole, never replacing a file already there."""
        tmp = run_dir / f".{final.name}.{secrets.token_hex(6)}.tmp"
        try:
            _write_new(tmp, data)
            try:
                os.link(tmp, final)
            except OSError as exc:
                if isinstance(exc, FileExistsError) or final.exists():
                    raise _base.conflict(run_id, expected, int(final.stem)) from None
                if exc.errno not in _NO_LINKS:
                    raise
                os.replace(tmp, final)  # a file system without hard links: check, then replace
        finally:
            tmp.unlink(missing_ok=True)
        _fsync_dir(run_dir)

    @staticmethod
    def _read(run_id: str, run_dir: Path, seq: int) -> _base.Record | None:
        """The verified record, or ``None`` when it is gone (pruned meanwhile).

        Raises:
            CheckpointCorruptError: the file is damaged.
        """
        try:
            data = (_path(run_dir, seq)).read_bytes()
        except FileNotFoundError:
            return None
        return _base.decode(data, run_id=run_id, seq=seq)

    def _intact(self, run_id: str, run_dir: Path) -> list[_base.Record]:
        """The run's intact, unexpired records, oldest first; damaged ones are logged."""
        now = _base.now_ms()
        records: list[_base.Record] = []
        for seq in self._seqs(run_dir):
            try:
                record = self._read(run_id, run_dir, seq)
            except CheckpointCorruptError as exc:
                _log.warning("skipping a damaged checkpoint: %s", exc)
                continue
            if record is not None and not _base.expired(record, self._ttl, now):
                records.append(record)
        return records

    def _load(self, run_id: str) -> CheckpointState | None:
        run_dir = self._run_dir(run_id)
        seqs = self._seqs(run_dir)
        if seqs:
            self._seen[run_id] = seqs[-1]
        else:
            self._seen.pop(run_id, None)
        now = _base.now_ms()
        damaged: CheckpointCorruptError | None = None
        for seq in reversed(seqs):
            try:
                record = self._read(run_id, run_dir, seq)
            except CheckpointCorruptError as exc:
                _log.warning("skipping a damaged checkpoint: %s", exc)
                damaged = damaged or exc
                continue
            if record is None:
                continue
            if _base.expired(record, self._ttl, now):
                break  # older ones are expired too
            return record.state
        if damaged is not None:
            raise CheckpointCorruptError(
                f"run {run_id!r} has no intact checkpoint: {damaged}"
            ) from damaged
        return None

    def _list_runs(self) -> list[str]:
        try:
            entries = list(os.scandir(self._root))
        except FileNotFoundError:
            return []
        return sorted(
            e.name
            for e in entries
            if not e.name.startswith(".") and e.is_dir() and self._seqs(Path(e.path))
        )

    def _delete(self, run_id: str) -> None:
        run_dir = self._run_dir(run_id)
        self._seen.pop(run_id, None)
        doomed = self._root / f".deleted-{secrets.token_hex(6)}"
        try:
            os.rename(run_dir, doomed)  # the run disappears at once, even if rmtree is cut short
        except FileNotFoundError:
            return
        _fsync_dir(self._root)
        shutil.rmtree(doomed, ignore_errors=True)

    def _fork(self, run_id: str, new_run_id: str) -> None:
        source, target = self._run_dir(run_id), self._run_dir(new_run_id)
        records = self._intact(run_id, source)[-(self._keep_last or 0) :]
        if not records:
            raise DaimonError(f"cannot fork run {run_id!r}: it has no intact checkpoint")
        if self._seqs(target):
            raise DaimonError(f"cannot fork into run {new_run_id!r}: it already has checkpoints")
        self._root.mkdir(parents=True, exist_ok=True)
        staging = self._root / f".fork-{secrets.token_hex(6)}"
        staging.mkdir()
        try:
            for r in records:
                data = _base.encode(_base.rebind(r.state, new_run_id), r.seq, r.saved_at)
                _write_new(_path(staging, r.seq), data, mtime_ms=r.saved_at)
            _fsync_dir(staging)
            try:
                os.rename(staging, target)  # fails unless target is missing or empty
            except OSError as exc:
                raise DaimonError(
                    f"cannot fork into run {new_run_id!r}: it already has checkpoints"
                ) from exc
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        _fsync_dir(self._root)
        self._seen[new_run_id] = records[-1].seq

    def _prune(self) -> int:
        try:
            entries = list(os.scandir(self._root))
        except FileNotFoundError:
            return 0
        now, removed = time.time(), 0
        for entry in entries:
            with contextlib.suppress(FileNotFoundError):  # removed by another process meanwhile
                if not entry.name.startswith("."):
                    removed += self._prune_run(Path(entry.path), now) if entry.is_dir() else 0
                elif entry.stat().st_mtime < now - _LEFTOVER_SECONDS:
                    shutil.rmtree(entry.path, ignore_errors=True)
        return removed

    def _prune_run(self, run_dir: Path, now: float) -> int:
        seqs = self._seqs(run_dir)
        doomed = set(seqs[: -self._keep_last] if self._keep_last is not None else ())
        for name in os.listdir(run_dir):
            path = run_dir / name
            with contextlib.suppress(FileNotFoundError):
                age = now - path.stat().st_mtime
                if name.endswith(".tmp") and age > _LEFTOVER_SECONDS:
                    path.unlink(missing_ok=True)
                elif _RECORD.fullmatch(name) and self._ttl is not None and age > self._ttl:
                    doomed.add(int(name[:-5]))
        for seq in doomed:
            _path(run_dir, seq).unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # only an empty folder goes
            run_dir.rmdir()
        return len(doomed)
