"""A worker process for the effect-ledger kill test: ``python effect_worker.py CONFIG_JSON``.

It runs :func:`daimon.distributed.run_worker` on a broker with an agent whose checkpoint store is
on the broker's own service (RedisCheckpoint on Redis, NatsKVCheckpoint on NATS). The agent's
FunctionModel calls three tools per run, all in one turn (even-numbered runs) or one per turn
(odd ones): ``lookup`` (repeatable), ``notify`` (``once``) and ``charge`` (``keyed``: it calls
a deduping card service, a PostgreSQL table with a unique key, with ``ctx.idempotency_key``).

Everything goes to one log file shared by the workers, one ``write`` and an ``fsync`` per line
(``O_APPEND``: lines of concurrent processes never interleave, and their order in the file is
the order they happened in):

* ``claim|done|refused|fail|release <task> <attempt> <pid>``: the broker's side, as _procs.py;
* ``tstart|tend <run> <call> <execution> <pid>``: a tool execution starts, and ends (the line
  just before it returns its result); an execution's id is ``<pid>.<n>``, unique, and its
  result reads ``<tool>@<execution>``, so the run's messages tell which execution was recorded;
* ``saved <run> <call> <execution> <pid>``: a checkpoint save holding that execution's result
  returned (the store accepted it).
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
from daimon.checkpoint import NatsKVCheckpoint, PostgresCheckpoint, RedisCheckpoint
from daimon.core import CheckpointState
from daimon.distributed import broker_from_url, run_worker
from daimon.models import FunctionModel

CALLS = (("lookup", "c-lookup"), ("notify", "c-notify"), ("charge", "c-charge"))
"""Each run's calls: tool, call id (the same on every attempt: the model is a function); a
config's ``tools`` may name fewer."""


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
            yield call_id, execution


def logged_store(base: type[Any], log: SyncedLog) -> type[Any]:
    """``base`` whose ``save`` logs each tool result it stored, once per process."""
    logged: set[tuple[str, str, str]] = set()

    class Logged(base):  # type: ignore[misc]
        async def save(self, state: CheckpointState) -> None:
            await super().save(state)
            for call_id, execution in results_in(state):
                if (entry := (state.run_id, call_id, execution)) not in logged:
                    logged.add(entry)
                    log.write("saved", *entry)

    return Logged


def planner(calls: tuple[tuple[str, str], ...]) -> Any:
    """A model making ``calls`` in one turn (even runs) or one per turn (odd); then the results."""

    def plan(request: ChatRequest) -> ChatResponse:
        text = next(m.text for m in request.messages if m.role is Role.USER)
        done = {m.tool_call_id: m.text for m in request.messages if m.role is Role.TOOL}
        todo = [
            ToolCall(id=c, name=t, arguments={"order": text}) for t, c in calls if c not in done
        ]
        if todo:
            one_turn = int(text.rpartition("-")[2]) % 2 == 0
            return ChatResponse.tool_use(*(todo if one_turn else todo[:1]))
        return ChatResponse.reply(" | ".join(done[c] for _, c in calls))

    return plan


def checkpoint_store(store: dict[str, Any], log: SyncedLog) -> Any:
    """The run's checkpoint store the config names (redis, nats or postgres), logging its saves."""
    options = {"lease": store["lease"]}
    if store["kind"] == "redis":
        return logged_store(RedisCheckpoint, log)(store["url"], prefix=store["prefix"], **options)
    if store["kind"] == "postgres":
        return logged_store(PostgresCheckpoint, log)(
            store["url"], prefix=store["prefix"], **options
        )
    return logged_store(NatsKVCheckpoint, log)(store["url"], bucket=store["bucket"], **options)


def build_agent(config: dict[str, Any], log: SyncedLog, db: psycopg.AsyncConnection[Any]) -> Agent:
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

    @tool
    async def lookup(ctx: RunContext, order: str) -> str:
        """Look the order up (a read: safe to repeat)."""
        return await execute(ctx, "lookup")

    @tool(effect="once")
    async def notify(ctx: RunContext, order: str) -> str:
        """Tell the customer (must never be sent twice)."""
        return await execute(ctx, "notify")

    @tool(effect="keyed")
    async def charge(ctx: RunContext, order: str) -> str:
        """Charge the card through a service that applies each key once."""
        return await execute(ctx, "charge")

    wanted = set(config.get("tools", [name for name, _ in CALLS]))
    tools = [t for t in (lookup, notify, charge) if t.name in wanted]
    calls = tuple((name, call_id) for name, call_id in CALLS if name in wanted)
    checkpoint = checkpoint_store(config["checkpoint"], log)
    return Agent(FunctionModel(planner(calls)), tools=tools, checkpoint=checkpoint)


async def charge_once(
    db: psycopg.AsyncConnection[Any], table: str, ctx: RunContext, execution: str
) -> str:
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


async def main(config: dict[str, Any]) -> None:
    log = SyncedLog(config["log"])
    db = await psycopg.AsyncConnection.connect(config["postgres"], autocommit=True)
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
