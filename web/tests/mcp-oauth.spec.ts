// Signing in to an MCP server that wants OAuth, as a person does it: the run's `mcp_auth_required`
// link opens Settings saying which server wants it; Sign in goes through the server's own
// authorization server (npm's oidc-provider, found from the server's metadata, Halyard registered
// there on the spot), its login form and its consent page, and back to Settings, signed in. tests/tests/browser.rs
// starts the authorization server and the MCP server (the Python SDK's, checking tokens by
// introspection), and checks afterwards that conversations use the sign-in and refresh it. An
// organization's server is signed in to by its owner on the Organizations page, for everyone.

import { expect, test } from "./fixtures";
import { signIn } from "./alice";

const LINK = process.env.HALYARD_SIGN_IN_LINK ?? "";
const LOGIN = process.env.HALYARD_PROVIDER_LOGIN ?? "";

test("an MCP server's sign-in link leads to Settings, and Sign in there goes through its authorization server and back", async ({ page }) => {
  await signIn(page);
  // The link of the run's mcp_auth_required event.
  await page.goto(LINK);
  await expect(page.getByTestId("mcp-sign-in-status")).toHaveText("notes wants you to sign in.");
  const notes = page.getByRole("list", { name: "Your MCP servers" }).getByRole("listitem").filter({ hasText: "notes" });
  await expect(notes.getByRole("button", { name: "Sign out" })).toHaveCount(0);
  await notes.getByRole("button", { name: "Sign in" }).click();

  // The authorization server's own login form (any password).
  await page.locator('input[name="login"]').fill(LOGIN);
  await page.locator('input[name="password"]').fill("any password");
  await page.locator('button[type="submit"]').click();
  // Its consent page: Halyard asks for the server's scope.
  await expect(page.getByRole("heading", { name: "Authorize" })).toBeVisible();
  await expect(page.getByRole("listitem").filter({ hasText: /^notes$/ }).first()).toBeVisible();
  await page.getByRole("button", { name: "Continue" }).click();

  await expect(page.getByTestId("mcp-sign-in-status")).toHaveText("Signed in to notes.");
  await expect(page).toHaveURL(/\/settings\?mcp_signed_in=notes/);
  await expect(notes.getByTestId("mcp-signed-in-notes")).toContainText("Signed in at http://127.0.0.1:");
  await expect(notes.getByRole("button", { name: "Sign out" })).toBeVisible();
});

test("an organization's MCP server is signed in to for everyone by its owner, from the Organizations page", async ({ page }) => {
  await signIn(page);
  await page.getByRole("link", { name: "Organizations" }).click();
  await page.getByRole("button", { name: "Members of acme" }).click();
  const offers = page.getByRole("region", { name: "What acme offers" });
  await offers.getByRole("button", { name: "Sign in to team-notes" }).click();

  await page.locator('input[name="login"]').fill("team-bot@acme.test");
  await page.locator('input[name="password"]').fill("any password");
  await page.locator('button[type="submit"]').click();
  await page.getByRole("button", { name: "Continue" }).click();

  await expect(page).toHaveURL(/\/orgs\?org=acme&mcp_signed_in=team-notes/);
  await expect(offers.getByTestId("org-mcp-signed-in-team-notes")).toContainText("Signed in at http://127.0.0.1:");
  await expect(offers.getByRole("button", { name: "Sign in to team-notes" })).toHaveCount(0);
});
