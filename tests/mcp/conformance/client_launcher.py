"""Hands one client scenario to a running ``client_app.py --serve SOCKET``: standard library only.

    MCP_CONFORMANCE_SCENARIO=tools_call python -S -I client_launcher.py SOCKET URL

The conformance suite runs this as the client command (it starts in milliseconds); the scenario
runs in the ``client_app.py`` process, and its output and exit status come back as this
program's own.
"""

import json
import os
import socket
import sys


def main() -> int:
    """Send the scenario, print what it printed, exit with its status."""
    path, url = sys.argv[1], sys.argv[2]
    request = {
        "scenario": os.environ.get("MCP_CONFORMANCE_SCENARIO", ""),
        "url": url,
        "context": json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}"),
    }
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.connect(path)
        connection.sendall(json.dumps(request).encode() + b"\n")
        received = b""
        while chunk := connection.recv(65536):
            received += chunk
    if not received:
        print("client_app.py sent no reply", file=sys.stderr)
        return 1
    reply = json.loads(received)
    sys.stdout.write(reply["stdout"])
    sys.stderr.write(reply["stderr"])
    return int(reply["code"])


if __name__ == "__main__":
    sys.exit(main())
