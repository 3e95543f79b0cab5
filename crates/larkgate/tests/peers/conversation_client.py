"""A client's conversation with a server during a call, driven by the official MCP Python SDK
client: the progress it hears, and what its cancellation does. Run against larkgate and
against the server directly, so that a test can compare the two.

Usage:
  conversation_client.py progress MODE TARGET TOOL ARGS_JSON
  conversation_client.py cancel MODE TARGET SLOW_TOOL SLOW_ARGS_JSON COUNT_TOOL
  conversation_client.py tools MODE TARGET
  conversation_client.py logs MODE TARGET TOOL ARGS_JSON LEVEL [WAIT]
  conversation_client.py complete MODE TARGET prompt|resource NAME_OR_TEMPLATE ARGUMENT VALUE
  conversation_client.py ask MODE TARGET TOOL ARGS_JSON ANSWERS_JSON
  conversation_client.py subscribe MODE TARGET URIS_JSON TOOL ARGS_JSON WAIT_FOR_JSON [PRIMED_JSON]

MODE is "legacy" (2025-11-25) or "2026-07-28". TARGET is `http:URL` (the bearer token in
LARKGATE_TOKEN, when set) or `stdio:COMMAND ARG...`.

`tools` prints every tool the server lists as one JSON line, {"tools": [definition, ...]}, each
definition with the fields that came on the wire and no others.

`logs` asks for log messages at LEVEL and above (`logging/setLevel` on 2025-11-25, where a
server without it sends what it chooses; the request's `_meta` on 2026-07-28), calls TOOL with
ARGS_JSON (once per element when it is a list) and prints {"logs": [{"level", "logger",
"data"}, ...], "text": the last answer's text}. With WAIT it first waits (at most 20 s) until
it has heard WAIT messages, or with `told` until larkgate said how many it did not relay: a
2025-11-25 server may send messages on the session's own stream, read after the answer.

`ask` calls TOOL with ARGS_JSON, answering the server's elicitations and sampling requests as
ANSWERS_JSON says ({"elicit": an ElicitResult, "sample": {"text", "model"}}; what it does not
name is not declared; "elicit": "hang" prints {"asking": params} when asked and never answers;
"delay": seconds waits that long before each elicitation's answer),
and prints {"asked": [each request's params], "text": the answer's text, "is_error",
"progress": [[progress, total, message], ...]}, or {"asked", "error": message, "progress"}
when the call is refused.

`subscribe` subscribes to each of URIS_JSON (2025-11-25: `resources/subscribe` each, a refused
one noted; 2026-07-28: one `subscriptions/listen` stream asking for all of them), waits (at
most 20 s) until an update of each URI of PRIMED_JSON was heard, calls TOOL with ARGS_JSON
(once per element when it is a list), waits (at most 20 s) until an update of each URI of
WAIT_FOR_JSON was heard, unsubscribes (2025-11-25) and prints {"before": [each URI heard
before the call, in order], "updated": [each URI heard since], "refused": {uri: message},
"acknowledged": [the URIs a 2026-07-28 stream's acknowledgement names], "text": the last
answer's text}.

`complete` asks to complete ARGUMENT (typed so far: VALUE) of a prompt or resource template and
prints {"values": [...]}, or {"error": message} when it is refused.

`progress` calls TOOL with ARGS_JSON and prints one JSON line: {"progress": [[progress, total,
message], ...], "text": the answer's text}. `cancel` calls SLOW_TOOL with SLOW_ARGS_JSON and
abandons it after the first second (the SDK cancels it), then asks COUNT_TOOL, until it says
so or 20 s pass, how many of its calls were cancelled, and prints {"cancelled": N}.
"""

import asyncio
import json
import os
import sys

import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError


