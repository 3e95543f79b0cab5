"""A person's agent makes a gated call that waits for an approver, driven by the official MCP
Python SDK client (2025-11-25, asking for progress).

Usage: held_call.py URL TOKEN KEY

Calls `kv_delete(key=KEY)`. Prints "waiting: MESSAGE" when the server first tells it the call
waits (the message names the approval), then "answered: ok" when the call runs, or
"answered: CODE" when it is refused.
"""

import asyncio
import sys

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

URL, TOKEN, KEY = sys.argv[1:4]


async def main():
    told = False

    async def progress(done, total, message):
        nonlocal told
        if not told:
            told = True
            print(f"waiting: {message}", flush=True)

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=300)
    async with Client(streamable_http_client(URL, http_client=http), mode="legacy") as client:
        result = await client.call_tool("kv_delete", {"key": KEY}, progress_callback=progress)
    if result.is_error:
        print(f"answered: {(result.meta or {}).get('larkgate/envelope', {}).get('code')}", flush=True)
    else:
        print(f"answered: ok {result.structured_content}", flush=True)


asyncio.run(main())
