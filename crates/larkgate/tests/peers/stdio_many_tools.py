"""An MCP server built with the official Python SDK's low-level server, over standard input and
output, that lists 100,000 tools: a hostile listing for larkgate's command-launched upstream
tests.

Usage: python stdio_many_tools.py PAGE_SIZE

It lists `t0` ... `t99999` in pages of PAGE_SIZE tools (100000: all in one response). Calling
any of them answers its own name.
"""

import sys

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

COUNT = 100_000
PAGE = int(sys.argv[1]) if len(sys.argv) > 1 else COUNT
TOOLS = [
    types.Tool(name=f"t{i}", input_schema={"type": "object"}) for i in range(COUNT)
]


async def list_tools(ctx, params):
    start = int(params.cursor) if params is not None and params.cursor else 0
    end = min(start + PAGE, COUNT)
    return types.ListToolsResult(
        tools=TOOLS[start:end], next_cursor=str(end) if end < COUNT else None
    )


async def call_tool(ctx, params):
    return types.CallToolResult(content=[types.TextContent(text=params.name)])


server = Server("many-tools", on_list_tools=list_tools, on_call_tool=call_tool)


async def main():
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
