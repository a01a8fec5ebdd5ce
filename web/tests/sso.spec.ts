// Single sign-on in Chromium, through a real OpenID provider (npm's certified oidc-provider,
// which tests/tests/browser.rs starts with Halyard): a first sign-in makes the user and places
// them in the organizations their e-mail domain or groups claim say; an ID token for another
// audience, or an expired one, is refused with the reason on the sign-in page; an organization
// that requires single sign-on refuses its members' API-key sign-in to the page; a sign-in never
// takes a name that is someone's (an administrator's by configuration) nor one from an address
// the provider did not verify; strangers the deployment does not admit are refused; a callback
// this browser did not start shows nothing of what it carries; `return_to` stays on this site.
// And Sign in with Slack: a Slack sign-in link is made only when Slack names its Slack user.

import { expect, test, type Page } from "./fixtures";
import { mentionFrom, slackWebApi } from "./slack";

const PROVIDER = process.env.HALYARD_OIDC_URL!;
/** The stand-in for Sign in with Slack (the same provider, naming Slack users as Slack does). */
const SLACK = process.env.HALYARD_SLACK_OIDC_URL!;
const shot = (page: Page, name: string) => page.screenshot({ path: `test-results/screenshots/${name}.png`, fullPage: true });

/** Signs in at the provider as `login` (its development login form takes any password). */
async function viaProvider(page: Page, login: string) {
  await page.goto("/");
  await page.getByRole("link", { name: "Sign in with single sign-on" }).click();
  await atProvider(page, login);
}

/** Signs in at the login form of the provider (`at`) the browser is on. */
async function atProvider(page: Page, login: string, at = PROVIDER) {
  await expect(page).toHaveURL(new RegExp(`^${at}/`));
  await page.locator('input[name="login"]').fill(login);
  await page.locator('input[name="password"]').fill("any password");
  await page.getByRole("button", { name: "Sign-in" }).click();
}

async function mode(page: Page, to: string) {
  expect((await page.request.post(`${PROVIDER}/__mode?to=${to}`)).ok()).toBeTruthy();
}

test("1. a first sign-in makes the user and places them in the organization of their e-mail domain", async ({ page }) => {
  await viaProvider(page, "carol@acme.test");
  await expect(page.getByRole("heading", { name: "Conversations" })).toBeVisible();
  await expect(page.locator(".who")).toHaveText("carol");
  await page.getByRole("link", { name: "Organizations" }).click();
  await expect(page.getByRole("list", { name: "Your organizations" })).toContainText("acme");
  await expect(page.getByRole("list", { name: "Your organizations" })).not.toContainText("platform");
  await shot(page, "sso-signed-in");
  // The session works for the API like a key's.
  const me = await (await page.request.get("/api/v1/me")).json();
  expect(me.user).toBe("carol");
});

test("2. the groups claim places a user whose domain no organization names", async ({ page }) => {
  await viaProvider(page, "erin@contractors.test");
  await expect(page.locator(".who")).toHaveText("erin");
  await page.getByRole("link", { name: "Organizations" }).click();
  await expect(page.getByRole("list", { name: "Your organizations" })).toContainText("platform");
  await expect(page.getByRole("list", { name: "Your organizations" })).not.toContainText("acme");
});

test("3. an ID token for another audience is refused, and the page says why", async ({ page }) => {
  await mode(page, "wrong-audience");
  try {
    await viaProvider(page, "mallory@acme.test");
    await expect(page.getByRole("button", { name: "Sign in", exact: true })).toBeVisible();
    await expect(page.getByText(/ID token was refused.*audience/i)).toBeVisible();
    expect((await page.request.get("/api/v1/me")).status()).toBe(401);
    await shot(page, "sso-wrong-audience");
  } finally {
    await mode(page, "ok");
  }
});

test("4. an expired ID token is refused", async ({ page }) => {
  await mode(page, "expired");
  try {
    await viaProvider(page, "mallory@acme.test");
    await expect(page.getByText(/ID token was refused.*expired/i)).toBeVisible();
    expect((await page.request.get("/api/v1/me")).status()).toBe(401);
  } finally {
    await mode(page, "ok");
  }
});

test("5. an organization that requires single sign-on refuses its member's API key at the sign-in page", async ({ page }) => {
  await page.goto("/");
  await page.getByLabel("API key").fill(process.env.HALYARD_BOB_KEY ?? "bob-secret-key");
  await page.getByRole("button", { name: "Sign in", exact: true }).click();
  await expect(page.getByText("organization acme signs its members in through single sign-on")).toBeVisible();
  // Alice, in no such organization, signs in with hers.
  await page.getByLabel("API key").fill(process.env.HALYARD_ALICE_KEY ?? "alice-secret-key");
  await page.getByRole("button", { name: "Sign in", exact: true }).click();
  await expect(page.getByRole("heading", { name: "Conversations" })).toBeVisible();
});

