"""``daimon serve``, ``mcp serve``, ``a2a serve``, ``worker``, ``eval``: agents behind protocols.

They share the exit codes of :mod:`daimon.cli.app`: ``2`` when the agent or an option is wrong
(or the server refuses to start, e.g. exposed without a token), ``1`` when an eval falls below
its threshold, ``130`` on Ctrl-C.
"""

from __future__ import annotations

import asyncio
import math
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, NoReturn

import typer

from daimon.agent import Agent
from daimon.cli.app import EXIT_INTERRUPTED, EXIT_USAGE, _build_agent, _Exit, app
from daimon.cli.render import TerminalRenderer
from daimon.core.errors import DaimonError

if TYPE_CHECKING:
    from daimon.core.protocols import Promptable
    from daimon.limits import Limiter

__all__ = ("a2a_app", "mcp_app")

mcp_app = typer.Typer(help="Model Context Protocol: serve an agent's tools to any MCP client.")
a2a_app = typer.Typer(help="Agent-to-Agent protocol: serve an agent to other agents.")
app.add_typer(mcp_app, name="mcp")
app.add_typer(a2a_app, name="a2a")

AgentArgument = Annotated[
    str, typer.Argument(help="The agent: module:attr (like uvicorn's app:app) or a YAML/TOML file.")
]
HostOption = Annotated[
    str, typer.Option(help="Address to bind; anything but loopback needs --token.")
]
PortOption = Annotated[int, typer.Option(help="Port to listen on.")]
TokenOption = Annotated[
    str | None,
    typer.Option(envvar="DAIMON_TOKEN", help="Bearer token clients must send (env DAIMON_TOKEN)."),
]
ALLOWED_HOSTS_ENV = "DAIMON_ALLOWED_HOSTS"
AllowedHostOption = Annotated[
    list[str] | None,
    typer.Option(
        "--allowed-host",
        metavar="NAME",
        help="A Host header clients may send: name, name:port, *.domain or * for any "
        f"(repeatable; env {ALLOWED_HOSTS_ENV}, comma-separated). Needed to bind 0.0.0.0 or ::.",
    ),
]
_WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::", "[::]"})
LimitsOption = Annotated[
    str | None,
    typer.Option(
        metavar="rpm=N,itpm=N,otpm=N,concurrent=N,period=S",
        help="Rate limits for the agents' model calls, shared per model: requests, input and "
        "output tokens per period (60 s), calls at once; a call waits its turn.",
    ),
]
LimitsStoreOption = Annotated[
    str | None,
    typer.Option(
        metavar="URL",
        help="Where --limits are kept, shared by every process using it: redis://... or "
        "postgresql://... (default: this process).",
    ),
]


def _limiter(limits: str | None, store: str | None) -> Limiter | None:
    """The limiter ``--limits`` and ``--limits-store`` describe; exit code 2 if either is wrong."""
    from daimon.cli.limits import limiter_for, parse_limits

    if limits is None:
        if store is not None:
            _usage_error("--limits-store needs --limits")
        return None
    try:
        rates = parse_limits(limits)
    except DaimonError as exc:
        _usage_error(f"--limits: {exc}")
    try:
        return limiter_for(rates, store)
    except DaimonError as exc:
        _usage_error(f"--limits-store: {exc}")


def _limited(served: Promptable, limiter: Limiter | None) -> Promptable:
    """``served`` under ``limiter``, if there is one; exit code 2 if it cannot be."""
    if limiter is None:
        return served
    from daimon.cli.limits import apply_limits

    try:
        return apply_limits(served, limiter)
    except DaimonError as exc:
        _usage_error(str(exc))


def _usage_error(message: str) -> NoReturn:
    sys.stderr.write(f"error: {message}\n")
    raise _Exit(EXIT_USAGE)


def load_served_agent(spec: str) -> Agent:
    """The agent named on the command line; exit code 2, with why on stderr, if it is wrong."""
    renderer = TerminalRenderer()  # notes and errors go to stderr: stdout may be the protocol
    try:
        return _build_agent(
            renderer, model=None, system=None, tools=(), agent_spec=spec, demo_tool=False
        )
    except DaimonError as exc:
        renderer.error(str(exc), type(exc).__name__)
        raise _Exit(EXIT_USAGE) from None


def load_served(spec: str) -> Promptable:
    """What to serve: an agent file's agent, or anything promptable at ``module:attr``.

    A Supervisor, a HandoffNetwork, a graph, DAG or workflow (or a ``ServedFlow``) as well as an
    Agent; exit code 2, with why on stderr, if it is wrong.
    """
    from daimon.cli.loading import is_agent_file, load_promptable

    if is_agent_file(spec):
        return load_served_agent(spec)
    renderer = TerminalRenderer()
    try:
        served = load_promptable(spec)
    except DaimonError as exc:
        renderer.error(str(exc), type(exc).__name__)
        raise _Exit(EXIT_USAGE) from None
    model = getattr(getattr(served, "model", None), "model_name", None)
    shown = f" (model: {model})" if isinstance(model, str) else f" ({type(served).__name__})"
    renderer.note(f"agent: {spec}{shown}")
    return served


