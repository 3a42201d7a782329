"""A worker process for the fault tests: ``python _procs.py CONFIG_JSON``.

It runs :func:`daimon.distributed.run_worker` with a FunctionModel agent and appends one line per
event to the log file named in the config (one ``write`` per line on an ``O_APPEND`` file, so
lines of concurrent processes never interleave): ``claim <task> <attempt> <pid>`` when a
delivery starts, ``done <task> <attempt> <pid>`` when the broker accepted its result,
``refused ...`` when it did not, ``release ...`` when it was handed back.

A task whose input starts with ``poison`` kills the process (``os._exit``) on every attempt; a
task ``sleep:<seconds>`` sleeps that long; any other task sleeps ``task_time`` seconds (a range).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sys
from typing import Any

from daimon import Agent, ChatRequest
from daimon.distributed import Broker, broker_from_url, run_worker
from daimon.models import FunctionModel


class Log:
    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, *words: object) -> None:
        os.write(self.fd, (" ".join(map(str, (*words, os.getpid()))) + "\n").encode())


class LoggedDelivery:
    def __init__(self, inner: Any, log: Log) -> None:
        self.inner = inner
        self.task = inner.task
        self.log = log

    async def heartbeat(self) -> bool:
        return bool(await self.inner.heartbeat())

    async def complete(self, result: Any) -> bool:
        accepted = bool(await self.inner.complete(result))
        self.log.write("done" if accepted else "refused", self.task.task_id, self.task.attempt)
        return accepted

    async def fail(self, error: str, *, retry: bool = False, delay: float = 0.0) -> bool:
        self.log.write("fail", self.task.task_id, self.task.attempt)
        return bool(await self.inner.fail(error, retry=retry, delay=delay))

    async def release(self) -> None:
        self.log.write("release", self.task.task_id, self.task.attempt)
        await self.inner.release()


class LoggedBroker:
    def __init__(self, inner: Broker, log: Log) -> None:
        self.inner = inner
        self.log = log
        self.lease = inner.lease
        self.max_deliver = inner.max_deliver

    async def claim(self, wait: float = 1.0) -> Any:
        delivery = await self.inner.claim(wait)
        if delivery is None:
            return None
        self.log.write("claim", delivery.task.task_id, delivery.task.attempt)
        return LoggedDelivery(delivery, self.log)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def main(config: dict[str, Any]) -> None:
    log = Log(config["log"])
    low, high = config.get("task_time", [0.05, 0.15])

    async def model(request: ChatRequest) -> str:
        text = request.messages[-1].text
        if text.startswith("poison"):
            os._exit(3)  # the worker dies on this task, every time
        if text.startswith("sleep:"):
            await asyncio.sleep(float(text.partition(":")[2]))
        else:
            await asyncio.sleep(random.uniform(low, high))
        return f"done: {text}"

    def dump() -> None:  # SIGUSR1: where every task is, for debugging a stuck worker
        for task in asyncio.all_tasks():
            task.print_stack(file=sys.stderr)

    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, dump)
    broker = broker_from_url(config["url"], **config.get("options", {}))
    logged = LoggedBroker(broker, log)
    log.write("start", "-", 0)
    try:
        await run_worker(
            Agent(FunctionModel(model)),
            logged,  # type: ignore[arg-type]
            concurrency=config.get("concurrency", 8),
            grace=config.get("grace", 30.0),
            retry_delay=0.0,
            poll=0.2,
        )
    finally:
        await broker.aclose()
    log.write("exit", "-", 0)


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
