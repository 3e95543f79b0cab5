"""A client of one of larkgate's endpoints (`/mcp` or a virtual server's `/mcp/NAME`), driven by
the official MCP Python SDK client.

Usage: virtual_servers.py MODE URL TOKEN STEPS_JSON

MODE is "legacy" (2025-11-25) or "2026-07-28". STEPS_JSON is a list of steps, run in order in
one connection; each prints one JSON line:

- "lists": {"tools": [names], "prompts": [names], "resources": [URIs], "templates": [URI
  templates], "instructions": the server's instructions or null};
- {"call": NAME, "arguments": {...}}: {"text": the first content's text, "is_error": bool};
- {"read": URI}: {"uris": [each content's URI], "texts": [each text]}, or {"error": message};
- {"get": NAME, "arguments": {...}}: {"texts": [each message's text]}, or {"error": message};
- {"complete": "prompt" | "resource", "ref": NAME_OR_TEMPLATE, "argument": A, "value": V}:
  {"values": [...]}, or {"error": message};
- "changes": prints {"listening": true} once it listens for tool list changes (2025-11-25: on
  the session, once the SDK says its GET stream is open; 2026-07-28: a `subscriptions/listen`
  stream), then, once told (at most 30 s), {"tools": [names listed then]}.
"""

import asyncio
import json
import logging
import sys

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

MODE, URL, TOKEN, STEPS = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])


class GetStreamOpened(logging.Handler):
    """Sets `opened` when the SDK logs that its 2025-11-25 GET stream is open: larkgate has the
    stream then, and tells the session's changes on it (a change before that is not heard)."""

    def __init__(self, opened):
        super().__init__(logging.DEBUG)
        self.opened = opened

    def emit(self, record):
        if record.getMessage() == "GET SSE connection established":
            self.opened.set()


def say(value):
    print(json.dumps(value), flush=True)


def is_tool_list_changed(message):
    for candidate in (message, getattr(message, "root", None)):
        if getattr(candidate, "method", None) == "notifications/tools/list_changed":
            return True
    return False


async def tool_names(client):
    return [tool.name for tool in (await client.list_tools()).tools]


async def step(client, told, step):
    if step == "lists":
        say(
            {
                "tools": await tool_names(client),
                "prompts": [p.name for p in (await client.list_prompts()).prompts],
                "resources": [r.uri for r in (await client.list_resources()).resources],
                "templates": [
                    t.uri_template
                    for t in (await client.list_resource_templates()).resource_templates
                ],
                "instructions": client.instructions,
            }
        )
    elif step == "changes":
        if MODE == "legacy":
            with anyio.fail_after(30):
                await get_stream_opened.wait()
            say({"listening": True})
            with anyio.fail_after(30):
                await told.wait()
        else:
            async with client.listen(tools_list_changed=True) as subscription:
                say({"listening": True})
                with anyio.fail_after(30):
                    async for _event in subscription:
                        break
        say({"tools": await tool_names(client)})
    elif "call" in step:
        result = await client.call_tool(step["call"], step.get("arguments", {}))
        text = result.content[0].text if result.content else None
        say({"text": text, "is_error": bool(result.is_error)})
    elif "read" in step:
        try:
            contents = (await client.read_resource(step["read"])).contents
        except MCPError as error:
            say({"error": error.message})
            return
        say({"uris": [str(c.uri) for c in contents], "texts": [c.text for c in contents]})
    elif "get" in step:
        try:
            got = await client.get_prompt(step["get"], step.get("arguments", {}))
        except MCPError as error:
            say({"error": error.message})
            return
        say({"texts": [m.content.text for m in got.messages]})
    elif "complete" in step:
        from mcp_types import PromptReference, ResourceTemplateReference

        ref = (
            PromptReference(type="ref/prompt", name=step["ref"])
            if step["complete"] == "prompt"
            else ResourceTemplateReference(type="ref/resource", uri=step["ref"])
        )
        try:
            result = await client.complete(
                ref, {"name": step["argument"], "value": step["value"]}
            )
        except MCPError as error:
            say({"error": error.message})
            return
        say({"values": result.completion.values})
    else:
        raise SystemExit(f"unknown step {step!r}")


async def main():
    global get_stream_opened
    told = anyio.Event()
    get_stream_opened = anyio.Event()
    sdk_log = logging.getLogger("mcp.client.streamable_http")
    sdk_log.setLevel(logging.DEBUG)
    sdk_log.addHandler(GetStreamOpened(get_stream_opened))

    async def handler(message):
        if is_tool_list_changed(message):
            told.set()

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
    options = {"message_handler": handler} if MODE == "legacy" else {}
    async with Client(
        streamable_http_client(URL, http_client=http), mode=MODE, **options
    ) as client:
        for each in STEPS:
            await step(client, told, each)


asyncio.run(main())