def _serve(coroutine: object) -> None:
    try:
        asyncio.run(coroutine)  # type: ignore[arg-type]
    except DaimonError as exc:  # refused to start: exposed without a token, a bad option
        sys.stderr.write(f"error: {exc}\n")
        raise _Exit(EXIT_USAGE) from None
    except KeyboardInterrupt:
        raise _Exit(EXIT_INTERRUPTED) from None


@mcp_app.command("serve")
def mcp_serve(
    agent: AgentArgument,
    transport: Annotated[
        Literal["stdio", "http", "ws"],
        typer.Option(help="stdio, streamable HTTP at /mcp, or WebSocket (ws) at /mcp."),
    ] = "stdio",
    host: HostOption = "127.0.0.1",
    port: PortOption = 8000,
    token: TokenOption = None,
) -> None:
    """Serve the agent's tools, and the agent itself as a tool, over MCP."""
    served = load_served(agent)
    from daimon.mcp import serve_mcp

    _serve(serve_mcp(served, transport=transport, host=host, port=port, token=token))


@a2a_app.command("serve")
def a2a_serve(
    agent: AgentArgument,
    host: HostOption = "127.0.0.1",
    port: PortOption = 8000,
    token: TokenOption = None,
    url: Annotated[
        str | None, typer.Option(help="Public URL for the agent card (needed behind 0.0.0.0).")
    ] = None,
    grpc_port: Annotated[
        int | None, typer.Option(help="Serve the gRPC binding too, on this port.")
    ] = None,
    grpc_url: Annotated[
        str | None,
        typer.Option(
            help="Public URL of the gRPC binding for the agent card, e.g. grpcs://host:443 "
            "(default grpc://<host of --url>:<--grpc-port>; needs --grpc-port)."
        ),
    ] = None,
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            envvar="DAIMON_STORE",
            metavar="URL",
            help="Where tasks and runs waiting for approval are kept, shared by replicas: "
            "postgresql://..., redis://..., sqlite:///file.db (one host) (env DAIMON_STORE; "
            "default: this process's memory).",
        ),
    ] = None,
) -> None:
    """Serve the agent as an A2A agent (agent card at /.well-known/agent-card.json).

    JSON-RPC and HTTP+JSON on --port, gRPC on --grpc-port; A2A 1.0 and 0.3 on each.
    """
    served = load_served(agent)
    from daimon.a2a import serve_a2a

    _serve(
        serve_a2a(
            served,
            host=host,
            port=port,
            token=token,
            url=url,
            grpc_port=grpc_port,
            grpc_url=grpc_url,
            store=store,
        )
    )


@app.command("eval")
def eval_(
    dataset: Annotated[Path, typer.Argument(help="Scenarios: a YAML, JSONL or JSON file.")],
    agent: AgentArgument,
    threshold: Annotated[
        float, typer.Option(help="Least pass rate (0 to 1) for exit code 0.")
    ] = 1.0,
    report: Annotated[Path | None, typer.Option(help="Write the JSON report here.")] = None,
    baseline: Annotated[
        Path | None, typer.Option(help="A previous report: any regression fails the run.")
    ] = None,
    concurrency: Annotated[int, typer.Option(help="Scenarios run at once.")] = 4,
) -> None:
    """Run evaluation scenarios against an agent; exits 1 below the pass threshold (for CI)."""
    served = load_served(agent)
    from daimon.eval import run_eval_cli

    raise _Exit(
        run_eval_cli(
            dataset,
            served,
            threshold=threshold,
            report_path=report,
            baseline_path=baseline,
            concurrency=concurrency,
        )
    )


_TASK_STORE_SCHEMES = frozenset({"amqp", "amqps", "sqs", "pubsub", "sb"})
"""Brokers that keep their tasks' states in a store given to them (``--store redis://...``)."""


def _positive_seconds(value: float | None) -> float | None:
    """A typer callback: ``value`` unless it is not a positive, finite number of seconds."""
    if value is not None and not (math.isfinite(value) and value > 0):
        raise typer.BadParameter(f"must be a positive number of seconds, got {value}")
    return value