def connect(mode, target, **options):
    if target.startswith("http:"):
        token = os.environ.get("LARKGATE_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        http = httpx2.AsyncClient(headers=headers, timeout=60)
        return Client(
            streamable_http_client(target[len("http:"):], http_client=http), mode=mode, **options
        )
    command = target[len("stdio:"):].split(" ")
    return Client(StdioServerParameters(command=command[0], args=command[1:]), mode=mode, **options)


def text_of(result):
    return "\n".join(c.text for c in result.content if c.type == "text")


async def progress(mode, target, tool, arguments):
    heard = []

    async def on_progress(value, total, message):
        heard.append([value, total, message])

    async with connect(mode, target) as client:
        result = await client.call_tool(tool, json.loads(arguments), progress_callback=on_progress)
        assert not result.is_error, result
        print(json.dumps({"progress": heard, "text": text_of(result)}))


async def cancel(mode, target, slow, arguments, count):
    async with connect(mode, target) as client:
        before = json.loads(text_of(await client.call_tool(count, {})))
        try:
            await client.call_tool(slow, json.loads(arguments), read_timeout_seconds=1)
            raise AssertionError("the slow call answered")
        except Exception as error:  # the SDK's timeout, after it cancelled the request
            if isinstance(error, AssertionError):
                raise
        # The server learns of the cancellation a little after the client gives up: ask until
        # it says so (it answers at once), at most for 20 s.
        for _ in range(200):
            now = json.loads(text_of(await client.call_tool(count, {})))
            if now > before:
                break
            await asyncio.sleep(0.1)
        print(json.dumps({"cancelled": now - before}))


async def tools(mode, target):
    listed = []
    async with connect(mode, target) as client:
        cursor = None
        while True:
            page = await client.list_tools(cursor=cursor) if cursor else await client.list_tools()
            listed += [t.model_dump(by_alias=True, exclude_unset=True, mode="json") for t in page.tools]
            cursor = page.next_cursor
            if not cursor:
                break
    print(json.dumps({"tools": listed}))


async def logs(mode, target, tool, arguments, level, wait=None):
    heard = []
    told = asyncio.Event()
    enough = asyncio.Event()

    async def on_log(params):
        heard.append({"level": params.level, "logger": params.logger, "data": params.data})
        if params.logger == "larkgate" and "were not relayed" in str(params.data):
            told.set()
        if wait not in (None, "told") and len(heard) >= int(wait):
            enough.set()

    options = {"logging_callback": on_log}
    if mode != "legacy":
        options["log_level"] = level
    async with connect(mode, target, **options) as client:
        if mode == "legacy":
            try:
                await client.set_logging_level(level)
            except MCPError:
                pass  # a server without logging/setLevel sends what it chooses

        calls = json.loads(arguments)
        result = None
        for call in calls if isinstance(calls, list) else [calls]:
            result = await client.call_tool(tool, call)
            assert not result.is_error, result
        # A server may send a call's messages on the session's own stream, which a client
        # can read after the answer: wait for what the caller expects, at most 20 s.
        if wait is not None:
            try:
                await asyncio.wait_for((told if wait == "told" else enough).wait(), 20)
            except TimeoutError:
                pass  # the test sees what was heard, and says what is missing
        print(json.dumps({"logs": heard, "text": text_of(result)}))


async def complete(mode, target, kind, name, argument, value):
    from mcp_types import PromptReference, ResourceTemplateReference

    ref = (
        PromptReference(type="ref/prompt", name=name)
        if kind == "prompt"
        else ResourceTemplateReference(type="ref/resource", uri=name)
    )
    async with connect(mode, target) as client:
        try:
            result = await client.complete(ref, {"name": argument, "value": value})
        except MCPError as error:
            print(json.dumps({"error": error.message}))
            return
        print(json.dumps({"values": result.completion.values}))


async def ask(mode, target, tool, arguments, answers):
    """Calls TOOL, answering what the server asks as ANSWERS says: {"elicit": ElicitResult,
    "sample": {"text", "model"}}; a kind ANSWERS does not name is not declared."""
    from mcp_types import CreateMessageResult, ElicitResult, TextContent

    answers = json.loads(answers)
    asked = []

    async def on_elicit(context, params):
        asked.append(params.model_dump(by_alias=True, exclude_none=True, mode="json"))
        if answers["elicit"] == "hang":
            # Says it was asked, then never answers (the test kills it then).
            print(json.dumps({"asking": asked[-1]}), flush=True)
            await asyncio.Event().wait()
        # A person taking their time.
        await asyncio.sleep(answers.get("delay", 0))
        return ElicitResult(**answers["elicit"])

    async def on_sample(context, params):
        asked.append({"mode": "sampling", "messages": [m.content.text for m in params.messages]})
        said = answers["sample"]
        return CreateMessageResult(
            role="assistant", content=TextContent(type="text", text=said["text"]), model=said["model"]
        )

    options = {}
    if "elicit" in answers:
        options["elicitation_callback"] = on_elicit
    if "sample" in answers:
        options["sampling_callback"] = on_sample
    heard = []

    async def on_progress(value, total, message):
        heard.append([value, total, message])

    async with connect(mode, target, **options) as client:
        try:
            result = await client.call_tool(
                tool, json.loads(arguments), progress_callback=on_progress
            )
        except MCPError as error:
            print(json.dumps({"asked": asked, "error": error.message, "progress": heard}))
            return
        print(
            json.dumps(
                {
                    "asked": asked,
                    "text": text_of(result),
                    "is_error": result.is_error,
                    "progress": heard,
                }
            )
        )


async def subscribe(mode, target, uris, tool, arguments, wait_for, primed="[]"):
    uris = json.loads(uris)
    updated, before, refused = [], [], {}
    waiting = set(json.loads(primed))
    heard = asyncio.Event()

    def note(uri):
        updated.append(uri)
        waiting.discard(uri)
        if not waiting:
            heard.set()

    async def on_message(message):
        # (On 2026-07-28 the stream's iterator below hears them; this handler would hear the
        # same notifications again.)
        if mode != "legacy":
            return
        for candidate in (message, getattr(message, "root", None)):
            if getattr(candidate, "method", None) == "notifications/resources/updated":
                note(str(candidate.params.uri))
                return

    text = None

    async def call(client):
        nonlocal updated, before, waiting, text
        # What came before the call (and the end of its wait) is kept apart.
        if waiting:
            await wait()
        before, updated = updated, []
        waiting = set(json.loads(wait_for))
        heard.clear()
        if not waiting:
            heard.set()
        calls = json.loads(arguments)
        for each in calls if isinstance(calls, list) else [calls]:
            result = await client.call_tool(tool, each)
            assert not result.is_error, result
            text = text_of(result)
        await wait()

    async def wait():
        try:
            await asyncio.wait_for(heard.wait(), 20)
        except TimeoutError:
            pass  # the test sees what was heard, and says what is missing

    acknowledged = None
    async with connect(mode, target, message_handler=on_message) as client:
        if mode == "legacy":
            for uri in uris:
                try:
                    await client.subscribe_resource(uri)
                except MCPError as error:
                    refused[uri] = error.message
            await call(client)
            for uri in uris:
                if uri not in refused:
                    await client.unsubscribe_resource(uri)
        else:
            async with client.listen(resource_subscriptions=uris) as subscription:
                acknowledged = list(subscription.honored.resource_subscriptions or [])

                async def read():
                    async for event in subscription:
                        note(event.uri)

                reading = asyncio.create_task(read())
                await call(client)
                reading.cancel()
    print(
        json.dumps(
            {
                "before": before,
                "updated": updated,
                "refused": refused,
                "acknowledged": acknowledged,
                "text": text,
            }
        )
    )


def main():
    what, mode, target = sys.argv[1], sys.argv[2], sys.argv[3]
    if what == "progress":
        asyncio.run(progress(mode, target, sys.argv[4], sys.argv[5]))
    elif what == "cancel":
        asyncio.run(cancel(mode, target, sys.argv[4], sys.argv[5], sys.argv[6]))
    elif what == "logs":
        asyncio.run(logs(mode, target, *sys.argv[4:8]))
    elif what == "ask":
        asyncio.run(ask(mode, target, *sys.argv[4:7]))
    elif what == "complete":
        asyncio.run(complete(mode, target, *sys.argv[4:8]))
    elif what == "tools":
        asyncio.run(tools(mode, target))
    elif what == "subscribe":
        asyncio.run(subscribe(mode, target, *sys.argv[4:9]))
    else:
        raise SystemExit(f"unknown command {what!r}")


if __name__ == "__main__":
    main()
