"""A worker process for the fault tests: ``python _worker_proc.py ADDRESS TASK_QUEUE AGENT...``.

It serves the named agents of ``_agents.py`` until killed, writing ``ready`` on stdout once the
worker polls. Its workflow cache is off (``max_cached_workflows=0``): every workflow task
replays the run's history, as one that lands on a fresh worker after a crash does.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import _agents

from daimon.temporal import connect, serving


async def main(address: str, task_queue: str, names: list[str]) -> None:
    client = await connect(address)
    agents = [getattr(_agents, name) for name in names]
    async with serving(client, agents, task_queue=task_queue, max_cached_workflows=0):
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
