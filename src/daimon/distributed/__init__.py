r"""Distributed execution: brokers that queue agent tasks, and workers that run them.

A client submits :class:`~daimon.core.AgentTask`\\ s to a broker and reads their
:class:`~daimon.core.TaskStatus`; workers lease the tasks, run an agent on each, and record
exactly one result per task. Delivery is at least once: a task whose worker dies runs again as
a new attempt, and only the newest attempt may record the result::

    broker = broker_from_url("redis://localhost:6379/0")
    task_id = await broker.submit(new_task("Summarise the report"))
    status = await wait_for_task(broker, task_id)

    await run_worker(agent, "redis://localhost:6379/0", concurrency=8)  # on each worker

Brokers live in :mod:`daimon.distributed.brokers`, each behind its extra. Importing this package
stays cheap: names load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from daimon.core.lazy import lazy_exports

if TYPE_CHECKING:
    from daimon.core.errors import BrokerError
    from daimon.core.protocols import Broker, Delivery
    from daimon.core.tasks import DeadLetter
    from daimon.distributed._client import new_task, wait_for_task
    from daimon.distributed._trace import (
        TRACEPARENT,
        child_traceparent,
        current_traceparent,
        new_traceparent,
    )
    from daimon.distributed._urls import broker_from_url
    from daimon.distributed._worker import Worker, default_should_retry, run_worker

__all__ = (
    "Broker",
    "BrokerError",
    "DeadLetter",
    "Delivery",
    "TRACEPARENT",
    "Worker",
    "broker_from_url",
    "child_traceparent",
    "current_traceparent",
    "default_should_retry",
    "new_task",
    "new_traceparent",
    "run_worker",
    "wait_for_task",
)

# name -> (module, attribute)
_LAZY: dict[str, tuple[str, str]] = {
    "TRACEPARENT": ("daimon.distributed._trace", "TRACEPARENT"),
    "Broker": ("daimon.core.protocols", "Broker"),
    "BrokerError": ("daimon.core.errors", "BrokerError"),
    "DeadLetter": ("daimon.core.tasks", "DeadLetter"),
    "Delivery": ("daimon.core.protocols", "Delivery"),
    "Worker": ("daimon.distributed._worker", "Worker"),
    "broker_from_url": ("daimon.distributed._urls", "broker_from_url"),
    "child_traceparent": ("daimon.distributed._trace", "child_traceparent"),
    "current_traceparent": ("daimon.distributed._trace", "current_traceparent"),
    "default_should_retry": ("daimon.distributed._worker", "default_should_retry"),
    "new_task": ("daimon.distributed._client", "new_task"),
    "new_traceparent": ("daimon.distributed._trace", "new_traceparent"),
    "run_worker": ("daimon.distributed._worker", "run_worker"),
    "wait_for_task": ("daimon.distributed._client", "wait_for_task"),
}


__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
