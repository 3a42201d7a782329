"""A worker process for the PostgreSQL chaos test: ``python pg_chaos_worker.py CONFIG_JSON``.

It runs :func:`daimon.distributed.run_worker` on a :class:`PostgresBroker` with an agent whose
checkpoints are in a :class:`PostgresCheckpoint` on the same (private, chaotic) PostgreSQL. The
agent's FunctionModel calls two tools per run, both in one turn (even-numbered runs) or one per
turn (odd ones): ``notify`` (``effect="once"``) and ``charge`` (``effect="keyed"``: it calls a
deduping card service, a table with a unique key on the shared PostgreSQL, which no chaos
touches, with ``ctx.idempotency_key``).

Every event goes to one log file shared by the workers, each line one ``write`` and an
``fsync`` (``O_APPEND``: lines of concurrent processes never interleave, and their order in the
file is the order they happened in):

* ``claim|done|refused|fail|release <task> <attempt> <pid>``: the broker's side, as _procs.py;
* ``tstart|tend <run> <call> <execution> <pid>``: a tool execution starts, and ends (just before
  it returns its result); an execution's id is ``<pid>.<n>``, unique, and its result reads
  ``<tool>@<execution>``, so the run's messages tell which execution was recorded;
* ``saved <run> <call> <execution> <pid>``: a checkpoint save holding that execution's result
  returned (PostgreSQL acknowledged it).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import sys
from collections.abc import Iterator
from typing import Any

import psycopg
from _procs import Log, LoggedBroker  # a script beside this one, as this one runs

from daimon import Agent, ChatRequest, ChatResponse, Role, RunContext, ToolCall, tool
from daimon.checkpoint.postgres import PostgresCheckpoint
from daimon.core import CheckpointState
from daimon.distributed import broker_from_url, run_worker
from daimon.models import FunctionModel

CALLS = (("notify", "c-notify"), ("charge", "c-charge"))
"""Each run's calls: tool, call id (the same on every attempt: the model is a function)."""


class SyncedLog(Log):
    """One line per event, each written and fsync'd before the caller goes on."""

    def write(self, *words: object) -> None:
        os.write(self.fd, (" ".join(map(str, (*words, os.getpid()))) + "\n").encode())
        os.fsync(self.fd)


def results_in(state: CheckpointState) -> Iterator[tuple[str, str]]:
    """``(call id, execution)`` of each tool result the state holds (done turns and this one)."""
    outputs = [(m.tool_call_id, m.text) for m in state.messages if m.role is Role.TOOL]
    outputs += [(k, v.content) for k, v in state.completed_tool_results.items()]
    for call_id, text in outputs:
        tool_name, at, execution = text.partition(" ")[0].partition("@")
        if call_id and at and tool_name:
            yield call_id, execution.partition(" ")[0]


class LoggedCheckpoint(PostgresCheckpoint):
    """A PostgresCheckpoint whose ``save`` logs each tool result it stored (once per process)."""

    log: SyncedLog
    logged: set[tuple[str, str, str]]

    async def save(self, state: CheckpointState) -> None:
        await super().save(state)
        for call_id, execution in results_in(state):
            if (entry := (state.run_id, call_id, execution)) not in self.logged:
                self.logged.add(entry)
                self.log.write("saved", *entry)


def planner(request: ChatRequest) -> ChatResponse:
    """Both calls in one turn (even runs) or one per turn (odd); then the results, joined."""
    text = next(m.text for m in request.messages if m.role is Role.USER)
    done = {m.tool_call_id: m.text for m in request.messages if m.role is Role.TOOL}
    todo = [ToolCall(id=c, name=t, arguments={"order": text}) for t, c in CALLS if c not in done]
    if todo:
        one_turn = int(text.rpartition("-")[2]) % 2 == 0
        return ChatResponse.tool_use(*(todo if one_turn else todo[:1]))
    return ChatResponse.reply(" | ".join(done[c] for _, c in CALLS))


async def charge_once(db: Any, table: str, ctx: RunContext, execution: str) -> str:
    """Send the charge to the card service; the execution whose charge it applied for the key."""
    query = (
        f"WITH received AS (INSERT INTO {table}_received (key, run, execution) "
        "VALUES (%(key)s, %(run)s, %(execution)s)), "
        f"applied AS (INSERT INTO {table}_applied (key, run, execution) "
        "VALUES (%(key)s, %(run)s, %(execution)s) ON CONFLICT (key) DO NOTHING "
        "RETURNING execution) "
        f"SELECT execution FROM applied UNION ALL SELECT execution FROM {table}_applied "
        "WHERE key = %(key)s"
    )
    params = {"key": ctx.idempotency_key, "run": ctx.run_id, "execution": execution}
    cursor = await db.execute(query, params)
    row = await cursor.fetchone()
    assert row is not None
    return str(row[0])


def build_agent(config: dict[str, Any], log: SyncedLog, db: Any) -> Agent:
    low, high = config["tool_time"]
    table = config["table"]
    numbers = itertools.count(1)

    async def execute(ctx: RunContext, name: str) -> str:
        execution = f"{os.getpid()}.{next(numbers)}"
        log.write("tstart", ctx.run_id, ctx.call_id, execution)
        await asyncio.sleep(random.uniform(low, high))
        applied = ""
        if name == "charge":  # the card service: every request kept, each key applied once
            applied = " applied:" + await charge_once(db, table, ctx, execution)
        log.write("tend", ctx.run_id, ctx.call_id, execution)
        return f"{name}@{execution}{applied}"

    @tool(effect="once")
    async def notify(ctx: RunContext, order: str) -> str:
        """Tell the customer (must never be sent twice)."""
        return await execute(ctx, "notify")

    @tool(effect="keyed")
    async def charge(ctx: RunContext, order: str) -> str:
        """Charge the card through a service that applies each key once."""
        return await execute(ctx, "charge")

    store = config["checkpoint"]
    checkpoint = LoggedCheckpoint(store["url"], prefix=store["prefix"], lease=store["lease"])
    checkpoint.log, checkpoint.logged = log, set()
    return Agent(FunctionModel(planner), tools=[notify, charge], checkpoint=checkpoint)


async def main(config: dict[str, Any]) -> None:
    log = SyncedLog(config["log"])
    db = await psycopg.AsyncConnection.connect(config["cards"], autocommit=True)
    agent = build_agent(config, log, db)
    broker = broker_from_url(config["url"], **config.get("options", {}))
    log.write("start", "-", 0)
    try:
        await run_worker(
            agent,
            LoggedBroker(broker, log),
            concurrency=config.get("concurrency", 8),
            grace=config.get("grace", 5.0),
            retry_delay=0.0,
            poll=0.2,
        )
    finally:
        await broker.aclose()
        await agent.checkpoint.aclose()  # type: ignore[union-attr]
        await db.close()
    log.write("exit", "-", 0)


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
