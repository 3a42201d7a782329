"""A client process for the orphan test: connects to stdio servers, says so, then waits forever.

    python killed_client.py PID_DIR

Starts three minimal servers, each writing its pid into PID_DIR/<name>/:
  guarded   ignores SIGTERM and the end of stdin, started with die_with_parent (the default)
  polite    exits when its stdin closes, started without the guard
  stubborn  ignores SIGTERM and the end of stdin, started without the guard
"""

import asyncio
import os
import sys
from pathlib import Path

from daimon.mcp import MCPClient

SERVER = str(Path(__file__).with_name("minimal_server.py"))


async def main(pid_dir: Path) -> None:
    clients = []
    for name, stubborn, guard in [
        ("guarded", True, True),
        ("polite", False, False),
        ("stubborn", True, False),
    ]:
        (pid_dir / name).mkdir()
        args = ["-I", "-S", SERVER, "--pid-dir", str(pid_dir / name)]
        if stubborn:
            args.append("--stubborn")
        client = MCPClient.stdio(sys.executable, args, die_with_parent=guard)
        await client.connect()
        clients.append(client)
    print("connected", os.getpid(), flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
