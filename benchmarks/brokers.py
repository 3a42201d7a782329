"""Task brokers: throughput and end-to-end latency, with Celery on the same Redis for comparison.

Needs Celery for the comparison (not a daimon dependency): .venv/bin/pip install 'celery[redis]'.

Usage: python benchmarks/brokers.py [--tasks N] [--latency N] [--workers N] [--only redis,...]
       [--json out]

Names for --only: memory, redis, nats, rabbitmq, grpc, pubsub, sqs, servicebus, postgres, celery.
``postgres`` queues in tables of their own (a prefix per run, dropped afterwards) on
``BENCH_POSTGRES``. ``grpc``
starts a daimon broker service (``python -m daimon.distributed.brokers.grpc``, SQLite
``synchronous=FULL``: every change is fsynced) on a free port, ``pubsub`` a private Pub/Sub
emulator, ``sqs`` a private moto server (``moto_server``: an SQS emulator, in memory), and
``servicebus`` the AMQP 1.0 fake of Azure Service Bus from ``tests/distributed/servicebus_fake.py``
in a process of its own (no Service Bus emulator runs here: its figures are the SDK and daimon
against a local fake, not Azure's service); all are stopped afterwards. The last four keep task
states in Redis.

Each broker gets ``--workers`` worker processes (1 by default; concurrency 32 each) running a
FunctionModel agent that answers at once, and the client in this process:

- throughput: submit ``--tasks`` tasks (64 submits in flight), then wait until all are completed;
  tasks/s = tasks / (first submit -> last completion);
- latency: ``--latency`` no-op tasks one after another, submit -> completed status seen by the
  client (which polls ``status`` every 0.5 ms; Celery's ``AsyncResult.get`` is told to poll at
  the same rate): p50 and p99.

Celery runs the same agent (``agent.prompt_sync``) in a ``--pool threads --concurrency 32`` worker
with ``acks_late`` (the delivery guarantee daimon's brokers give) and a Redis result backend.
The memory broker runs its worker in this process (it cannot cross processes).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REDIS = os.environ.get("BENCH_REDIS", "redis://127.0.0.1:6379/0")
NATS = os.environ.get("BENCH_NATS", "nats://127.0.0.1:4222")
AMQP = os.environ.get("BENCH_AMQP", "amqp://guest:guest@127.0.0.1:5672/")
POSTGRES = os.environ.get("BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
PUBSUB_EMULATOR = os.environ.get(
    "DAIMON_PUBSUB_EMULATOR",
    "/usr/lib/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator",
)
CONCURRENCY = 32
SB_FAKE = HERE.parent / "tests" / "distributed" / "servicebus_fake.py"
LABELS = {
    "sqs": "sqs (moto server, in memory)",
    "servicebus": "servicebus (local AMQP fake, not Azure)",
}


def agent() -> Any:
    from daimon import Agent
    from daimon.models import FunctionModel

    return Agent(FunctionModel(lambda request: "ok"))


# ----------------------------------------------------------------------------- daimon


def targets(tag: str, address: str = "") -> dict[str, tuple[str, dict[str, Any]]]:
    """Each broker's URL and options; ``address`` is the grpc service's or the emulator's."""
    return {
        "memory": ("memory://", {}),
        "redis": (REDIS, {"queue": f"bench-{tag}"}),
        "nats": (NATS, {"stream": f"BENCH_{tag}", "bucket": f"bench_{tag}"}),
        "rabbitmq": (AMQP, {"queue": f"bench.{tag}", "store": REDIS}),
        "grpc": (f"grpc://{address}", {"queue": f"bench-{tag}"}),
        "pubsub": (
            f"pubsub://daimon-bench/bench-{tag}",
            {"queue": f"bench-{tag}", "store": REDIS, "emulator_host": address},
        ),
        "sqs": (
            f"sqs://{address}/bench-{tag}",
            {"store": REDIS, "aws_access_key_id": "test", "aws_secret_access_key": "test"},
        ),
        "servicebus": (
            f"sb://{address}/bench-{tag}?emulator=true",
            {"queue": f"bench-{tag}", "store": REDIS, "max_delivery_count": 100},
        ),
        "postgres": (POSTGRES, {"queue": f"bench-{tag}", "prefix": f"bench_{tag}_"}),
    }


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def service(name: str, scratch: Path) -> Any:
    """Start the grpc service, the Pub/Sub emulator, moto or the Service Bus fake; its address."""
    import socket

    if name not in ("grpc", "pubsub", "sqs", "servicebus"):
        yield ""
        return
    port = free_port()
    if name == "grpc":
        db = scratch / f"bench-{port}.db"
        argv = [sys.executable, "-m", "daimon.distributed.brokers.grpc", "--db", str(db)]
        argv += ["--port", str(port)]
    elif name == "sqs":
        argv = [str(Path(sys.executable).with_name("moto_server")), "-H", "127.0.0.1"]
        argv += ["-p", str(port)]
    elif name == "servicebus":
        argv = [sys.executable, __file__, "--servicebus-fake", str(port)]
    else:
        argv = [PUBSUB_EMULATOR, "--host=127.0.0.1", f"--port={port}"]
    proc = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), 0.2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{argv[0]} did not start") from None
                time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)


