"""AG-UI runs on ``daimon worker`` processes: the worker running one is SIGKILLed mid-run.

The replicas and workers are those of :mod:`test_workers` (a Redis broker, the PostgreSQL store,
the agent checkpointed there, its ``once`` tool writing a ledger). Another worker takes the run
over from its checkpoint; the client's stream stays valid AG-UI and the tool runs once.
"""

from __future__ import annotations

import json
import signal
import uuid
from pathlib import Path
from typing import Any

import pytest
from ag_ui_validate.pytest_plugin import assert_valid_agui
from tests.server.replicas.test_workers import ALL_TICKS, Reader, fleet

pytestmark = [
    pytest.mark.timeout(90),
    pytest.mark.service("postgres"),
    pytest.mark.service("redis"),
]


def run_input(text: str) -> dict[str, Any]:
    return {
        "threadId": f"t-{uuid.uuid4().hex[:8]}",
        "runId": f"run-{uuid.uuid4().hex[:8]}",
        "messages": [{"id": "m1", "role": "user", "content": text}],
        "state": {},
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }


def events_of(reader: Reader) -> list[dict[str, Any]]:
    return [json.loads(frame.data) for frame in reader.frames]


def text_after(events: list[dict[str, Any]], count: int) -> bool:
    return sum(e["type"] == "TEXT_MESSAGE_CONTENT" for e in events) >= count


def test_a_worker_killed_mid_agui_run_the_other_takes_it_over_in_valid_agui(
    tmp_path: Path, postgres_url: str, redis_url: str, postgres_prefix: str
) -> None:
    with fleet(tmp_path, postgres_url, redis_url, postgres_prefix) as group:
        replica = group.replica()
        workers = {w.pid: w for w in (group.worker(), group.worker())}
        reader = Reader(f"{replica.url}/agui", run_input("kill-agui"))
        reader.start()
        reader.wait_for(lambda frames: text_after([json.loads(f.data) for f in frames], 12))
        (note,) = group.notes()  # the tool ran, and the next turn streams
        workers[int(note.split()[1])].send_signal(signal.SIGKILL)
        reader.join(30)
        assert reader.error is None, f"{reader.error}\n{group.stderr()}"
        events = events_of(reader)
        assert_valid_agui(events)
        types = [e["type"] for e in events]
        assert types.count("RUN_STARTED") == 1 and types[-1] == "RUN_FINISHED", group.stderr()
        attempts = [e for e in events if e["type"] == "CUSTOM" and e["name"] == "daimon.attempt"]
        assert len(attempts) == 1, types
        after = events.index(attempts[0])
        text = "".join(e["delta"] for e in events[after:] if e["type"] == "TEXT_MESSAGE_CONTENT")
        assert text == "".join(ALL_TICKS[10:])  # the lost turn again, whole, to the end
        assert [n.split()[0] for n in group.notes()] == ["kill-agui"]  # the tool ran once
