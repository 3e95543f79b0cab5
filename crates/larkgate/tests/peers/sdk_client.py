"""An agent's session with `larkgate serve`, driven by the official MCP Python SDK client.

Usage: sdk_client.py URL MODE TOKENS_JSON SUFFIX

MODE is "legacy" (2025-11-25: initialize, sessions) or "2026-07-28" (stateless). TOKENS_JSON
maps "author", "publisher" and "approver" to bearer tokens. SUFFIX keeps the names this run
creates apart from another run's against the same server. Each step asserts what a client
relies on; the last line printed is "ok: <steps>".
"""

import asyncio
import json
import sys

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

URL, MODE, TOKENS, SUFFIX = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
steps = []

GREET = '''
def main(*, name: str):
    """Greets someone and says when."""
    now = clock_now()
    print("greeting " + name)
    return {"greeting": "hello " + name, "at": now["rfc3339"]}
'''


def connect(token):
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    return Client(streamable_http_client(URL, http_client=http), mode=MODE)


def envelope(result, code):
    assert result.is_error, f"expected a {code} refusal, got {result}"
    assert result.structured_content is None, "an error result carries no structured content"
    env = (result.meta or {}).get("larkgate/envelope")
    assert env is not None and env.get("code") == code, f"expected {code}, got {result}"
    assert env.get("message"), env
    # What a person sees in a client that shows only text: code, message, hint, approval id.
    text = "\n".join(c.text for c in result.content if c.type == "text")
    assert text.startswith(f"{code}: {env['message']}"), text
    if env.get("hint"):
        assert f"hint: {env['hint']}" in text, text
    if env.get("approval_id"):
        assert f"approval id: {env['approval_id']}" in text, text
    return env


def structured(result):
    assert not result.is_error, f"expected success, got {result}"
    return result.structured_content


async def main():
    draft = f"greet_{SUFFIX}"
    async with connect(TOKENS["author"]) as author:
        names = {t.name for t in (await author.list_tools()).tools}
        for expected in ("clock_now", "kv_get", "script_save_draft", "script_run_draft", "run_get"):
            assert expected in names, f"{expected} is not listed: {sorted(names)}"
        assert "approvals_approve" not in names, "an author sees the approvers' tools"
        assert "script_publish" not in names, "an author sees the publishers' tools"
        steps.append("list")

        now = structured(await author.call_tool("clock_now", {}))
        assert "rfc3339" in now, now
        steps.append("call_capability")

        saved = structured(await author.call_tool("script_save_draft", {"name": draft, "source": GREET}))
        assert saved["signature"] == "main(*, name: str) -> any", saved
        ran = structured(await author.call_tool("script_run_draft", {"name": draft, "args": {"name": "Ada"}}))
        assert ran["result"]["greeting"] == "hello Ada", ran
        assert ran["printed"] == "greeting Ada\n", ran
        record = structured(await author.call_tool("run_get", {"run_id": ran["run_id"]}))
        assert record["status"] == "succeeded" and record["kind"] == "draft", record
        steps.append("run_draft")

        writes = "def main():\n    kv_set(key = 'k', value = 'v')\n"
        envelope(await author.call_tool("script_run_draft", {"source": writes}), "write_barrier")
        steps.append("write_barrier")

        envelope(await author.call_tool(f"script__{draft}", {"name": "Ada"}), "not_found")
        envelope(await author.call_tool("no_such_tool", {}), "not_found")
        steps.append("not_found")

    async with connect(TOKENS["publisher"]) as publisher:
        version = structured(await publisher.call_tool("script_publish", {"name": draft}))
        assert version["tool"] == f"script__{draft}" and version["version"] >= 1, version
        steps.append("publish")

    async with connect(TOKENS["author"]) as author:
        tools = {t.name: t for t in (await author.list_tools()).tools}
        tool = tools.get(f"script__{draft}")
        assert tool is not None, f"the published script is not listed: {sorted(tools)}"
        assert tool.description == "Greets someone and says when.", tool.description
        assert tool.input_schema["properties"]["name"]["type"] == "string", tool.input_schema
        assert tool.input_schema["required"] == ["name"], tool.input_schema
        called = structured(await author.call_tool(f"script__{draft}", {"name": "Bob"}))
        assert called["result"]["greeting"] == "hello Bob", called
        record = structured(await author.call_tool("run_get", {"run_id": called["run_id"]}))
        assert record["principal"] == f"script:{draft}" and record["kind"] == "published", record
        steps.append("call_script_tool")

        envelope(await author.call_tool(f"script__{draft}", {"name": 7}), "invalid_arguments")
        steps.append("invalid_arguments")

        limited = None
        for _ in range(5):
            result = await author.call_tool("kv_list", {})
            if result.is_error:
                limited = envelope(result, "rate_limited")
                break
        assert limited is not None, "kv_list was never rate limited"
        assert limited["retry_after_seconds"] >= 1, limited
        steps.append("rate_limited")

        gated = envelope(await author.call_tool("kv_delete", {"key": f"gone_{SUFFIX}"}), "approval_required")
        approval = gated["approval_id"]
        async with connect(TOKENS["approver"]) as approver:
            structured(await approver.call_tool("approvals_approve", {"id": approval}))
        deleted = structured(await author.call_tool("kv_delete", {"key": f"gone_{SUFFIX}"}))
        assert "deleted" in deleted, deleted
        steps.append("approval_required")

    try:
        async with connect("lgt_000000000000_" + "A" * 43) as stranger:
            await stranger.list_tools()
        raise AssertionError("a client with an unknown token was served")
    except AssertionError:
        raise
    except Exception as error:  # the SDK raises on the HTTP 401 answer
        text = repr(error)
        for cause in (getattr(error, "exceptions", None) or []):
            text += repr(cause)
        assert "401" in text or "unauthenticated" in text.lower(), text
    steps.append("unauthenticated")
    print("ok: " + " ".join(steps))


asyncio.run(main())
