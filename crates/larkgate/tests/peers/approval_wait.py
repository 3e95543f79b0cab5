"""A gated call that waits for its approver, driven by the official MCP Python SDK client.

Usage: approval_wait.py URL MODE CALLER_TOKEN APPROVER_TOKEN SUFFIX

MODE is "legacy" (2025-11-25) or "2026-07-28". The server's policy gates `kv_delete` with a
30 s wait and `kv_set` with a 2 s wait. Each scenario prints one line:

- "approved": the caller's `kv_delete` is held; the approver sees the request pending
  (`approvals_list`) and approves it; the held call then runs and answers. The caller asked for
  progress and was told "waiting for an approver: approval ID, asked HH:MM UTC".
- "denied": as above, the approver denies; the held call answers `approval_denied`.
- "timed_out": nobody decides the `kv_set`; after its 2 s the call answers
  `approval_required` with the id it was held for. On 2026-07-28 the wait came in rounds: the
  first answer is `input_required` with only a `requestState` (asked for raw, here), and the
  SDK's own retry loop carries the wait on to its end.
- "withdrawn": the caller cancels its held call; the request is then `withdrawn`.

The last line printed is "ok: <mode>".
"""

import asyncio
import re
import sys

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import InputRequiredResult

URL, MODE, CALLER, APPROVER, SUFFIX = sys.argv[1:6]
WAITING = re.compile(r"^waiting for an approver: approval (\S+), asked \d\d:\d\d UTC$")


def connect(token):
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    return Client(streamable_http_client(URL, http_client=http), mode=MODE)


def envelope(result, code):
    assert result.is_error, f"expected a {code} refusal, got {result}"
    env = (result.meta or {}).get("larkgate/envelope")
    assert env is not None and env.get("code") == code, f"expected {code}, got {result}"
    return env


async def pending_id(approver, key, status="pending"):
    """The id of the request for `key` once the approver sees it with `status` (waits for it)."""
    with anyio.fail_after(20):
        while True:
            listed = await approver.call_tool("approvals_list", {"status": status})
            assert not listed.is_error, listed
            for approval in listed.structured_content["approvals"]:
                if (approval.get("arguments") or {}).get("key") == key:
                    return approval["id"]
            # A readiness poll: the request appears (or is withdrawn) on the server, which
            # tells the approver nothing of it; bounded by fail_after, never waited out.
            await anyio.sleep(0.05)


async def decided(caller, approver, approve):
    key = f"held_{SUFFIX}_{approve}"
    told = []

    async def progress(done, total, message):
        told.append((done, total, message))

    result = {}

    async def call():
        result["answer"] = await caller.call_tool(
            "kv_delete", {"key": key}, progress_callback=progress
        )

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(call)
        id = await pending_id(approver, key)
        decide = "approvals_approve" if approve else "approvals_deny"
        answer = await approver.call_tool(decide, {"id": id, "reason": "seen by a person"})
        assert not answer.is_error, answer
    answer = result["answer"]
    if approve:
        assert not answer.is_error, answer
    else:
        env = envelope(answer, "approval_denied")
        assert env["approval_id"] == id, env
        assert "seen by a person" in env["message"], env
    # The wait was told: at its start, with the request's id and when it was asked.
    assert told, "no progress while the call waited"
    done, total, message = told[0]
    assert total == 30 and 0 <= done <= 30, told
    match = WAITING.match(message)
    assert match and match.group(1) == id, message
    return "approved" if approve else "denied"


async def timed_out(caller):
    key = f"late_{SUFFIX}"
    if MODE == "2026-07-28":
        # The first round, as the wire has it: still waiting, come back with this state.
        first = await caller.session.call_tool(
            "kv_set", {"key": key, "value": "v"}, allow_input_required=True
        )
        assert isinstance(first, InputRequiredResult), first
        assert not first.input_requests, first
        assert first.request_state.startswith("larkgate-wait:v1:"), first
    answer = await caller.call_tool("kv_set", {"key": key, "value": "v"})
    env = envelope(answer, "approval_required")
    assert env["approval_id"], env
    return "timed_out"


async def withdrawn(caller, approver):
    key = f"dropped_{SUFFIX}"
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(caller.call_tool, "kv_delete", {"key": key})
            id = await pending_id(approver, key)
            scope.cancel()
    assert await pending_id(approver, key, status="withdrawn") == id
    return "withdrawn"


async def main():
    async with connect(CALLER) as caller, connect(APPROVER) as approver:
        print(await decided(caller, approver, approve=True), flush=True)
        print(await decided(caller, approver, approve=False), flush=True)
        print(await timed_out(caller), flush=True)
    # A fresh caller: the cancelled call's connection is not used again.
    async with connect(CALLER) as caller, connect(APPROVER) as approver:
        print(await withdrawn(caller, approver), flush=True)


asyncio.run(main())
print(f"ok: {MODE}")
