"""An MCP server built with the official Python SDK, spoken to over standard input and output,
for larkgate's command-launched upstream tests.

Usage: python stdio_server.py [MODE]

MODE is how it behaves before (or instead of) serving:
- serve (the default): serves at once;
- garbage: writes lines that are not JSON-RPC to stdout first, then serves;
- flood: serves while it writes 100,000 lines to stderr over about ten seconds;
- exit: writes one line to stderr and exits with status 3;
- silent: reads its input and never answers.

Its tools: `echo` (read-only; its description is the text of `echo-description.txt` in the
working directory when there is one, so a test can change a definition between two starts), `notes.read` (a name with a dot), `environment` (the variables it sees and its working
directory), `spawn` (starts a child process that sleeps, and answers its pid), `huge` (a result
of that many bytes, on one line), `die` (writes a line to stderr and exits with status 4),
`sound` (audio content beside a caption).

Its resources: `notes://index` (text), `notes://logo` (a PNG, as a blob) and the template
`notes://page/{slug}` (the text `page <slug>`). Its prompts: `review` (argument `topic`: a text
message and an embedded resource) and `greeting` (no arguments).
"""

import os
import subprocess
import sys
import threading
import time

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.prompts.base import AssistantMessage, UserMessage
from mcp_types import (
    AudioContent,
    EmbeddedResource,
    TextContent,
    TextResourceContents,
    ToolAnnotations,
)

server = MCPServer("stdio-peer")


def echo_description():
    try:
        with open("echo-description.txt") as f:
            return f.read()
    except FileNotFoundError:
        return "Answers the text it was given."


@server.tool(description=echo_description(), annotations=ToolAnnotations(read_only_hint=True))
def echo(text: str) -> str:
    return text


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def environment() -> dict:
    """The environment variables this process sees, and its working directory."""
    return {"variables": sorted(os.environ), "values": dict(os.environ), "cwd": os.getcwd()}


@server.tool(name="notes.read", annotations=ToolAnnotations(read_only_hint=True))
def notes_read() -> str:
    """A tool whose name has a dot, as MCP allows."""
    return "the notes"


@server.tool()
def spawn() -> int:
    """Starts a child process that sleeps for an hour; answers its process id."""
    child = subprocess.Popen(["sleep", "3600"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    return child.pid


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def huge(size: int) -> str:
    """A result of `size` bytes."""
    return "x" * size


# The first bytes of a WAV file, as base64.
SOUND = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQAAAAA="


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def sound() -> list:
    """A short sound: audio content beside its caption."""
    return [
        TextContent(type="text", text="a short beep"),
        AudioContent(type="audio", data=SOUND, mime_type="audio/wav"),
    ]


@server.tool()
def die() -> str:
    """Exits the whole server, with status 4."""
    print("stdio-peer: dying on request", file=sys.stderr, flush=True)
    os._exit(4)


# The PNG signature and an IHDR chunk's start: bytes that are not UTF-8.
LOGO = bytes.fromhex("89504e470d0a1a0a0000000d49484452")


@server.resource("notes://index", mime_type="text/plain")
def notes_index() -> str:
    """The index of the notes."""
    return "index of the notes"


@server.resource("notes://logo", mime_type="image/png")
def notes_logo() -> bytes:
    """The notes' logo."""
    return LOGO


@server.resource("notes://page/{slug}", mime_type="text/plain")
def notes_page(slug: str) -> str:
    """One page of the notes."""
    return f"page {slug}"


@server.prompt()
def review(topic: str) -> list:
    """Asks for a review of a topic, with the notes' index embedded."""
    return [
        UserMessage(content=TextContent(type="text", text=f"Review {topic}.")),
        UserMessage(
            content=EmbeddedResource(
                type="resource",
                resource=TextResourceContents(
                    uri="notes://index", mime_type="text/plain", text="index of the notes"
                ),
            )
        ),
        AssistantMessage(content=TextContent(type="text", text="Reviewing.")),
    ]


@server.prompt()
def greeting() -> str:
    """A greeting."""
    return "Say hello."


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "serve"
    if mode == "exit":
        print("stdio-peer: fatal: no configuration", file=sys.stderr, flush=True)
        sys.exit(3)
    if mode == "silent":
        for _ in sys.stdin:
            pass
        return
    if mode == "garbage":
        sys.stdout.write("this is not JSON-RPC\n{\"jsonrpc\": \"2.0\", broken\n\x00\x01\x02\n")
        sys.stdout.flush()
    if mode == "flood":
        threading.Thread(target=flood, daemon=True).start()
    server.run("stdio")


def flood():
    line = "stdio-peer: noise " + "n" * 100 + "\n"
    for _ in range(1000):
        sys.stderr.write(line * 100)
        sys.stderr.flush()
        time.sleep(0.01)


if __name__ == "__main__":
    main()
