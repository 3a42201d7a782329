"""SIGKILL a run with tools at random points: resuming always completes it, and no tool call
whose result had been checkpointed ever runs again."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from daimon.checkpoint import FileCheckpoint
from daimon.core import Role

WORKER = Path(__file__).with_name("resumable_worker.py")
KILLS = 50
ANSWER = "S1 S2 S3 S4 S5 S6 S7"


def saved_call_ids(directory: Path, run_id: str) -> set[str]:
    """Ids of the calls whose results the run's latest checkpoint holds."""
    state = asyncio.run(FileCheckpoint(directory).load(run_id))
    if state is None:
        return set()
    done = {m.tool_call_id for m in state.messages if m.role is Role.TOOL and m.tool_call_id}
    return done | set(state.completed_tool_results)


def starts(log: Path) -> list[tuple[int, str]]:
    rows = [line.split() for line in log.read_text().splitlines()] if log.exists() else []
    return [(int(generation), step) for generation, _, step in rows]


def read_line(process: subprocess.Popen[str]) -> str:
    """One line of the child's stdout, read unbuffered so communicate() later misses nothing."""
    assert process.stdout is not None
    fd, line = process.stdout.fileno(), b""
    while not line.endswith(b"\n"):
        chunk = os.read(fd, 1)
        if not chunk:
            break
        line += chunk
    return line.decode().strip()


def start(directory: Path, log: Path, run_id: str, generation: int) -> subprocess.Popen[str]:
    args = [sys.executable, str(WORKER), str(directory), str(log), run_id, str(generation)]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.timeout(600)  # 50 kills and ~70 interpreter start-ups: minutes on a loaded machine
def test_random_sigkills_never_lose_the_run_or_repeat_saved_work(tmp_path: Path) -> None:
    started: list[subprocess.Popen[str]] = []
    try:
        _kill_at_random(tmp_path, started)
    finally:  # never leave a worker (or its pipes) behind, whatever happened
        for process in started:
            if process.poll() is None:
                process.kill()
            process.communicate()


def _kill_at_random(tmp_path: Path, started: list[subprocess.Popen[str]]) -> None:
    rng = random.Random(20261130)
    directory = tmp_path / "checkpoints"
    kills = rounds = 0
    while kills < KILLS:
        run_id, log = f"run-{rounds}", tmp_path / f"tools-{rounds}.log"
        saved_before: dict[int, set[str]] = {}
        generation = 0
        while True:  # kill this run at random points until a generation finishes it
            saved_before[generation] = saved_call_ids(directory, run_id)
            process = start(directory, log, run_id, generation)
            started.append(process)
            assert read_line(process) == "ready"
            time.sleep(rng.uniform(0.0, 0.12))
            if process.poll() is None and kills < KILLS:
                process.kill()
                kills += 1
                process.communicate(timeout=30)
                generation += 1
                continue
            out, err = process.communicate(timeout=60)
            assert process.returncode == 0, err
            assert out.strip() == ANSWER
            break
        executions = starts(log)
        assert {step for _, step in executions} == {f"s{i}" for i in range(1, 8)}
        for gen, step in executions:
            assert f"call-{step}" not in saved_before[gen], (
                f"{run_id}: {step} ran again in generation {gen} after its result was saved"
            )
        # Once finished, running again returns the answer and repeats nothing.
        again = start(directory, log, run_id, generation + 1)
        started.append(again)
        out, _ = again.communicate(timeout=60)
        assert out.split()[1:] == ANSWER.split()
        assert len(starts(log)) == len(executions)
        rounds += 1
    assert kills == KILLS
