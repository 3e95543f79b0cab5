"""Lists and reads federated resources and prompts through `larkgate serve` with the official
MCP Python SDK client.

Usage: catalog_client.py URL MODE TOKEN

MODE is "legacy" (2025-11-25) or "2026-07-28". The gateway federates server-everything as
`everything` and the Python stdio peer as `py`. Everything is read as the SDK's own types, as a
client application reads it; the last line printed is "ok: <steps>".
"""

import asyncio
import base64
import sys

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

URL, MODE, TOKEN = sys.argv[1:4]
LOGO = bytes.fromhex("89504e470d0a1a0a0000000d49484452")
steps = []


async def main():
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
    async with Client(streamable_http_client(URL, http_client=http), mode=MODE) as client:
        resources = (await client.list_resources()).resources
        uris = [r.uri for r in resources]
        assert "larkgate://py/notes://index" in uris, uris
        steps.append("resources")

        templates = (await client.list_resource_templates()).resource_templates
        assert "larkgate://py/notes://page/{slug}" in [t.uri_template for t in templates], templates
        steps.append("templates")

        index = (await client.read_resource("larkgate://py/notes://index")).contents
        assert index[0].text == "index of the notes", index
        assert index[0].uri == "larkgate://py/notes://index", index
        steps.append("text")

        logo = (await client.read_resource("larkgate://py/notes://logo")).contents
        assert base64.b64decode(logo[0].blob) == LOGO, logo
        assert logo[0].mime_type == "image/png", logo
        steps.append("blob")

        page = (await client.read_resource("larkgate://everything/demo://resource/dynamic/text/7"))
        assert page.contents[0].text.startswith("Resource 7: "), page
        steps.append("template")

        prompts = [p.name for p in (await client.list_prompts()).prompts]
        assert "everything__args-prompt" in prompts and "py__greeting" in prompts, prompts
        steps.append("prompts")

        got = await client.get_prompt("everything__args-prompt", {"city": "Lima", "state": "LIM"})
        assert got.messages[0].role == "user", got
        assert got.messages[0].content.text == "What's weather in Lima, LIM?", got
        steps.append("prompt")

        try:
            await client.read_resource("larkgate://py/notes://page/../../secret")
        except MCPError as error:
            # 2025-11-25 answers an unknown resource with -32002, 2026-07-28 with -32602.
            assert error.code == (-32002 if MODE == "legacy" else -32602), error
            assert error.data["larkgate/envelope"]["code"] == "not_found", error.data
            steps.append("refused")
    print("ok: " + " ".join(steps))


asyncio.run(main())
