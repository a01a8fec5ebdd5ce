// A real OAuth 2.1 authorization server for an MCP server that wants sign-in: npm's
// oidc-provider, configured as the MCP authorization spec expects one to be. Clients register
// themselves (dynamic client registration, RFC 7591), use PKCE, name the MCP server they want a
// token for (`resource`, RFC 8707), and get short-lived opaque access tokens for it with a
// refresh token beside them. The MCP server checks a token by introspection (RFC 7662) as client
// `<introspector id>`/`<secret>`. Accounts are whoever signs in at its development login form
// (any password), who then consent to what the client asks on its consent page.
//
// With `confidential`, it registers every client as a confidential one, whatever the client
// asked (a policy some servers have): it hands out a client secret, and takes no token request,
// refresh or revocation without it.
//
//   node mcp-oauth-provider.mjs <port> <introspector id> <introspector secret> <access token ttl s> [confidential]

import { createServer } from "node:http";

import Provider from "oidc-provider";

const [port, introspector, introspectorSecret, ttl, mode] = process.argv.slice(2);
const issuer = `http://127.0.0.1:${port}`;
const accessTtl = Number(ttl);
const SCOPE = "notes";

const provider = new Provider(issuer, {
  clients: [
    // The resource server's own credentials, for introspection only.
    {
      client_id: introspector,
      client_secret: introspectorSecret,
      redirect_uris: [],
      grant_types: [],
      response_types: [],
      token_endpoint_auth_method: "client_secret_basic",
    },
  ],
  pkce: { required: () => true },
  scopes: ["openid", "offline_access", SCOPE],
  features: {
    devInteractions: { enabled: true },
    registration: { enabled: true },
    introspection: { enabled: true },
    // Halyard revokes a sign-in's refresh token (and with it the grant) at sign-out.
    revocation: { enabled: true },
    resourceIndicators: {
      enabled: true,
      // A client that names no resource at the token endpoint gets the one it was granted.
      useGrantedResource: () => true,
      getResourceServerInfo: (_ctx, resource) => ({ scope: SCOPE, audience: resource, accessTokenTTL: accessTtl, accessTokenFormat: "opaque" }),
    },
  },
  ttl: { AccessToken: accessTtl, RefreshToken: 24 * 3600, Grant: 24 * 3600, Session: 3600, Interaction: 600 },
  // MCP clients ask for the resource's scopes, not necessarily `offline_access` and a consent
  // prompt: every client allowed the refresh grant gets a refresh token.
  issueRefreshToken: async (_ctx, client) => client.grantTypeAllowed("refresh_token"),
  findAccount: async (_ctx, id) => ({ accountId: id, claims: async () => ({ sub: id }) }),
});
provider.proxy = false;

const handle = provider.callback();
const server = createServer(async (req, res) => {
  if (mode === "confidential" && req.method === "POST" && req.url === "/reg") {
    // The registration as asked, its authentication method replaced; the provider reads a body
    // already read from `req.body`.
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const asked = JSON.parse(Buffer.concat(chunks).toString());
    req.body = JSON.stringify({ ...asked, token_endpoint_auth_method: "client_secret_basic" });
  }
  handle(req, res);
});
server.listen(Number(port), "127.0.0.1", () => console.log(`mcp-oauth-provider listening at ${issuer} (${mode ?? "public"} clients)`));