test("6. a verified root@ at an admitted domain is not root: the name is taken, by an administrator", async ({ page }) => {
  await viaProvider(page, "root@acme.test");
  await expect(page.getByRole("heading", { name: "Conversations" })).toBeVisible();
  await expect(page.locator(".who")).toHaveText("root-2");
  const me = await (await page.request.get("/api/v1/me")).json();
  expect([me.user, me.admin]).toEqual(["root-2", false]);
  expect((await page.request.get("/api/v1/admin/users")).status()).toBe(403);
});

test("7. an unverified address names nobody: admitted by its group, named after the identity", async ({ page }) => {
  await viaProvider(page, "unverified:root@contractors.test");
  await expect(page.getByRole("heading", { name: "Conversations" })).toBeVisible();
  const me = await (await page.request.get("/api/v1/me")).json();
  expect(me.user).toMatch(/^sso-[0-9a-f]{10}$/);
  expect(me.admin).toBe(false);
});

test("8. a stranger the deployment does not admit is refused; a user made for their address signs in", async ({ page, browser }) => {
  await viaProvider(page, "mallory@elsewhere.test");
  await expect(page.getByText(/not among those this deployment admits/)).toBeVisible();
  expect((await page.request.get("/api/v1/me")).status()).toBe(401);
  await shot(page, "sso-not-admitted");
  // Another browser (the provider remembers who signed in at it in this one).
  const frank = await browser.newPage();
  await viaProvider(frank, "frank@partner.test");
  await expect(frank.locator(".who")).toHaveText("frank");
  await frank.close();
});

test("9. a callback this browser did not start shows nothing of its query, and return_to stays on this site", async ({ page }) => {
  await page.goto("/api/v1/auth/sso/callback?error=access_denied&error_description=evil-description%20visit%20evil.example");
  await expect(page.getByText(/this sign-in expired or was not started here/)).toBeVisible();
  await expect(page.getByText(/evil/)).toHaveCount(0);
  // A return path a browser would read as another site's is home instead.
  await page.goto("/api/v1/auth/sso/start?return_to=/%09/evil.example");
  await atProvider(page, "carol@acme.test");
  await expect(page.locator(".who")).toHaveText("carol");
  expect(new URL(page.url()).origin).toBe(new URL(process.env.HALYARD_URL ?? "http://127.0.0.1:3000").origin);
  expect(new URL(page.url()).pathname).toBe("/");
});

test("10. a Slack link is made on Slack's word: signed in to Slack as someone else, nothing is linked; as that user, it is", async ({ page }) => {
  const slack = await slackWebApi();
  try {
    // Alice's Slack automation (with her key, through the API).
    const signing = "8f742231b10e8888abcd99yyyzzz85a5";
    const trigger = { kind: "slack", signing_secret: signing, bot_token: "xoxb-1-2-3", channels: { C0123ABC: null }, users: {}, api_url: slack.url };
    const alice = { authorization: `Bearer ${process.env.HALYARD_ALICE_KEY ?? "alice-secret-key"}`, "content-type": "application/json" };
    const made = await fetch(`${process.env.HALYARD_DIRECT_URL}/api/v1/automations`, { method: "POST", headers: alice, body: JSON.stringify({ name: "Team bot", trigger }) });
    const automation = await made.json();
    expect(made.status, JSON.stringify(automation)).toBe(201);
    const link = await mentionFrom(slack, automation.hook_url, signing, "U0999XYZ", "T0001");

    // Carol follows it: she links by signing in to Slack.
    await viaProvider(page, "carol@acme.test");
    await expect(page.locator(".who")).toHaveText("carol");
    await page.goto(link);
    await expect(page.getByText("You will sign in to Slack to prove it")).toBeVisible();
    await page.getByLabel(/Let this automation run agents as me/).check();
    await page.getByRole("button", { name: "Sign in with Slack and link" }).click();
    await atProvider(page, "T0001/U0777AAA", SLACK);
    await expect(page.getByText(/you signed in to Slack as U0777AAA of workspace T0001, but this link is for U0999XYZ/)).toBeVisible();
    await shot(page, "slack-link-refused");
    // As that Slack user: linked, and the automation runs as her.
    await page.getByLabel(/Let this automation run agents as me/).check();
    await page.getByRole("button", { name: "Sign in with Slack and link" }).click();
    await atProvider(page, "T0001/U0999XYZ", SLACK);
    await expect(page.getByRole("status")).toContainText("is carol");
    await expect(page.getByRole("status")).toContainText("it runs as you");
    await shot(page, "slack-linked");
    const shown = await (await fetch(`${process.env.HALYARD_DIRECT_URL}/api/v1/automations/${automation.id}`, { headers: alice })).json();
    expect(shown.trigger.users).toEqual({ U0999XYZ: "carol" });
  } finally {
    slack.close();
  }
});
