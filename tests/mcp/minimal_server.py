"""A tiny stdio MCP server, standard library only, so it starts in milliseconds.

    python minimal_server.py [--pid-dir DIR] [--stubborn] [--hang]

--pid-dir DIR  write an empty file named after this process's pid into DIR
--stubborn     ignore SIGTERM and the end of stdin: only SIGKILL ends it
--hang         never answer, as a server stuck in initialize
"""

import json
import os
import signal
import sys
import time


def main() -> None:
    args = sys.argv[1:]
    if "--pid-dir" in args:
        directory = args[args.index("--pid-dir") + 1]
        open(os.path.join(directory, str(os.getpid())), "w").close()
    stubborn = "--stubborn" in args
    if stubborn:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    hang = "--hang" in args
    for line in sys.stdin:
        if hang:
            continue
        message = json.loads(line)
        if "id" not in message:
            continue  # a notification
        reply = {"jsonrpc": "2.0", "id": message["id"]}
        method = message.get("method")
        if method == "initialize":
            reply["result"] = {
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "minimal", "version": "1"},
            }
        elif method == "tools/list":
            schema = {"type": "object", "properties": {"text": {"type": "string"}}}
            reply["result"] = {"tools": [{"name": "echo", "inputSchema": schema}]}
        elif method == "tools/call":
            text = message["params"].get("arguments", {}).get("text", "")
            reply["result"] = {"content": [{"type": "text", "text": text}]}
        else:
            reply["error"] = {"code": -32601, "message": f"method not found: {method}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    while stubborn:
        time.sleep(60)


if __name__ == "__main__":
    main()
