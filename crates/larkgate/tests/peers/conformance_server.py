"""The MCP conformance suite's reference server for its server scenarios, as the official MCP
Python SDK ships it (`examples/servers/everything-server` of the SDK's source distribution on
PyPI, installed into .cache/py by scripts/test), served as its own `mcp-everything-server`
command serves it, on a free port of 127.0.0.1.

Usage: conformance_server.py [--exit-with PID]

Prints the port on one line once it listens, then serves /mcp until killed (or until the
process PID has ended).
"""

import argparse
import asyncio
import os
import socket
import threading
import time

import uvicorn
from mcp_everything_server.server import event_store, mcp


def exit_with(pid: int) -> None:
    """Ends this process once the process `pid` is gone (polled twice a second)."""
    while True:
        time.sleep(0.5)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            os._exit(0)
        except PermissionError:
            pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--exit-with", type=int, metavar="PID", help="exit when PID has")
    args = parser.parse_args()
    if args.exit_with is not None:
        threading.Thread(target=exit_with, args=(args.exit_with,), daemon=True).start()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # connections queue from now on, before the server loop starts
    print(sock.getsockname()[1], flush=True)
    # As `mcp-everything-server --port N` runs it (its `main`): the same event store and retry
    # interval, and the SDK's DNS rebinding protection for a server on 127.0.0.1.
    app = mcp.streamable_http_app(event_store=event_store, retry_interval=100, host="127.0.0.1")
    config = uvicorn.Config(app, log_level="warning")
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    main()
