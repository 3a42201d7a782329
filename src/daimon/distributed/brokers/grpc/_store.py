"""The broker service's durable queue: tasks and their records in one SQLite file.

Every call is one transaction on one connection, run on one thread, so a claim and a settle
never interleave; with ``synchronous=FULL`` (the default) a submit is on disk before it returns.
A task's row holds its payload, its :class:`~daimon.kit.task_records.TaskRecord` (versioned
JSON) and ``visible_at``: when it may be delivered next (``NULL`` once it has ended). A running
task's ``visible_at`` is its lease deadline, so a task whose worker died is delivered again.
Times are the server's wall clock.
"""

from __future__ import annotations

import dataclasses
import sqlite3
import time
from pathlib import Path

from daimon.core.codec import dumps, loads
from daimon.core.errors import BuilderError
from daimon.core.results import ApprovalDecision
from daimon.core.tasks import AgentTask, DeadLetter, TaskPause, TaskResult, TaskStatus
from daimon.kit import task_records as records
from daimon.kit.task_records import TaskRecord, dead_letter_attempts, dead_letter_task

__all__ = ("SqliteTaskQueue",)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS daimon_tasks (
    queue TEXT NOT NULL,
    task_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    payload TEXT NOT NULL,
    record TEXT NOT NULL,
    visible_at REAL,
    PRIMARY KEY (queue, task_id)
);
CREATE INDEX IF NOT EXISTS daimon_tasks_visible
    ON daimon_tasks (queue, visible_at, seq) WHERE visible_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS daimon_dead (
    queue TEXT NOT NULL,
    task_id TEXT NOT NULL,
    error TEXT NOT NULL,
    at REAL NOT NULL,
    PRIMARY KEY (queue, task_id)
);
"""

_SYNC = ("OFF", "NORMAL", "FULL")


class SqliteTaskQueue:
    """Queues and task records in SQLite; not thread-safe: call it from one thread."""

    def __init__(self, path: str | Path, *, synchronous: str = "FULL") -> None:
        if synchronous.upper() not in _SYNC:
            raise BuilderError(
                f"synchronous must be one of {', '.join(_SYNC)}, got {synchronous!r}"
            )
        self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={synchronous.upper()}")
        self._db.executescript(_SCHEMA)
        (seq,) = self._db.execute("SELECT COALESCE(MAX(seq), 0) FROM daimon_tasks").fetchone()
        self._seq = int(seq)

    def close(self) -> None:
        """Close the database."""
        self._db.close()

    def _load(self, queue: str, task_id: str) -> tuple[TaskRecord, str]:
        row = self._db.execute(
            "SELECT record, payload FROM daimon_tasks WHERE queue = ? AND task_id = ?",
            (queue, task_id),
        ).fetchone()
        if row is None:
            raise KeyError(task_id)
        return loads(row[0], TaskRecord), row[1]

    def _store(self, queue: str, task_id: str, rec: TaskRecord, visible_at: float | None) -> None:
        self._db.execute(
            "UPDATE daimon_tasks SET record = ?, visible_at = ? WHERE queue = ? AND task_id = ?",
            (dumps(rec), visible_at, queue, task_id),
        )

    def _dead_letter(self, queue: str, task_id: str, error: str, now: float) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO daimon_dead (queue, task_id, error, at) VALUES (?, ?, ?, ?)",
            (queue, task_id, error, now),
        )

    def submit(self, queue: str, task: AgentTask) -> bool:
        """Queue ``task``; ``False`` when its id was known (nothing is written then)."""
        payload = dumps(task)
        if not task.task_id:
            raise BuilderError("a task id must not be empty")
        self._seq += 1
        cursor = self._db.execute(
            "INSERT OR IGNORE INTO daimon_tasks (queue, task_id, seq, payload, record, visible_at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (queue, task.task_id, self._seq, payload, dumps(TaskRecord()), time.time()),
        )
        return cursor.rowcount == 1

    def status(self, queue: str, task_id: str) -> TaskStatus:
        """Where the task is; :class:`KeyError` when unknown."""
        rec, _ = self._load(queue, task_id)
        return records.view(rec, time.time())

    def cancel(self, queue: str, task_id: str) -> bool:
        """Cancel a task that has not ended; :class:`KeyError` when unknown."""
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            rec, _ = self._load(queue, task_id)
            if not records.cancel(rec):
                return False
            self._store(queue, task_id, rec, None)
            return True

    def claim(self, queue: str, *, lease: float, max_deliver: int) -> AgentTask | None:
        """Start an attempt of the next visible task (its ``attempt`` set); ``None`` if none."""
        while True:
            with self._db:
                self._db.execute("BEGIN IMMEDIATE")
                now = time.time()
                row = self._db.execute(
                    "SELECT task_id, payload, record FROM daimon_tasks"
                    " WHERE queue = ? AND visible_at IS NOT NULL AND visible_at <= ?"
                    " ORDER BY visible_at, seq LIMIT 1",
                    (queue, now),
                ).fetchone()
                if row is None:
                    return None
                task_id, payload, text = row
                rec = loads(text, TaskRecord)
                outcome, value = records.begin(rec, now, lease, max_deliver)
                if outcome == "run":
                    self._store(queue, task_id, rec, now + lease)
                    return dataclasses.replace(loads(payload, AgentTask), attempt=int(value))
                if outcome == "busy":
                    self._store(queue, task_id, rec, now + value)
                else:  # skip (ended) or dead (attempts spent)
                    if outcome == "dead":
                        self._dead_letter(queue, task_id, rec.error or "", now)
                    self._store(queue, task_id, rec, None)

    def next_visible(self, queue: str) -> float | None:
        """When the next task of ``queue`` becomes visible (``None``: nothing queued)."""
        (at,) = self._db.execute(
            "SELECT MIN(visible_at) FROM daimon_tasks WHERE queue = ? AND visible_at IS NOT NULL",
            (queue,),
        ).fetchone()
        return None if at is None else float(at)

    def heartbeat(self, queue: str, task_id: str, attempt: int, *, lease: float) -> str:
        """Renew the lease: ``ok``, ``cancelled`` or ``lost``."""
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            rec, _ = self._load(queue, task_id)
            now = time.time()
            outcome = records.heartbeat(rec, attempt, now, lease)
            if outcome == "ok":
                self._store(queue, task_id, rec, now + lease)
            return outcome

    def settle(
        self,
        queue: str,
        task_id: str,
        attempt: int,
        action: str,
        *,
        max_deliver: int,
        result: TaskResult | None = None,
        error: str = "",
        delay: float = 0.0,
        paused: TaskPause | None = None,
    ) -> str:
        """End an attempt; its outcome (see :func:`daimon.kit.task_records.settle`)."""
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            rec, _ = self._load(queue, task_id)
            outcome = records.settle(
                rec, attempt, action, max_deliver, result=result, error=error, paused=paused
            )
            now = time.time()
            if outcome in ("requeued", "released"):
                self._store(queue, task_id, rec, now + (delay if outcome == "requeued" else 0.0))
            elif outcome in ("ok", "paused", "dead"):
                if outcome == "dead":
                    self._dead_letter(queue, task_id, rec.error or "", now)
                self._store(queue, task_id, rec, None)
            return outcome

    def decide(self, queue: str, task_id: str, decisions: dict[str, ApprovalDecision]) -> bool:
        """Queue a paused task again, its payload carrying ``decisions``; whether it was paused."""
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            rec, _ = self._load(queue, task_id)
            pause = records.decide(rec)
            if pause is None:
                return False
            self._db.execute(
                "UPDATE daimon_tasks SET payload = ? WHERE queue = ? AND task_id = ?",
                (records.resumed_payload(pause, decisions), queue, task_id),
            )
            self._store(queue, task_id, rec, time.time())
            return True

    def dead_letters(self, queue: str, limit: int = 100) -> list[DeadLetter]:
        """The oldest ``limit`` dead-lettered tasks of ``queue``, with why and attempts spent."""
        rows = self._db.execute(
            "SELECT d.task_id, d.error, d.at, t.payload, t.record FROM daimon_dead AS d"
            " LEFT JOIN daimon_tasks AS t ON t.queue = d.queue AND t.task_id = d.task_id"
            " WHERE d.queue = ? ORDER BY d.at, d.rowid LIMIT ?",
            (queue, limit),
        ).fetchall()
        out = []
        for task_id, error, at, payload, record in rows:
            attempts = dead_letter_attempts(str(error))
            if record is not None:
                rec = loads(record, TaskRecord)
                attempts = rec.attempt - rec.released
            out.append(
                DeadLetter(
                    task=dead_letter_task(payload or "", str(task_id)),
                    reason=str(error),
                    attempts=attempts,
                    dead_at=float(at),
                )
            )
        return out
