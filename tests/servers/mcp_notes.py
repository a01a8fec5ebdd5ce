"""A streamable-HTTP MCP server built with the Python MCP SDK, for Halyard's tests.

Usage: mcp_notes.py PORT TOKEN. Every request must carry `Authorization: Bearer TOKEN`
(anything else gets 401 and is counted); the one tool, `add_note`, keeps a note and says how
many it holds. Prints "refused N" to stderr for each refused request.
"""
import sys

import uvicorn
from mcp.server.mcpserver import MCPServer
from starlette.responses import JSONResponse

port, token = int(sys.argv[1]), sys.argv[2]
server = MCPServer("notes")
notes: list[str] = []


@server.tool()
def add_note(text: str) -> str:
    """Keep a note; answers with how many notes are kept."""
    notes.append(text)
    return f"noted: {text} ({len(notes)} kept)"


inner = server.streamable_http_app()
refused = 0


async def app(scope, receive, send):
    global refused
    if scope["type"] == "http":
        headers = dict(scope["headers"])
        if headers.get(b"authorization") != f"Bearer {token}".encode():
            refused += 1
            print(f"refused {refused}", file=sys.stderr, flush=True)
            await JSONResponse({"error": "unauthorized"}, status_code=401)(scope, receive, send)
            return
    await inner(scope, receive, send)


uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
