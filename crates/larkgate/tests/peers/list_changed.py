"""Is an MCP client told when larkgate's tool list changes? Driven by the official MCP Python SDK.

Usage: list_changed.py URL MODE WATCHER_TOKEN PUBLISHER_TOKEN NAME

MODE "legacy" (2025-11-25) waits for `notifications/tools/list_changed` on the watcher's
session; MODE "2026-07-28" opens a `subscriptions/listen` stream asking for tool list changes.
Meanwhile the publisher saves and publishes a script NAME; the watcher must be told within 20 s
and then list `script__NAME`. The last line printed is "ok: <mode>".
"""

import asyncio
import sys

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

URL, MODE, WATCHER, PUBLISHER, NAME = sys.argv[1:6]

SOURCE = '''
def main():
    """Says hello."""
    return {"hello": "world"}
'''


def connect(token, **options):
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    return Client(streamable_http_client(URL, http_client=http), mode=MODE, **options)


def is_list_changed(message):
    for candidate in (message, getattr(message, "root", None)):
        if getattr(candidate, "method", None) == "notifications/tools/list_changed":
            return True
    return False


async def publish():
    async with connect(PUBLISHER) as publisher:
        saved = await publisher.call_tool("script_save_draft", {"name": NAME, "source": SOURCE})
        assert not saved.is_error, saved
        published = await publisher.call_tool("script_publish", {"name": NAME})
        assert not published.is_error, published


async def legacy():
    told = anyio.Event()

    async def handler(message):
        if is_list_changed(message):
            told.set()

    async with connect(WATCHER, message_handler=handler) as watcher:
        before = {t.name for t in (await watcher.list_tools()).tools}
        assert f"script__{NAME}" not in before, before
        # The SDK opens the session's event stream (GET) after initialization, perhaps only
        # after the publish below: the server keeps what it sent the session meanwhile and
        # sends it when the stream opens, so nothing here waits for the stream.
        await publish()
        with anyio.fail_after(20):
            await told.wait()
        after = {t.name for t in (await watcher.list_tools()).tools}
        assert f"script__{NAME}" in after, after


async def modern():
    async with connect(WATCHER) as watcher:
        async with watcher.listen(tools_list_changed=True) as subscription:
            await publish()
            with anyio.fail_after(20):
                async for _event in subscription:
                    break
        after = {t.name for t in (await watcher.list_tools()).tools}
        assert f"script__{NAME}" in after, after


asyncio.run(legacy() if MODE == "legacy" else modern())
print(f"ok: {MODE}")
