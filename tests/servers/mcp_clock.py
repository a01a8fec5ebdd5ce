"""A streamable-HTTP MCP server built with the Python MCP SDK, for Halyard's tests of calls that
run at once: each tool answers when it started and ended, by this machine's clock.

Usage: mcp_clock.py PORT. `look` says it only reads (`readOnlyHint`), so the agent may call it
beside other such calls; `mark` says nothing, so it must run alone.
"""
import asyncio
import sys
import time

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

port = int(sys.argv[1])
server = MCPServer("clock")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def look(name: str, seconds: float = 1.0) -> str:
    """Look at something for a while; answers `look NAME START END`."""
    start = time.time()
    await asyncio.sleep(seconds)
    return f"look {name} {start:.3f} {time.time():.3f}"


@server.tool()
async def mark(name: str, seconds: float = 0.5) -> str:
    """Change something; answers `mark NAME START END`."""
    start = time.time()
    await asyncio.sleep(seconds)
    return f"mark {name} {start:.3f} {time.time():.3f}"


uvicorn.run(server.streamable_http_app(), host="127.0.0.1", port=port, log_level="warning")
