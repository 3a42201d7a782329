"""``python -m daimon.distributed.brokers.grpc --db tasks.db [--host H] [--port P]``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys

from daimon.distributed.brokers.grpc import GrpcBrokerServer

__all__ = ("main",)


async def _main(args: argparse.Namespace) -> None:
    server = GrpcBrokerServer(
        args.db,
        host=args.host,
        port=args.port,
        token=os.environ.get("DAIMON_TOKEN") or None,
        synchronous=args.synchronous,
    )
    await server.start()
    sys.stderr.write(f"daimon broker service on {server.target} (db {args.db})\n")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop()


def main() -> None:
    """Parse the command line and serve until SIGINT or SIGTERM."""
    parser = argparse.ArgumentParser(prog="python -m daimon.distributed.brokers.grpc")
    parser.add_argument("--db", required=True, help="the SQLite file of queues and tasks")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind")
    parser.add_argument("--port", type=int, default=50051, help="port to listen on")
    parser.add_argument("--synchronous", default="FULL", help="SQLite synchronous: FULL, NORMAL")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    main()
