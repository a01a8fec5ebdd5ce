// A real OpenID provider for the single sign-on tests: npm's oidc-provider (an OpenID-certified
// implementation), unchanged but for its configuration. One confidential client (Halyard) that
// must use PKCE; accounts are whoever signs in at its development login form (any password),
// with the login as the e-mail address (verified, unless the login starts with `unverified:`)
// and, for a few names, a `groups` claim.
//
// `POST /__mode?to=wrong-audience|expired|ok` has the token endpoint hand out, until told
// otherwise, an ID token with one claim altered and signed again with the provider's own key: a
// token only the relying party's claim checks can refuse.
//
// With a fifth argument `slack` it stands in for Sign in with Slack instead: the login is
// `<team id>/<user id>` (`T0ACME01/U0999XYZ`), and the ID token names them as Slack's does, in
// `https://slack.com/team_id` and `https://slack.com/user_id` (the subject is the user id).
//
//   node oidc-provider.mjs <port> <client id> <client secret> <redirect uri> [slack]

import Provider from "oidc-provider";
import * as jose from "jose";

const [port, clientId, clientSecret, redirectUri, kind] = process.argv.slice(2);
const slack = kind === "slack";
const issuer = `http://127.0.0.1:${port}`;
const { privateKey } = await jose.generateKeyPair("RS256", { extractable: true });
const jwk = { ...(await jose.exportJWK(privateKey)), kid: "halyard-test", alg: "RS256", use: "sig" };

// Who is in which group at the provider.
const GROUPS = { "erin@contractors.test": ["platform-team"], "unverified:root@contractors.test": ["platform-team"] };

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: clientId,
      client_secret: clientSecret,
      redirect_uris: [redirectUri],
      grant_types: ["authorization_code"],
      response_types: ["code"],
      token_endpoint_auth_method: "client_secret_basic",
    },
  ],
  jwks: { keys: [jwk] },
  pkce: { required: () => true },
  scopes: ["openid", "email", "profile", "groups", "offline_access"],
  claims: slack
    ? { openid: ["sub", "https://slack.com/user_id", "https://slack.com/team_id"] }
    : { openid: ["sub"], email: ["email", "email_verified"], profile: ["name"], groups: ["groups"] },
  // The claims of the scopes asked for go in the ID token itself.
  conformIdTokenClaims: false,
  features: { devInteractions: { enabled: true } },
  findAccount: async (_ctx, id) => ({
    accountId: id,
    claims: async () => {
      if (slack) {
        const [team, user] = id.includes("/") ? id.split("/", 2) : ["", id];
        return { sub: user, "https://slack.com/user_id": user, "https://slack.com/team_id": team };
      }
      const email = id.replace(/^unverified:/, "");
      return { sub: id, email, email_verified: email === id, name: email.split("@")[0], groups: GROUPS[id] ?? [] };
    },
  }),
  // Consent is the user's business at a real provider; here every sign-in grants what it asks.
  loadExistingGrant: async (ctx) => {
    const grant = new ctx.oidc.provider.Grant({ clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId });
    grant.addOIDCScope("openid email profile groups");
    await grant.save();
    return grant;
  },
});
provider.proxy = false;

let mode = "ok";
provider.use(async (ctx, next) => {
  // As Slack's sign-in for a link, every authorization asks who is signing in (a browser that
  // signed in as one Slack user tries another next).
  if (slack && ctx.path === "/auth" && ctx.method === "GET" && !ctx.query.prompt) ctx.query = { ...ctx.query, prompt: "login" };
  if (ctx.path === "/__mode") {
    mode = ctx.query.to ?? "ok";
    ctx.body = { mode };
    return;
  }
  await next();
  if (ctx.path === "/token" && mode !== "ok" && ctx.body && typeof ctx.body === "object" && ctx.body.id_token) {
    const claims = jose.decodeJwt(ctx.body.id_token);
    const now = Math.floor(Date.now() / 1000);
    if (mode === "wrong-audience") claims.aud = "someone-else";
    if (mode === "expired") Object.assign(claims, { iat: now - 7200, exp: now - 3600 });
    ctx.body.id_token = await new jose.SignJWT(claims).setProtectedHeader({ alg: "RS256", kid: "halyard-test", typ: "JWT" }).sign(privateKey);
  }
});

provider.listen(Number(port), "127.0.0.1", () => console.log(`oidc-provider listening at ${issuer}`));
