"""A streamable-HTTP MCP server that wants OAuth sign-in, built with the Python MCP SDK as its
authorization guide has a resource server do it, for Halyard's tests.

Usage: mcp_oauth_notes.py PORT ISSUER INTROSPECTOR_ID INTROSPECTOR_SECRET TOKENS_FILE

Without a valid token a request gets 401 with `WWW-Authenticate: Bearer resource_metadata=…`,
and the SDK serves the protected resource metadata naming ISSUER as the authorization server.
A token is checked at ISSUER's introspection endpoint: active, and issued for this server (its
audience). The one tool, `whoami`, answers with the token's subject and which distinct token
this is (`token #2`: the second one seen). Each distinct token is appended to TOKENS_FILE, so a
test can look for them where they must not be.
"""
import sys

import httpx2 as httpx
import uvicorn
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.auth.middleware.auth_context import get_access_token

port, issuer, client_id, client_secret, tokens_file = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
resource = f"http://127.0.0.1:{port}/mcp"
seen: list[str] = []


class IntrospectingVerifier:
    """Asks the authorization server whether a token is active, and for whom."""

    async def verify_token(self, token: str) -> AccessToken | None:
        async with httpx.AsyncClient(timeout=10) as http:
            r = await http.post(f"{issuer}/token/introspection", data={"token": token}, auth=(client_id, client_secret))
        if r.status_code != 200:
            return None
        info = r.json()
        audience = info.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        if not info.get("active") or resource not in audiences:
            return None
        if token not in seen:
            seen.append(token)
            with open(tokens_file, "a") as f:
                f.write(token + "\n")
        return AccessToken(
            token=token,
            client_id=info.get("client_id", ""),
            scopes=(info.get("scope") or "").split(),
            expires_at=info.get("exp"),
            resource=resource,
            subject=info.get("sub"),
        )


server = MCPServer(
    "notes",
    token_verifier=IntrospectingVerifier(),
    auth=AuthSettings(issuer_url=issuer, resource_server_url=resource, required_scopes=["notes"], validate_token_resource=True),
)


@server.tool()
def whoami() -> str:
    """Says who the signed-in user is at this server."""
    token = get_access_token()
    number = seen.index(token.token) + 1 if token and token.token in seen else 0
    return f"signed in as {token.subject if token else 'nobody'} with token #{number}"


uvicorn.run(server.streamable_http_app(), host="127.0.0.1", port=port, log_level="warning")