@app.command("worker")
def worker(
    agents: Annotated[
        list[str],
        typer.Argument(
            help="The agents to run (module:attr or agent files), as `daimon serve` is given "
            "them: each task runs the one it names."
        ),
    ],
    broker: Annotated[
        str,
        typer.Option(
            envvar="DAIMON_BROKER",
            help=(
                "redis://, nats://, grpc://, amqp://, sqs://, pubsub://, sb:// (the last four "
                "with --store redis://...) or memory://."
            ),
        ),
    ],
    concurrency: Annotated[int, typer.Option(help="Tasks run at once.")] = 4,
    grace: Annotated[
        float, typer.Option(help="Seconds to finish tasks on SIGTERM before handing them back.")
    ] = 30.0,
    store: Annotated[
        str | None,
        typer.Option(
            help="The state store of the servers submitting runs (their --store: "
            "postgresql://..., redis://...): streamed runs write their events there. Also the "
            "task-state store of brokers without one (RabbitMQ, SQS, Pub/Sub, Service Bus; "
            "redis://...).",
        ),
    ] = None,
    queue: Annotated[str, typer.Option(help="The queue (stream, subject) to take tasks from.")] = (
        "tasks"
    ),
    lease: Annotated[
        float | None,
        typer.Option(
            metavar="SECONDS",
            callback=_positive_seconds,
            help="How long a task stays leased to this worker without a heartbeat: a killed "
            "worker's tasks run again after it (default: the broker's, 30 s).",
        ),
    ] = None,
    limits: LimitsOption = None,
    limits_store: LimitsStoreOption = None,
) -> None:
    """Run tasks from a broker on the agents until SIGTERM, losing none."""
    limiter = _limiter(limits, limits_store)
    served = _served(agents, limiter)
    from daimon.distributed import run_worker

    options: dict[str, Any] = {"queue": queue}
    if store is not None and broker.partition(":")[0].lower() in _TASK_STORE_SCHEMES:
        options["store"] = store
    if lease is not None:
        options["lease"] = lease
    _serve(
        run_worker(
            served, broker, concurrency=concurrency, grace=grace, state_store=store, **options
        )
    )


@app.command("serve")
def serve(
    agents: Annotated[
        list[str],
        typer.Argument(
            help="Agents to serve (module:attr or agent files; module:attr may also name a "
            "Graph, Dag, Workflow or ServedFlow); the first is the default."
        ),
    ],
    host: HostOption = "127.0.0.1",
    port: PortOption = 8000,
    token: TokenOption = None,
    allowed_host: AllowedHostOption = None,
    no_ui: Annotated[
        bool, typer.Option("--no-ui", help="Serve the API only: no web playground at /.")
    ] = False,
    limits: LimitsOption = None,
    limits_store: LimitsStoreOption = None,
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            envvar="DAIMON_STORE",
            help="Where the server keeps paused runs, stored responses and stream events, "
            "shared by replicas: postgresql://..., redis://..., sqlite:///file.db (one host) "
            "(default: this process's memory).",
        ),
    ] = None,
    broker: Annotated[
        str | None,
        typer.Option(
            help="Send agents' runs (/prompt, /prompt/stream) to `daimon worker` processes "
            "through this broker (redis://, nats://, postgresql://, ...; needs --store, shared "
            "with the workers). Not read from DAIMON_BROKER, which workers use.",
        ),
    ] = None,
    queue: Annotated[
        str,
        typer.Option(help="The broker's queue to send runs to (the workers' --queue)."),
    ] = "tasks",
) -> None:
    """Serve agents over HTTP: REST, SSE, OpenAI-compatible /v1, and a web playground at /."""
    hosts = _allowed_hosts(allowed_host)
    _refuse_unnamed_wildcard(host, hosts, token)
    served = _served(agents, _limiter(limits, limits_store))
    from daimon.server import ServerSettings
    from daimon.server import serve as serve_http

    try:
        settings = ServerSettings(
            host=host,
            port=port,
            token=token,
            allowed_hosts=hosts,
            ui=not no_ui,
            store=store,
            broker=broker,
            queue=queue if broker is not None else None,
        )
        serve_http(served, settings=settings)
    except DaimonError as exc:  # refused to start: exposed without a token, a bad setting
        sys.stderr.write(f"error: {exc}\n")
        raise _Exit(EXIT_USAGE) from None
    except KeyboardInterrupt:
        raise _Exit(EXIT_INTERRUPTED) from None


def _served(specs: list[str], limiter: Limiter | None) -> dict[str, Promptable]:
    """The agents the command line names, by name (a spec names one whose name is taken).

    One limiter for all: agents of one model share its limits.
    """
    served: dict[str, Promptable] = {}
    for spec in specs:
        agent = _limited(load_served(spec), limiter)
        served[agent.name if agent.name not in served else spec] = agent
    return served


