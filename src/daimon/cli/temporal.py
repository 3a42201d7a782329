"""``daimon temporal worker``: serve agents as Temporal workflows (extra ``temporal``)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from daimon.cli.app import EXIT_USAGE, _Exit, app
from daimon.cli.serving import _serve, load_served
from daimon.core.errors import DaimonError

if TYPE_CHECKING:
    from daimon.core.protocols import Promptable

__all__ = ("temporal_app",)

temporal_app = typer.Typer(help="Temporal: run agents as durable workflows.")
app.add_typer(temporal_app, name="temporal")


@temporal_app.command("worker")
def temporal_worker(
    agents: Annotated[
        list[str],
        typer.Argument(
            help="Agents to serve: module:attr or agent files (module:attr may also name a team "
            "or a flow, which runs as one activity)."
        ),
    ],
    task_queue: Annotated[str, typer.Option(help="The task queue runs are started on.")],
    address: Annotated[
        str, typer.Option(envvar="TEMPORAL_ADDRESS", help="The Temporal frontend, host:port.")
    ] = "localhost:7233",
    namespace: Annotated[
        str, typer.Option(envvar="TEMPORAL_NAMESPACE", help="The Temporal namespace.")
    ] = "default",
    max_concurrent_activities: Annotated[
        int, typer.Option(help="Model and tool calls run at once by this worker.")
    ] = 100,
) -> None:
    """Run the agents' workflows and their model and tool activities until SIGTERM."""
    loaded = [load_served(spec) for spec in agents]
    _serve(
        _run(
            loaded,
            address=address,
            namespace=namespace,
            task_queue=task_queue,
            max_concurrent_activities=max_concurrent_activities,
        )
    )
    # The worker has shut down cleanly. Leave without the interpreter's finalization: with
    # grpcio installed (temporalio imports its stubs), about one exit in four aborted there
    # ("PyGILState_Release: thread state ... must be current"), turning a clean stop into -6.
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(0)


@temporal_app.command("serve")
def temporal_serve(
    agents: Annotated[
        list[str], typer.Argument(help="Names of agents served by Temporal workers.")
    ],
    task_queue: Annotated[str, typer.Option(help="The task queue the workers serve.")],
    address: Annotated[
        str, typer.Option(envvar="TEMPORAL_ADDRESS", help="The Temporal frontend, host:port.")
    ] = "localhost:7233",
    host: Annotated[
        str, typer.Option(help="Address to bind; anything but loopback needs --token.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    token: Annotated[
        str | None,
        typer.Option(
            envvar="DAIMON_TOKEN", help="Bearer token clients must send (env DAIMON_TOKEN)."
        ),
    ] = None,
) -> None:
    """Serve agents over HTTP (as `daimon serve` does) with every run a Temporal workflow."""
    from daimon.core.optional import require

    require("temporalio", extra="temporal")
    from daimon.server import serve as serve_http
    from daimon.temporal import TemporalAgent

    served = {name: TemporalAgent(address, name, task_queue=task_queue) for name in agents}
    try:
        serve_http(served, host=host, port=port, token=token)
    except DaimonError as exc:
        sys.stderr.write(f"error: {exc}\n")
        raise _Exit(EXIT_USAGE) from None


async def _run(
    agents: list[Promptable],
    *,
    address: str,
    namespace: str,
    task_queue: str,
    max_concurrent_activities: int,
) -> None:
    from daimon.core.optional import require

    require("temporalio", extra="temporal")
    from daimon.temporal import connect, serving

    client = await connect(address, namespace=namespace)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with serving(
        client,
        agents,
        task_queue=task_queue,
        max_concurrent_activities=max_concurrent_activities,
    ):
        names = ", ".join(agent.name for agent in agents)
        sys.stderr.write(f"daimon temporal worker: {names} on {task_queue!r} at {address}\n")
        sys.stderr.flush()
        await stop.wait()
