"""Real faults on the real dev server: workers SIGKILLed, the server killed, code changed.

Sized for a two-core machine: ``RUNS`` runs while the worker processes are SIGKILLed ``KILLS``
times (the issue's 200 and 20).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import defaultdict
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import Client

from daimon.temporal import (
    ActivityOptions,
    RunFailedError,
    TemporalRun,
    connect,
    serving,
    start_run,
)

from ._agents import refunds
from ._server import DevServer, WorkerProcess

RUNS = 200
KILLS = 20
SRC = Path(__file__).parents[2] / "src"
# Quick to notice a dead worker: heartbeats every second, retries after a fifth of one.
QUICK = ActivityOptions(heartbeat_timeout=3, initial_interval=0.2, max_interval=1)


def _lines(log: Path) -> list[list[str]]:
    return [line.split() for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.timeout(600)
async def test_runs_complete_while_workers_are_sigkilled_and_no_completed_call_runs_again(
    client: Client, temporal_server: DevServer, task_queue: str, tmp_path: Path
) -> None:
    log = tmp_path / "log"
    env = {
        **os.environ,
        "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "DAIMON_TEMPORAL_LOG": str(log),
        "DAIMON_TEMPORAL_TOOL_SECONDS": "0.3",
    }
    workers = [WorkerProcess(temporal_server.address, task_queue, env) for _ in range(2)]
    for worker in workers:
        await worker.start()
    try:
        runs = [
            await start_run(
                client,
                "arithmetic",
                f"add {i} {i * 7}",
                task_queue=task_queue,
                options=QUICK,
                task_timeout=timedelta(seconds=2),
            )
            for i in range(RUNS)
        ]
        waiting = [asyncio.ensure_future(run.result()) for run in runs]
        for kill in range(KILLS):  # alternate: one worker dies mid-call while the other works
            worker = workers[kill % 2]
            seen = len(_lines(log))
            async with asyncio.timeout(60):
                while len(_lines(log)) < seen + 3 and not all(w.done() for w in waiting):  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
            worker.kill()
            await worker.start()
        responses = await asyncio.wait_for(asyncio.gather(*waiting), 300)
    finally:
        for worker in workers:
            worker.kill()
    assert [r.text for r in responses] == [f"the sum is {i * 8}" for i in range(RUNS)]
    retried = await _no_completed_call_ran_again(runs, _lines(log))
    assert retried > 0  # the kills hit calls in flight


async def _no_completed_call_ran_again(runs: list[TemporalRun], lines: list[list[str]]) -> int:
    """Each tool call's completed attempt (from history) ran once, and no attempt ran after it.

    Returns how many calls were retried (their worker died during an attempt).
    """
    retried = 0
    attempts: dict[str, list[int]] = defaultdict(list)
    for _tool, key, attempt, _pid in lines:
        attempts[key].append(int(attempt))
    for run in runs:
        history = await run.handle.fetch_history()
        started = {
            e.event_id: e.activity_task_started_event_attributes.attempt
            for e in history.events
            if e.HasField("activity_task_started_event_attributes")
        }
        tools = {
            e.event_id
            for e in history.events
            if e.HasField("activity_task_scheduled_event_attributes")
            and e.activity_task_scheduled_event_attributes.activity_type.name == "daimon.tool_call"
        }
        (completed,) = [
            started[e.activity_task_completed_event_attributes.started_event_id]
            for e in history.events
            if e.HasField("activity_task_completed_event_attributes")
            and e.activity_task_completed_event_attributes.scheduled_event_id in tools
        ]
        ran = attempts[f"{run.workflow_id}:call-1"]
        assert ran.count(completed) == 1, (run.workflow_id, ran, completed)
        assert max(ran) == completed, (run.workflow_id, ran, completed)
        retried += completed > 1
    return retried


@pytest.mark.timeout(300)
async def test_runs_complete_when_the_server_is_killed_and_restarted(
    tmp_path: Path, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DAIMON_TEMPORAL_TOOL_SECONDS", "1")
    log = tmp_path / "log"
    monkeypatch.setenv("DAIMON_TEMPORAL_LOG", str(log))
    server = DevServer(db=tmp_path / "temporal.db")
    server.start()
    try:
        client = await connect(server.address)
        from ._agents import arithmetic

        async with serving(client, [arithmetic], task_queue=task_queue):
            runs = [
                await start_run(
                    client, arithmetic, f"add {i} 1", task_queue=task_queue, options=QUICK
                )
                for i in range(20)
            ]
            # Killed when the first tool logs: no run can have finished then (each needs one
            # more model call after its tool's result is recorded), so every run spans the kill.
            async with asyncio.timeout(60):
                while not _lines(log):  # noqa: ASYNC110 - polls the tools' log
                    await asyncio.sleep(0.05)
            server.kill()
            server.start()
            client = await connect(server.address)
            responses = [
                await asyncio.wait_for(TemporalRun.get(client, run.workflow_id).result(), 120)
                for run in runs
            ]
    finally:
        server.kill()
    assert [r.text for r in responses] == [f"the sum is {i + 1}" for i in range(20)]


async def test_an_agent_changed_between_deploys_fails_with_a_determinism_error(
    client: Client, task_queue: str
) -> None:
    async with serving(client, [refunds], task_queue=task_queue, max_cached_workflows=0):
        run = await start_run(client, refunds, "refund order 5", task_queue=task_queue)
        async with asyncio.timeout(30):
            while (status := await run.status()).phase != "awaiting_approval":  # noqa: ASYNC110
                await asyncio.sleep(0.05)
    # The next deploy's agent has a system prompt: its model call is not the one in history.
    changed = refunds.replace(system_prompt="Refund only orders under 100 dollars.")
    async with serving(client, {"refunds": changed}, task_queue=task_queue):
        with contextlib.suppress(Exception):  # the update fails with the workflow: see result()
            await run.approve(status.pending_approvals[0].id)
        with pytest.raises(RunFailedError) as failed:
            await asyncio.wait_for(run.result(), 60)
    assert "Nondeterminism" in str(failed.value)
    assert "model-1-" in str(failed.value)  # the call whose input changed