def _allowed_hosts(given: list[str] | None) -> tuple[str, ...] | None:
    """The ``Host`` names ``--allowed-host`` gives, else the environment's; ``None`` for none."""
    if given:
        return tuple(given)
    listed = os.environ.get(ALLOWED_HOSTS_ENV, "")
    names = tuple(name.strip() for name in listed.split(",") if name.strip())
    return names or None


def _refuse_unnamed_wildcard(bind: str, hosts: tuple[str, ...] | None, token: str | None) -> None:
    """Exit with code 2 on a wildcard bind without allowed hosts, saying how to give them.

    The server cannot guess the names clients will use. Without a token the server refuses
    first, for that (it is the bigger hole), as it would without this check.
    """
    if hosts is not None or token is None or bind.strip() not in _WILDCARD_BINDS:
        return
    sys.stderr.write(
        f"error: binding the wildcard address {bind!r} needs the host names clients use to "
        f"reach this server: --allowed-host NAME (repeatable) or {ALLOWED_HOSTS_ENV}=NAME,NAME "
        "(each NAME, NAME:PORT, *.DOMAIN, or * for any Host)\n"
    )
    raise _Exit(EXIT_USAGE)


# --- daimon broker serve grpc: the daimon broker service.

broker_app = typer.Typer(
    help="Task brokers: run daimon's own broker service, list a queue's dead letters."
)
broker_serve_app = typer.Typer(help="Run a broker service.")
app.add_typer(broker_app, name="broker")
broker_app.add_typer(broker_serve_app, name="serve")


@broker_serve_app.command("grpc")
def broker_serve_grpc(
    db: Annotated[
        Path, typer.Option(help="The SQLite file of queues and tasks (kept on restart).")
    ],
    host: HostOption = "127.0.0.1",
    port: PortOption = 50051,
    token: TokenOption = None,
    synchronous: Annotated[
        str, typer.Option(help="SQLite synchronous: FULL (survives power loss) or NORMAL.")
    ] = "FULL",
) -> None:
    """Serve task queues over gRPC to workers started with --broker grpc://HOST:PORT."""
    import importlib

    module = importlib.import_module("daimon.distributed.brokers.grpc")
    sys.stderr.write(f"daimon broker service on {host}:{port} (db {db})\n")
    _serve(module.serve(str(db), host=host, port=port, token=token, synchronous=synchronous))


# --- daimon broker dead-letters: what a queue dead-lettered, and why.


@broker_app.command("dead-letters")
def broker_dead_letters(
    url: Annotated[
        str,
        typer.Argument(
            envvar="DAIMON_BROKER",
            help="The broker: redis://, nats://, grpc://, amqp://, sqs://, pubsub://, sb://.",
        ),
    ],
    limit: Annotated[int, typer.Option(help="List at most this many (1 to 10,000).")] = 20,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON array (task, reason, attempts, dead_at).")
    ] = False,
    store: Annotated[
        str | None,
        typer.Option(
            help="Task-state store for brokers without one (RabbitMQ, SQS, Pub/Sub, Service Bus)."
        ),
    ] = None,
    queue: Annotated[
        str | None,
        typer.Option(
            help="The queue (stream, subject) to look at; default: the URL's, else the broker's."
        ),
    ] = None,
) -> None:
    """List a queue's dead-lettered tasks, oldest first, without taking them off the queue."""
    import json

    from daimon.core.codec import to_data
    from daimon.core.tasks import DeadLetter

    async def read() -> list[DeadLetter]:
        from daimon.distributed import broker_from_url

        # Only a queue that was asked for: the URL may name one (sb://, sqs://, pubsub://,
        # grpc://?queue=) and brokers have their own defaults (RabbitMQ's is daimon.tasks).
        options: dict[str, Any] = {} if queue is None else {"queue": queue}
        if store is not None:
            options["store"] = store
        broker = broker_from_url(url, **options)
        try:
            return await broker.dead_letters(limit)
        finally:
            await broker.aclose()

    try:
        letters = asyncio.run(read())
    except DaimonError as exc:
        sys.stderr.write(f"error: {exc}\n")
        raise _Exit(EXIT_USAGE) from None
    except KeyboardInterrupt:
        raise _Exit(EXIT_INTERRUPTED) from None
    if as_json:
        rows = [
            {
                "task": to_data(d.task),
                "reason": d.reason,
                "attempts": d.attempts,
                "dead_at": d.dead_at,
            }
            for d in letters
        ]
        sys.stdout.write(json.dumps(rows, ensure_ascii=False, indent=2) + "\n")
        return
    if not letters:
        sys.stderr.write("no dead letters" + (f" in queue {queue!r}\n" if queue else "\n"))
    for d in letters:
        when = _utc(d.dead_at) if d.dead_at else "-"
        sys.stdout.write(f"{when}  {d.task.task_id}  attempts={d.attempts}  {d.reason}\n")


def _utc(epoch: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
