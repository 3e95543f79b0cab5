"""An MCP server built with the official Python SDK that says which trace context it was called
with, for larkgate's trace tests, and which credential (for the sign-in tests: larkgate must
never pass a client's token on).

Usage: python trace_peer.py

Listens on 127.0.0.1 on a free port, prints the port on one line, then serves Streamable HTTP at
/mcp until killed. Its one tool, `seen`, answers the `traceparent` of the HTTP request that
carried the call, the one in the call's `_meta`, and the request's `Authorization` header.
"""

import socket
import sys

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("trace-peer")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def seen(ctx: Context) -> dict:
    """The trace context this call arrived with."""
    headers = ctx.headers or {}
    meta = ctx.request_context.meta or {}
    if not isinstance(meta, dict):
        meta = meta.model_dump() if hasattr(meta, "model_dump") else dict(meta)
    return {
        "header": headers.get("traceparent", ""),
        "meta": meta.get("traceparent", ""),
        "authorization": headers.get("authorization", ""),
    }


def main():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # connections queue from now on, before the server loop starts
    print(sock.getsockname()[1], flush=True)
    app = server.streamable_http_app(json_response=True)
    config = uvicorn.Config(app, log_level="warning")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    sys.exit(main())
