"""Reads federated content through `larkgate serve` with the official MCP Python SDK client.

Usage: content_client.py URL MODE TOKEN IMAGE_BASE64 SOUND_BASE64

MODE is "legacy" (2025-11-25) or "2026-07-28". The gateway federates server-everything as
`everything` and the Python stdio peer as `py`. Each call's content is read as the SDK's own
types, as a client application reads it; the last line printed is "ok: <steps>".
"""

import asyncio
import sys

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

URL, MODE, TOKEN, IMAGE, SOUND = sys.argv[1:6]
steps = []


def content(result):
    assert not result.is_error, f"expected success, got {result}"
    return result.content


async def main():
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
    async with Client(streamable_http_client(URL, http_client=http), mode=MODE) as client:
        image = content(await client.call_tool("everything__get-tiny-image", {}))
        assert [c.type for c in image] == ["text", "image", "text"], image
        assert image[1].mime_type == "image/png" and image[1].data == IMAGE, image[1]
        steps.append("image")

        sound = content(await client.call_tool("py__sound", {}))
        assert [c.type for c in sound] == ["text", "audio"], sound
        assert sound[1].mime_type == "audio/wav" and sound[1].data == SOUND, sound[1]
        steps.append("audio")

        links = content(await client.call_tool("everything__get-resource-links", {"count": 2}))
        assert [c.type for c in links] == ["text", "resource_link", "resource_link"], links
        assert all(str(link.uri).startswith("demo://resource/") for link in links[1:]), links
        steps.append("resource_link")

        embedded = content(
            await client.call_tool(
                "everything__get-resource-reference", {"resourceType": "Text", "resourceId": 1}
            )
        )
        assert [c.type for c in embedded] == ["text", "resource", "text"], embedded
        assert str(embedded[1].resource.uri) == "demo://resource/dynamic/text/1", embedded[1]
        assert embedded[1].resource.text.startswith("Resource 1: "), embedded[1]
        steps.append("embedded_resource")

        annotated = content(
            await client.call_tool(
                "everything__get-annotated-message", {"messageType": "error", "includeImage": True}
            )
        )
        assert annotated[0].annotations.priority == 1.0, annotated[0]
        assert annotated[1].annotations.audience == ["user"], annotated[1]
        steps.append("annotations")

        echoed = await client.call_tool("everything__echo", {"message": "hello"})
        assert content(echoed)[0].text == "Echo: hello", echoed
        assert echoed.structured_content is None, echoed
        steps.append("text")
    print("ok: " + " ".join(steps))


asyncio.run(main())
