// Single sign-on in Chromium, through a real OpenID provider (npm's certified oidc-provider,
// which tests/tests/browser.rs starts with Halyard): a first sign-in makes the user and places
// them in the organizations their e-mail domain or groups claim say; an ID token for another
// audience, or an expired one, is refused with the reason on the sign-in page; an organization
// that requires single sign-on refuses its members' API-key sign-in to the page.

import { expect, test, type Page } from "@playwright/test";

const PROVIDER = process.env.HALYARD_OIDC_URL!;
const shot = (page: Page, name: string) => page.screenshot({ path: `test-results/screenshots/${name}.png`, fullPage: true });

/** Signs in at the provider as `login` (its development login form takes any password). */
async function viaProvider(page: Page, login: string) {
  await page.goto("/");
  await page.getByRole("link", { name: "Sign in with single sign-on" }).click();
  await expect(page).toHaveURL(new RegExp(`^${PROVIDER}/`));
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