def servicebus_fake_main(port: int) -> None:
    """Run the Service Bus fake (a test helper, loaded from its file) until SIGTERM."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("servicebus_fake", SB_FAKE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["servicebus_fake"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    stop = asyncio.Event()

    async def serve() -> None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        with module.ServiceBusFake(port, lock_duration=30.0, max_delivery_count=100):
            await stop.wait()

    asyncio.run(serve())


def worker_main(url: str, options: dict[str, Any]) -> None:
    from daimon.distributed import run_worker

    asyncio.run(run_worker(agent(), url, concurrency=CONCURRENCY, poll=0.2, **options))


async def measure_daimon(
    name: str, url: str, options: dict[str, Any], tasks: int, latency: int, workers: int = 1
) -> dict[str, float]:
    from daimon.core import AgentTask, TaskState
    from daimon.distributed import Worker, broker_from_url

    client = broker_from_url(url, **options)
    procs: list[asyncio.subprocess.Process] = []
    local = None
    if name == "memory":
        local = asyncio.create_task(
            Worker(agent(), client, concurrency=CONCURRENCY, poll=0.05).run()  # type: ignore[arg-type]
        )
    else:
        for _ in range(workers):
            procs.append(await asyncio.create_subprocess_exec(
                sys.executable, __file__, "--worker", url, json.dumps(options),
                stdout=subprocess.DEVNULL,
            ))  # fmt: skip
    try:
        # Warm up: the worker is up and connected once a task goes through.
        await client.submit(AgentTask(task_id="warmup", input="x"))
        await until_done(client, "warmup", 60)

        ids = [f"t{n}" for n in range(tasks)]
        started = time.perf_counter()
        gate = asyncio.Semaphore(64)

        async def submit(task_id: str) -> None:
            async with gate:
                await client.submit(AgentTask(task_id=task_id, input="x"))

        await asyncio.gather(*(submit(i) for i in ids))
        submitted = time.perf_counter()
        pending = set(ids)
        while pending:
            batch = list(pending)[:50]
            states = await asyncio.gather(*(client.status(i) for i in batch))
            for task_id, status in zip(batch, states, strict=True):
                if status.state is TaskState.COMPLETED:
                    pending.discard(task_id)
                elif (
                    status.state is not TaskState.PENDING and status.state is not TaskState.RUNNING
                ):
                    raise RuntimeError(f"{task_id}: {status}")
            if pending:
                await asyncio.sleep(0.01)
        elapsed = time.perf_counter() - started

        latencies = []
        for n in range(latency):
            t0 = time.perf_counter()
            await client.submit(AgentTask(task_id=f"l{n}", input="x"))
            await until_done(client, f"l{n}", 30)
            latencies.append(time.perf_counter() - t0)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            await asyncio.wait_for(proc.wait(), 30)
        if local is not None:
            local.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await local
        await cleanup(name, client, options)
        await client.aclose()
    return summary(tasks, elapsed, submitted - started, latencies)


async def until_done(client: Any, task_id: str, within: float) -> None:
    from daimon.core import TaskState

    deadline = time.perf_counter() + within
    while (await client.status(task_id)).state is not TaskState.COMPLETED:
        if time.perf_counter() > deadline:
            raise TimeoutError(task_id)
        await asyncio.sleep(0.0005)


async def cleanup(name: str, client: Any, options: dict[str, Any]) -> None:
    if name == "redis":
        keys = [k async for k in client._client.scan_iter(match=f"daimon:{{{options['queue']}}}:*")]
        if keys:
            await client._client.delete(*keys)
    elif name == "nats":
        js = client._js
        for stream in (options["stream"], options["stream"] + "_DEAD"):
            await js.delete_stream(stream)
        await js.delete_key_value(options["bucket"])
    elif name in ("pubsub", "sqs", "servicebus"):
        store = client.store.client
        queue = options.get("queue") or client._name  # an SQS queue is named in the URL
        keys = [k async for k in store.scan_iter(match=f"daimon:{{{queue}}}:*")]
        if keys:
            await store.delete(*keys)
    elif name == "postgres":
        import psycopg

        async with await psycopg.AsyncConnection.connect(POSTGRES, autocommit=True) as conn:
            for table in ("broker_tasks", "broker_dead", "schema_versions"):
                await conn.execute(f"DROP TABLE IF EXISTS {options['prefix']}{table}")
    elif name == "rabbitmq":
        channel = client._channel
        for queue in (options["queue"], options["queue"] + ".delay", options["queue"] + ".dead"):
            await channel.queue_delete(queue)
        await channel.exchange_delete(options["queue"] + ".dlx")
        store = client.store.client
        keys = [k async for k in store.scan_iter(match=f"daimon:{{{options['queue']}}}:*")]
        if keys:
            await store.delete(*keys)


def summary(
    tasks: int, elapsed: float, submit_s: float, latencies: list[float]
) -> dict[str, float]:
    latencies.sort()
    return {
        "tasks_per_s": tasks / elapsed,
        "submit_per_s": tasks / submit_s,
        "p50_ms": statistics.median(latencies) * 1e3,
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1e3,
    }


# ----------------------------------------------------------------------------- celery


def celery_app(queue: str) -> Any:
    from celery import Celery

    app = Celery("bench", broker=REDIS, backend=REDIS)
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_default_queue=queue,
        result_expires=600,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )
    the_agent = agent()

    @app.task(name="bench.run")  # type: ignore[untyped-decorator]
    def run(text: str) -> str:
        return str(the_agent.prompt_sync(text).text)

    return app


def celery_worker_main(queue: str) -> None:
    app = celery_app(queue)
    app.worker_main(
        [
            "worker",
            "--pool",
            "threads",
            "--concurrency",
            str(CONCURRENCY),
            "--loglevel",
            "WARNING",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-Q",
            queue,
        ]
    )


def measure_celery(tasks: int, latency: int) -> dict[str, float]:
    queue = f"bench-celery-{uuid.uuid4().hex[:8]}"
    app = celery_app(queue)
    run = app.tasks["bench.run"]
    proc = subprocess.Popen(
        [sys.executable, __file__, "--celery-worker", queue], stdout=subprocess.DEVNULL
    )
    try:
        run.delay("x").get(timeout=60)  # warm up
        started = time.perf_counter()
        results = [run.delay("x") for _ in range(tasks)]
        submitted = time.perf_counter()
        for result in results:
            result.get(timeout=120, interval=0.0005)
        elapsed = time.perf_counter() - started
        latencies = []
        for _ in range(latency):
            t0 = time.perf_counter()
            run.delay("x").get(timeout=30, interval=0.0005)
            latencies.append(time.perf_counter() - t0)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    return summary(tasks, elapsed, submitted - started, latencies)


# ----------------------------------------------------------------------------- main


def main() -> None:
    if sys.argv[1:2] == ["--worker"]:
        return worker_main(sys.argv[2], json.loads(sys.argv[3]))
    if sys.argv[1:2] == ["--celery-worker"]:
        return celery_worker_main(sys.argv[2])
    if sys.argv[1:2] == ["--servicebus-fake"]:
        return servicebus_fake_main(int(sys.argv[2]))
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--latency", type=int, default=300)
    parser.add_argument("--workers", type=int, default=1, help="worker processes per broker")
    parser.add_argument("--only", default="memory,redis,nats,rabbitmq,grpc,pubsub,celery")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    tag = uuid.uuid4().hex[:8]
    rows: dict[str, dict[str, float]] = {}
    for name in args.only.split(","):
        if name == "celery":
            rows["celery (redis)"] = measure_celery(args.tasks, args.latency)
        else:
            with tempfile.TemporaryDirectory() as scratch, service(name, Path(scratch)) as address:
                url, options = targets(tag, address)[name]
                rows[LABELS.get(name, name)] = asyncio.run(
                    measure_daimon(name, url, options, args.tasks, args.latency, args.workers)
                )
        print(f"{name}: {rows[list(rows)[-1]]}", file=sys.stderr)
    print(
        f"\n{args.tasks} tasks, {args.workers} worker process(es) of concurrency {CONCURRENCY}, "
        f"{os.cpu_count()} CPUs\n"
    )
    print("| broker | tasks/s | submits/s | latency p50 | latency p99 |")
    print("|---|---:|---:|---:|---:|")
    for name, row in rows.items():
        print(
            f"| {name} | {row['tasks_per_s']:,.0f} | {row['submit_per_s']:,.0f} | "
            f"{row['p50_ms']:.2f} ms | {row['p99_ms']:.2f} ms |"
        )
    if args.json:
        args.json.write_text(json.dumps({"tasks": args.tasks, "results": rows}, indent=2) + "\n")
    return None


if __name__ == "__main__":
    main()
