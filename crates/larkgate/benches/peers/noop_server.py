"""The baseline of larkgate's serve benchmark: the official MCP Python SDK's server with one
trivial tool, `clock_now`, answering what larkgate's built-in `clock_now` answers.

Usage: python noop_server.py          (binds 127.0.0.1 on a free port, prints the port, serves /mcp)
       python noop_server.py stdio    (serves over standard input and output)
"""

import asyncio
import datetime
import socket
import sys
import time

import uvicorn
from pydantic import BaseModel
from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("noop-baseline")


class Now(BaseModel):
    unix_ms: int
    rfc3339: str


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def clock_now() -> Now:
    """The current time in UTC."""
    ms = time.time_ns() // 1_000_000
    at = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)
    return Now(unix_ms=ms, rfc3339=at.isoformat(timespec="milliseconds").replace("+00:00", "Z"))


def main() -> None:
    if sys.argv[1:] == ["stdio"]:
        server.run("stdio")
        return
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit it: answers are not held back by Nagle's algorithm waiting
    # for a delayed acknowledgement (40 ms per call on a kept-alive connection otherwise).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(512)
    print(sock.getsockname()[1], flush=True)
    app = server.streamable_http_app()
    config = uvicorn.Config(app, log_level="warning")
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    main()
