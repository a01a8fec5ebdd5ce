// The settings as a person sets them up, in Chromium, against a real Halyard and a scripted LLM
// (tests/tests/browser.rs starts both): every section creates, edits and deletes, a secret's or
// a key's value is never shown back, a profile's Test makes a real call, a new API key works
// once made and stops working when revoked. The tests run in order, in one signed-in page each.

import { expect, expectConsoleError, test, type Page } from "./fixtures";

const ALICE = process.env.HALYARD_ALICE_KEY ?? "alice-secret-key";
const shot = (page: Page, name: string) => page.screenshot({ path: `test-results/screenshots/${name}.png`, fullPage: true });

async function settings(page: Page) {
  await page.goto("/");
  await page.getByLabel("API key").fill(ALICE);
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page.getByRole("heading", { name: "Conversations" })).toBeVisible();
  await page.getByRole("link", { name: "Settings" }).click();
  await expect(page.getByRole("heading", { name: "Settings", level: 1 })).toBeVisible();
}

const section = (page: Page, name: string) => page.getByRole("region", { name, exact: true });

test("1. an LLM profile: added with a key never shown, tested with a real call, edited, deleted", async ({ page }) => {
  await settings(page);
  const s = section(page, "LLM profiles");
  const form = s.getByRole("form", { name: "New LLM profile" });
  await form.getByLabel("Name", { exact: true }).fill("scripted");
  await form.getByLabel("Base URL").fill(process.env.HALYARD_LLM_URL!);
  await form.getByLabel("Model").fill("scripted-model");
  await form.getByLabel("API key").fill("sk-profile-secret");
  await form.getByRole("button", { name: "Add profile" }).click();
  const row = s.getByRole("listitem").filter({ hasText: "scripted" });
  await expect(row).toContainText("scripted-model");
  await expect(row).toContainText("key stored");
  await expect(form.getByLabel("API key")).toHaveValue("");
  expect(await page.content()).not.toContain("sk-profile-secret");

  await row.getByRole("button", { name: "Test" }).click();
  await expect(s.getByTestId("test-scripted")).toContainText("Answered “OK”");

  // A profile whose server is not there says so in words.
  await form.getByLabel("Name", { exact: true }).fill("nowhere");
  await form.getByLabel("Base URL").fill("http://127.0.0.1:9/v1");
  await form.getByLabel("Model").fill("none");
  await form.getByRole("button", { name: "Add profile" }).click();
  await s.getByRole("listitem").filter({ hasText: "nowhere" }).getByRole("button", { name: "Test" }).click();
  await expect(s.getByTestId("test-nowhere")).toContainText("Failed:");

  await row.getByRole("button", { name: "Edit" }).click();
  const edit = s.getByRole("form", { name: "Edit LLM profile scripted" });
  await expect(edit.getByLabel("Name")).toHaveValue("scripted");
  await edit.getByLabel("Model").fill("scripted-model-2");
  await edit.getByRole("button", { name: "Save profile" }).click();
  await expect(row).toContainText("scripted-model-2");
  // The key was kept: the field was left empty.
  await expect(row).toContainText("key stored");

  // The models the server lists (the scripted LLM's GET /v1/models) fill a picker; the one picked
  // is the profile's model. Fallbacks and the tool set are kept with it.
  await row.getByRole("button", { name: "Edit" }).click();
  await edit.getByRole("button", { name: "List models" }).click();
  await expect(edit.getByTestId("models-note")).toHaveText("2 models offered.");
  await edit.getByLabel("Models the server offers").selectOption("scripted-small");
  await expect(edit.getByLabel("Model", { exact: true })).toHaveValue("scripted-small");
  await edit.getByLabel("Fallbacks").fill("nowhere");
  await edit.getByLabel("Tools").selectOption("gpt5");
  await edit.getByLabel("Reasoning effort").selectOption("high");
  await edit.getByRole("button", { name: "Save profile" }).click();
  await expect(row).toContainText("scripted-small");
  await expect(row).toContainText("falls back to nowhere");
  await expect(row).toContainText("tools: gpt5");
  const saved = await (await page.request.get("/api/v1/llm-profiles/scripted")).json();
  expect([saved.model, saved.fallbacks, saved.tools, saved.reasoning_effort, saved.has_api_key]).toEqual([
    "scripted-small",
    ["nowhere"],
    "gpt5",
    "high",
    true,
  ]);
  await shot(page, "settings-profiles");

  // (The profile `scripted` names it as a fallback: its row is found by its name alone.)
  const gone = s.getByRole("listitem").filter({ has: page.locator("strong").getByText("nowhere", { exact: true }) });
  await gone.getByRole("button", { name: "Delete LLM profile nowhere" }).click();
  await gone.getByRole("button", { name: "Delete", exact: true }).click();
  await expect(gone).toHaveCount(0);
});

test("2. a secret: stored, never shown, replaced, deleted", async ({ page }) => {
  await settings(page);
  const s = section(page, "Secrets");
  const form = s.getByRole("form", { name: "Store a secret" });
  await form.getByLabel("Name", { exact: true }).fill("API_TOKEN");
  await form.getByLabel("Value").fill("s3cr3t-value-xyz");
  await form.getByLabel("Description").fill("the test API");
  await form.getByRole("button", { name: "Store secret" }).click();
  const row = s.getByRole("listitem").filter({ hasText: "API_TOKEN" });
  await expect(row).toContainText("the test API");
  await expect(form.getByLabel("Value")).toHaveValue("");
  expect(await page.content()).not.toContain("s3cr3t-value-xyz");
  await page.reload();
  await expect(row).toBeVisible();
  expect(await page.content()).not.toContain("s3cr3t-value-xyz");

  await row.getByRole("button", { name: "Replace" }).click();
  await expect(form.getByLabel("Name", { exact: true })).toHaveValue("API_TOKEN");
  await expect(form.getByLabel("Value")).toHaveValue("");
  await form.getByLabel("Value").fill("an0ther-value-123");
  await form.getByLabel("Description").fill("replaced");
  await form.getByRole("button", { name: "Store secret" }).click();
  await expect(row).toContainText("replaced");
  expect(await page.content()).not.toContain("an0ther-value-123");
  await shot(page, "settings-secrets");

  await row.getByRole("button", { name: "Delete secret API_TOKEN" }).click();
  await row.getByRole("button", { name: "Delete", exact: true }).click();
  await expect(s.getByRole("listitem").filter({ hasText: "API_TOKEN" })).toHaveCount(0);
});

test("3. a git provider: added with a token never shown, edited, deleted", async ({ page }) => {
  await settings(page);
  const s = section(page, "Git providers");
  const form = s.getByRole("form", { name: "Add or change a git provider" });
  await form.getByLabel("Name", { exact: true }).fill("forge");
  await form.getByLabel("Kind", { exact: true }).selectOption("generic");
  await form.getByLabel("Host", { exact: true }).fill("git.example.com");
  await form.getByLabel("Token", { exact: true }).fill("tok-never-shown-42");
  await form.getByRole("button", { name: "Save provider" }).click();
  const row = s.getByRole("listitem").filter({ hasText: "forge" });
  await expect(row).toContainText("git.example.com");
  expect(await page.content()).not.toContain("tok-never-shown-42");
  await row.getByRole("button", { name: "Edit" }).click();
  await form.getByLabel("Host", { exact: true }).fill("git2.example.com");
  await form.getByRole("button", { name: "Save provider" }).click();
  // The token was given for the old host: moving the provider asks for it again.
  await expect(s.getByText("send the token again")).toBeVisible();
  await expect(row).toContainText("git.example.com");
  await form.getByLabel("Token", { exact: true }).fill("tok-never-shown-43");
  await form.getByRole("button", { name: "Save provider" }).click();
  await expect(row).toContainText("git2.example.com");
  await row.getByRole("button", { name: "Delete git provider forge" }).click();
  await row.getByRole("button", { name: "Delete", exact: true }).click();
  await expect(s.getByRole("listitem").filter({ hasText: "forge" })).toHaveCount(0);
});

test("4. an MCP server: added, edited, deleted", async ({ page }) => {
  await settings(page);
  const s = section(page, "MCP servers");
  const form = s.getByRole("form", { name: "Add or change an MCP server" });
  await form.getByLabel("Name", { exact: true }).fill("time");
  await form.getByLabel("Command", { exact: true }).fill("/opt/halyard-mcp/bin/mcp-server-time");
  await form.getByRole("button", { name: "Save server" }).click();
  const row = s.getByRole("listitem").filter({ hasText: "time" });
  await expect(row).toContainText("mcp-server-time");
  // A stdio server is tested where it runs: the Test says so, in words.
  await row.getByRole("button", { name: "Test" }).click();
  await expect(s.getByTestId("mcp-test-time")).toContainText("conversation's sandbox");
  await row.getByRole("button", { name: "Edit" }).click();
  await form.getByLabel("Transport", { exact: true }).selectOption("http");
  await form.getByLabel("URL", { exact: true }).fill("https://mcp.example.com/mcp");
  await form.getByRole("button", { name: "Save server" }).click();
  await expect(row).toContainText("https://mcp.example.com/mcp");
  await row.getByRole("button", { name: "Delete MCP server time" }).click();
  await row.getByRole("button", { name: "Delete", exact: true }).click();
  await expect(s.getByRole("listitem").filter({ hasText: "time" })).toHaveCount(0);
});

test("5. defaults: saved and kept", async ({ page }) => {
  await settings(page);
  const s = section(page, "Defaults");
  await s.getByLabel("LLM profile").selectOption("scripted");
  await s.getByLabel("Confirmation policy").selectOption("risky");
  await s.getByLabel("Most steps per run").fill("40");
  await s.getByRole("button", { name: "Save defaults" }).click();
  await expect(s.getByRole("status")).toHaveText("Saved.");
  await page.reload();
  await expect(s.getByLabel("LLM profile")).toHaveValue("scripted");
  await expect(s.getByLabel("Confirmation policy")).toHaveValue("risky");
  await expect(s.getByLabel("Most steps per run")).toHaveValue("40");
  // The API says the same.
  const saved = await (await page.request.get("/api/v1/settings")).json();
  expect([saved.llm_profile, saved.confirmation_policy, saved.max_iterations]).toEqual(["scripted", "risky", 40]);
});

test("6. an API key of one's own: made and shown once, used, revoked", async ({ page, playwright }) => {
  await settings(page);
  const s = section(page, "API keys");
  const form = s.getByRole("form", { name: "New API key" });
  await form.getByLabel("Key name").fill("laptop");
  await form.getByRole("button", { name: "Create key" }).click();
  const key = (await s.getByTestId("new-key").textContent())!;
  expect(key.length).toBeGreaterThan(20);
  const row = s.getByRole("listitem").filter({ hasText: "laptop" });
  await expect(row).toContainText("full");
  // It works as a key, from outside the browser.
  const outside = await playwright.request.newContext({ baseURL: process.env.HALYARD_URL });
  const me = await outside.get("/api/v1/me", { headers: { authorization: `Bearer ${key}` } });
  expect(me.status()).toBe(200);
  expect((await me.json()).user).toBe("alice");
  await s.getByRole("button", { name: "Done" }).click();
  await expect(s.getByTestId("new-key")).toHaveCount(0);
  await page.reload();
  expect(await page.content()).not.toContain(key);
  await shot(page, "settings-keys");

  await row.getByRole("button", { name: "Delete API key laptop" }).click();
  await row.getByRole("button", { name: "Delete", exact: true }).click();
  await expect(s.getByRole("listitem").filter({ hasText: "laptop" })).toHaveCount(0);
  expect((await outside.get("/api/v1/me", { headers: { authorization: `Bearer ${key}` } })).status()).toBe(401);
});

test("7. every field has a label a screen reader reads", async ({ page }) => {
  await settings(page);
  const unlabelled = await page.evaluate(() =>
    Array.from(document.querySelectorAll("main input, main select, main textarea, .settings input, .settings select"))
      .filter((el) => !(el as HTMLInputElement).labels?.length && !el.getAttribute("aria-label"))
      .map((el) => el.outerHTML),
  );
  expect(unlabelled).toEqual([]);
});

test("8. a new conversation picks a repository the token reaches, its branch and a profile", async ({ page }) => {
  await settings(page);
  const s = section(page, "Git providers");
  const form = s.getByRole("form", { name: "Add or change a git provider" });
  await form.getByLabel("Name", { exact: true }).fill("work");
  await form.getByLabel("Kind", { exact: true }).selectOption("github");
  await form.getByLabel("Host", { exact: true }).fill(process.env.HALYARD_GITHUB_HOST!);
  await form.getByLabel("API URL", { exact: true }).fill(process.env.HALYARD_GITHUB_API!);
  await form.getByLabel("Token", { exact: true }).fill(process.env.HALYARD_GITHUB_TOKEN!);
  await form.getByRole("button", { name: "Save provider" }).click();
  const row = s.getByRole("listitem").filter({ hasText: "work" });
  await row.getByRole("button", { name: "Repositories" }).click();
  await expect(s.getByTestId("repos-work")).toHaveText("alice/halyard, alice/dotfiles");

  await page.getByRole("link", { name: "Conversations" }).click();
  await page.getByRole("link", { name: "New conversation" }).click();
  await page.getByLabel("What should the agent do?").fill("look at the repository");
  await page.getByLabel("URL").fill("halyard");
  const clone = `http://${process.env.HALYARD_GITHUB_HOST}/alice/halyard.git`;
  await expect(page.getByTestId("repo-choices").locator("option")).toHaveCount(1);
  await expect(page.getByTestId("repo-choices").locator("option")).toHaveAttribute("value", clone);
  await page.getByLabel("URL").fill(clone);
  // Its branches, the default filled in.
  await expect(page.getByLabel("Branch")).toHaveValue("main");
  await expect(page.getByTestId("branch-choices").locator("option")).toHaveAttribute("value", "main");
  await page.getByLabel("LLM").selectOption("scripted");
  const started = page.waitForRequest((r) => r.url().endsWith("/api/v1/conversations") && r.method() === "POST");
  await page.getByRole("button", { name: "Start" }).click();
  expect((await started).postDataJSON()).toMatchObject({
    message: "look at the repository",
    repository: { url: clone, branch: "main" },
    llm_profile: "scripted",
  });
});

test("9. an administrator adds a user, issues a key, disables and enables, revokes, registers an agent for everyone; others see no Users page", async ({ page, playwright }) => {
  await settings(page);
  await page.getByRole("link", { name: "Users" }).click();
  await expect(page.getByRole("heading", { name: "Users" })).toBeVisible();
  const form = page.getByRole("form", { name: "New user" });
  await form.getByLabel("Name").fill("carol");
  await form.getByRole("button", { name: "Add user" }).click();
  const row = page.getByRole("row").filter({ hasText: "carol" });
  await expect(row).toContainText("user");
  await row.getByRole("button", { name: "Make carol an administrator" }).click();
  await expect(row).toContainText("administrator");
  await row.getByRole("button", { name: "Make carol a user" }).click();
  await expect(row.getByRole("cell").nth(1)).toHaveText("user");

  await row.getByRole("button", { name: "Keys of carol" }).click();
  const keys = page.getByRole("region", { name: "API keys of carol" });
  await keys.getByLabel("Key name").fill("carol's laptop");
  await keys.getByRole("button", { name: "Issue key" }).click();
  const key = (await keys.getByTestId("issued-key").textContent())!;
  const outside = await playwright.request.newContext({ baseURL: process.env.HALYARD_URL });
  const me = () => outside.get("/api/v1/me", { headers: { authorization: `Bearer ${key}` } });
  expect((await (await me()).json()).user).toBe("carol");
  await expect(row.getByRole("cell").nth(3)).toHaveText("1");

  await row.getByRole("button", { name: "Disable carol" }).click();
  await expect(row).toContainText("disabled");
  expect((await me()).status()).toBe(401);
  await row.getByRole("button", { name: "Enable carol" }).click();
  await expect(row).toContainText("active");
  expect((await me()).status()).toBe(200);
  await keys.getByRole("button", { name: "Revoke carol's laptop" }).click();
  await expect(keys).toContainText("revoked");
  expect((await me()).status()).toBe(401);
  await shot(page, "admin-users");

  // An agent for everyone's conversations: registered with its environment, whose value is never
  // shown again, then removed.
  const agents = page.getByRole("region", { name: "Registered agents" });
  const register = agents.getByRole("form", { name: "Register an agent" });
  await register.getByLabel("Agent name").fill("team-shell");
  await register.getByLabel("Title").fill("Team shell");
  await register.getByLabel("Command line").fill("exec /opt/team/agent --acp");
  await register.getByLabel(/^LLM wire/).fill("openai");
  await register.getByLabel(/^Environment/).fill("TEAM_TOKEN=never-shown-value-77");
  await register.getByRole("button", { name: "Register an agent" }).click();
  const agent = agents.getByRole("listitem").filter({ hasText: "team-shell" });
  await expect(agent).toContainText("Team shell · speaks openai");
  const listed = await (await page.request.get("/api/v1/agents")).json();
  expect(listed.items.find((a: { name: string }) => a.name === "team-shell").custom).toBe(true);
  expect(JSON.stringify(listed)).not.toContain("never-shown-value-77");
  expect(await page.content()).not.toContain("never-shown-value-77");
  await agent.getByRole("button", { name: "Remove team-shell" }).click();
  await expect(agents.getByRole("listitem").filter({ hasText: "team-shell" })).toHaveCount(0);

  // Bob is no administrator: no Users link, and the API refuses him.
  await page.getByRole("button", { name: "Sign out" }).click();
  await page.getByLabel("API key", { exact: true }).fill(process.env.HALYARD_BOB_KEY ?? "bob-secret-key");
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page.getByRole("heading", { name: "Conversations" })).toBeVisible();
  await expect(page.getByRole("link", { name: "Users" })).toHaveCount(0);
  await expect(page.getByRole("link", { name: "Audit" })).toHaveCount(0);
  expect((await page.request.get("/api/v1/admin/users")).status()).toBe(403);
  expect((await page.request.get("/api/v1/admin/audit")).status()).toBe(403);
});

test("10. an administrator reads the audit trail: what everyone did, filtered, exported, with no secret in it", async ({ page }) => {
  await settings(page);
  // Something worth recording: a secret stored (its value must never show).
  const stored = await page.request.put("/api/v1/secrets/AUDITED_TOKEN", { headers: { "x-halyard-csrf": "1" }, data: { value: "tok-never-shown-4471" } });
  expect(stored.status()).toBe(201);
  await page.getByRole("link", { name: "Audit" }).click();
  await expect(page.getByRole("heading", { name: "Audit" })).toBeVisible();
  const trail = page.getByRole("table", { name: "Audit trail" });
  // Newest first: the secret, and the sign-ins and users of the tests before.
  await expect(trail.getByRole("row").nth(1)).toContainText("secret.put");
  await expect(trail.getByRole("row").nth(1)).toContainText("AUDITED_TOKEN");
  await expect(trail).toContainText("session.create");
  await expect(trail).toContainText("user.create");
  await page.getByLabel("Action").fill("secret.");
  await page.getByRole("button", { name: "Filter" }).click();
  await expect(trail).not.toContainText("session.create");
  for (const row of await trail.getByRole("row").all()) await expect(row).toContainText(/Action|secret\./);
  await shot(page, "audit");
  const href = (await page.getByRole("link", { name: "Export JSON Lines" }).getAttribute("href"))!;
  expect(href).toContain("format=jsonl");
  const exported = await (await page.request.get(href)).text();
  const lines = exported.trim().split("\n").map((l) => JSON.parse(l));
  // Test 2's secret and this one, nothing else, newest first.
  expect(lines.every((l) => l.action.startsWith("secret."))).toBe(true);
  expect([lines[0].action, lines[0].target]).toEqual(["secret.put", "AUDITED_TOKEN"]);
  expect(await page.content()).not.toContain("tok-never-shown-4471");
  expect(exported).not.toContain("tok-never-shown-4471");
});

test("11. an organization: created, a member invited who accepts and is made an admin, the last owner cannot leave, what happened is shown", async ({ page, browser }) => {
  await settings(page);
  await page.getByRole("link", { name: "Organizations" }).click();
  await expect(page.getByText("You are in no organization.")).toBeVisible();
  await page.getByLabel("Organization name").fill("acme");
  await page.getByRole("button", { name: "Create organization" }).click();
  const members = page.getByRole("region", { name: "Members of acme" });
  const table = members.getByRole("table", { name: "Members" });
  await expect(table.getByRole("row").filter({ hasText: "alice" })).toContainText("owner");
  await members.getByLabel("User").fill("bob");
  await members.getByRole("button", { name: "Invite" }).click();
  // Invited, not a member: Bob says yes on his own page, told what joining exposes.
  await expect(table.getByRole("row").filter({ hasText: "bob" })).toContainText("invited as member");
  await expect(page.getByRole("list", { name: "Your organizations" })).toContainText("owner, 1 member");
  const bob = await (await browser.newContext()).newPage();
  await bob.goto("/");
  await bob.getByLabel("API key").fill(process.env.HALYARD_BOB_KEY ?? "bob-secret-key");
  await bob.getByRole("button", { name: "Sign in" }).click();
  await bob.getByRole("link", { name: "Organizations" }).click();
  const invitations = bob.getByRole("region", { name: "Invitations" });
  await expect(invitations).toContainText("acme as member, from alice");
  await expect(invitations).toContainText("its owners and admins read");
  await shot(bob, "invitation");
  await invitations.getByRole("button", { name: "Accept acme" }).click();
  await expect(bob.getByRole("list", { name: "Your organizations" })).toContainText("member, 2 members");
  await bob.close();
  await page.reload();
  await page.getByRole("button", { name: "Members of acme" }).click();
  await expect(members.getByLabel("Role of bob")).toHaveValue("member");
  await members.getByLabel("Role of bob").selectOption("admin");
  await expect(page.getByRole("list", { name: "Your organizations" })).toContainText("owner, 2 members");
  // The last owner stays, and says why.
  await members.getByRole("button", { name: "Leave acme" }).click();
  await expect(members.getByText("keeps at least one owner")).toBeVisible();
  // What happened in it, newest first.
  const trail = members.getByRole("table", { name: "Audit trail" });
  await expect(async () => {
    await members.getByRole("button", { name: "Filter" }).click();
    await expect(trail.getByRole("row").nth(1)).toContainText("org.member_role", { timeout: 1000 });
  }).toPass({ timeout: 15_000 });
  await expect(trail).toContainText("org.member_add");
  await expect(trail).toContainText("org.create");
  await shot(page, "organization");
  await members.getByRole("button", { name: "Remove bob" }).click();
  await expect(table.getByRole("row").filter({ hasText: "bob" })).toHaveCount(0);
  await expect(page.getByRole("list", { name: "Your organizations" })).toContainText("owner, 1 member");

  // A conversation started in it, on its profile.
  const profile = { base_url: process.env.HALYARD_LLM_URL, model: "team-model" };
  const made = await page.request.put("/api/v1/orgs/acme/llm-profiles/team", { headers: { "x-halyard-csrf": "1" }, data: profile });
  expect(made.status()).toBe(201);
  await page.getByRole("link", { name: "Conversations" }).click();
  await page.getByRole("link", { name: "New conversation" }).click();
  await page.getByLabel("What should the agent do?").fill("hello from the team");
  await page.getByLabel("Organization").selectOption("acme");
  // Said where the choice is made: what a conversation in the organization exposes to it.
  await expect(page.getByTestId("org-exposure")).toContainText("its owners and admins read");
  await page.getByLabel("LLM").selectOption("team");
  await page.getByRole("button", { name: "Start" }).click();
  await expect(page).toHaveURL(/\/c\/[0-9a-f-]{36}/);
  const id = page.url().match(/\/c\/([0-9a-f-]{36})/)![1];
  const started = await (await page.request.get(`/api/v1/conversations/${id}`)).json();
  expect(started.org).toBe("acme");
});

test("12. usage: this month's spend by day, by model and, for an administrator, by member", async ({ page }) => {
  await settings(page);
  // A conversation that makes an LLM call today.
  const started = await page.request.post("/api/v1/conversations", { headers: { "x-halyard-csrf": "1" }, data: { message: "say hello" } });
  expect(started.status()).toBe(202);
  const today = new Date().toISOString().slice(0, 10);
  await expect
    .poll(async () => ((await (await page.request.get("/api/v1/me/usage")).json()).total.tokens_in as number), { timeout: 20_000 })
    .toBeGreaterThan(0);
  await page.getByRole("link", { name: "Usage" }).click();
  await expect(page.getByRole("heading", { name: "Usage" })).toBeVisible();
  const byDay = page.getByRole("table", { name: "Your usage by day" });
  const row = byDay.getByRole("row").filter({ hasText: today });
  await expect(row).toBeVisible();
  const tokensIn = Number(await row.getByRole("cell").nth(1).textContent());
  expect(tokensIn).toBeGreaterThan(0);
  await expect(page.getByRole("status", { name: "Total" })).toContainText("LLM calls");
  await expect(page.getByRole("img", { name: "Cost by day" })).toBeVisible();
  await expect(page.getByRole("table", { name: "Usage by member" }).getByRole("row").filter({ hasText: "alice" })).toBeVisible();
  // The page's numbers are the API's (read again together: calls of test 11's conversation may
  // still be coming in).
  await expect(async () => {
    const report = await (await page.request.get("/api/v1/me/usage?group_by=day")).json();
    await page.reload();
    const shown = page.getByRole("table", { name: "Your usage by day" }).getByRole("row").filter({ hasText: today }).getByRole("cell").nth(1);
    await expect(shown).toHaveText(String(report.rows.find((r: { day: string }) => r.day === today).tokens_in), { timeout: 1000 });
  }).toPass({ timeout: 15_000 });
  await shot(page, "usage");
});

test("13. an organization's prices and budget: set on its page, the banner at 80 % and when it is spent", async ({ page }) => {
  await settings(page);
  await page.getByRole("link", { name: "Organizations" }).click();
  await page.getByRole("button", { name: "Members of acme" }).click();
  const card = page.getByRole("region", { name: "Settings of acme" });
  const prices = card.getByRole("table", { name: "Prices of acme" });
  await expect(prices.getByRole("row").filter({ hasText: /^gpt-4o-mini/ })).toContainText("builtin");
  await card.getByLabel("Model").fill("team-model");
  await card.getByLabel("Input per million").fill("100000");
  await card.getByLabel("Output per million").fill("100000");
  await card.getByRole("button", { name: "Set price" }).click();
  await expect(prices.getByRole("row").filter({ hasText: "team-model" })).toContainText("org");

  // A conversation in it on its profile, at that price; what it spent is the month's.
  const csrf = { "x-halyard-csrf": "1" };
  const started = await page.request.post("/api/v1/conversations", { headers: csrf, data: { message: "say hello", title: "priced", org: "acme", llm_profile: "team" } });
  expect(started.status()).toBe(202);
  const id = (await started.json()).conversation_id;
  await expect
    .poll(async () => (await (await page.request.get(`/api/v1/conversations/${id}`)).json()).execution_status, { timeout: 30_000 })
    .toBe("finished");
  const spent: number = (await (await page.request.get("/api/v1/orgs/acme/budget")).json()).org_budget.spent_usd;
  expect(spent).toBeGreaterThan(0);

  // A budget it is 85 % of: the banner says so on every page.
  await card.getByLabel("Monthly budget (USD)").fill((spent / 0.85).toFixed(6));
  await card.getByRole("button", { name: "Save settings of acme" }).click();
  await expect(card.getByText("Saved.")).toBeVisible();
  await expect(card.getByLabel("This month's spending")).toContainText("(85 %)");
  await page.getByRole("link", { name: "Conversations" }).click();
  const banner = page.getByRole("status", { name: "Budgets" });
  await expect(banner).toContainText(/Organization acme's monthly budget for \d{4}-\d{2} is 8[45] % spent/);

  // Half of it: spent. The banner says what that means, and a new conversation there is refused.
  await page.getByRole("link", { name: "Organizations" }).click();
  await page.getByRole("button", { name: "Members of acme" }).click();
  await card.getByLabel("Monthly budget (USD)").fill((spent / 2).toFixed(6));
  await card.getByRole("button", { name: "Save settings of acme" }).click();
  await expect(banner).toContainText("new conversations in acme are refused");
  await shot(page, "budget-banner");
  await page.getByRole("link", { name: "Conversations" }).click();
  await page.getByRole("link", { name: "New conversation" }).click();
  await page.getByLabel("What should the agent do?").fill("one more");
  await page.getByLabel("Organization").selectOption("acme");
  await page.getByRole("button", { name: "Start" }).click();
  await expect(page.getByText("monthly budget of $")).toBeVisible();
  // Without a budget again, for the tests after this one.
  const off = await page.request.put("/api/v1/orgs/acme/settings", { headers: csrf, data: {} });
  expect(off.status()).toBe(200);
});

test("14. a conversation shared with the organization: a member finds it, follows it read-only, and cannot act on it", async ({ page, browser }, testInfo) => {
  // When Alice stops sharing it, Bob's page finds its live stream refused (Chromium logs the
  // refused handshake) and says the conversation is gone.
  expectConsoleError(testInfo, /events\/ws.*Unexpected response code: 40[34]/);
  await settings(page);
  const csrf = { "x-halyard-csrf": "1" };
  expect((await page.request.post("/api/v1/orgs/acme/members", { headers: csrf, data: { user: "bob" } })).status()).toBe(202);
  // Alice starts it in acme, shared.
  await page.getByRole("link", { name: "Conversations" }).click();
  await page.getByRole("link", { name: "New conversation" }).click();
  await page.getByLabel("What should the agent do?").fill("say hello to the team");
  await page.getByLabel("Organization").selectOption("acme");
  await page.getByLabel("Share with acme: its members follow it, read-only").check();
  await page.getByRole("button", { name: "Start" }).click();
  await expect(page).toHaveURL(/\/c\/[0-9a-f-]{36}/);
  const id = page.url().match(/\/c\/([0-9a-f-]{36})/)![1];
  await expect(page.getByLabel("Shared with acme")).toBeChecked();

  // Bob, signed in elsewhere, finds it on the organization's page and opens it.
  const bob = await (await browser.newContext()).newPage();
  await bob.goto("/");
  await bob.getByLabel("API key").fill(process.env.HALYARD_BOB_KEY ?? "bob-secret-key");
  await bob.getByRole("button", { name: "Sign in" }).click();
  await bob.getByRole("link", { name: "Organizations" }).click();
  // Accepting opens the organization.
  await bob.getByRole("region", { name: "Invitations" }).getByRole("button", { name: "Accept acme" }).click();
  await bob.getByRole("region", { name: "Shared with acme" }).getByRole("link").first().click();
  await expect(bob).toHaveURL(new RegExp(`/c/${id}$`));
  await expect(bob.getByLabel("Shared by")).toContainText("alice's conversation, shared with acme · read only");
  await expect(bob.getByRole("status", { name: "Execution status" })).toContainText(/finished|idle/, { timeout: 30_000 });
  await expect(bob.locator(".msg.user .who").first()).toHaveText("alice");
  await expect(bob.getByRole("textbox", { name: /message/i })).toHaveCount(0);
  await shot(bob, "org-shared-conversation");
  // The API says the same: he reads, he does not act.
  const said = await bob.request.post(`/api/v1/conversations/${id}/messages`, { headers: csrf, data: { text: "bob was here" } });
  expect(said.status()).toBe(403);
  expect((await said.json()).error.code).toBe("read_only");

  // Alice stops sharing it: Bob's view says it is gone.
  await page.getByLabel("Shared with acme").uncheck();
  await expect.poll(async () => (await bob.request.get(`/api/v1/conversations/${id}`)).status(), { timeout: 10_000 }).toBe(404);
  await expect(bob.getByText("conversation not found")).toBeVisible({ timeout: 10_000 });
});

test("15. what an organization offers: a profile, a secret never shown again, an MCP server, an agent of its own; who may issue keys", async ({ page }) => {
  await settings(page);
  await page.getByRole("link", { name: "Organizations" }).click();
  await page.getByRole("button", { name: "Members of acme" }).click();
  const offers = page.getByRole("region", { name: "What acme offers" });
  const secrets = offers.getByRole("region", { name: "Secrets of acme" });
  await secrets.getByLabel("Secret name").fill("TEAM_TOKEN");
  await secrets.getByLabel("Secret value").fill("team-secret-value-7781");
  await secrets.getByLabel("Description").fill("the team's CI token");
  await secrets.getByRole("button", { name: "Store a secret" }).click();
  await expect(secrets.getByRole("listitem").filter({ hasText: "TEAM_TOKEN" })).toContainText("the team's CI token");
  const mcp = offers.getByRole("region", { name: "MCP servers of acme" });
  await mcp.getByLabel("Server name").fill("docs");
  await mcp.getByLabel("Server URL").fill("https://mcp.example.com/mcp");
  await mcp.getByRole("button", { name: "Add an MCP server" }).click();
  await expect(mcp.getByRole("listitem").filter({ hasText: "docs" })).toContainText("https://mcp.example.com/mcp");
  const profiles = offers.getByRole("region", { name: "LLM profiles of acme" });
  await expect(profiles.getByRole("listitem").filter({ hasText: "team" })).toContainText("team-model");
  await profiles.getByLabel("Profile name").fill("second");
  await profiles.getByLabel("Base URL").fill(process.env.HALYARD_LLM_URL!);
  await profiles.getByLabel("Model").fill("second-model");
  await profiles.getByRole("button", { name: "Add an LLM profile" }).click();
  await expect(profiles.getByRole("listitem").filter({ hasText: "second" })).toContainText("second-model");
  // An agent of its own: conversations in acme name it @acme/reviewer; its environment's values
  // are shown to nobody, and a wire no profile speaks is refused in words.
  const agents = offers.getByRole("region", { name: "Agents of acme" });
  await agents.getByLabel("Agent name").fill("reviewer");
  await agents.getByLabel("Title").fill("Team reviewer");
  await agents.getByLabel("Command line").fill("exec /opt/halyard-agents/bin/opencode-acp");
  await agents.getByLabel(/LLM wire/).fill("telepathy");
  await agents.getByLabel(/Environment/).fill("REVIEW_TOKEN=agent-env-value-5521\nOPENAI_BASE_URL=${HALYARD_LLM_BASE}/v1");
  await agents.getByRole("button", { name: "Register an agent" }).click();
  await expect(agents.getByText(/`wire`/)).toBeVisible();
  await agents.getByLabel(/LLM wire/).fill("openai-responses");
  await agents.getByRole("button", { name: "Register an agent" }).click();
  const reviewer = agents.getByRole("listitem").filter({ hasText: "@acme/reviewer" });
  await expect(reviewer).toContainText("Team reviewer · speaks openai-responses");
  await expect(reviewer).toContainText("env OPENAI_BASE_URL, REVIEW_TOKEN");
  expect(await (await page.request.get("/api/v1/orgs/acme/agents")).text()).not.toContain("agent-env-value-5521");
  await reviewer.getByRole("button", { name: "Remove @acme/reviewer" }).click();
  await expect(reviewer).toHaveCount(0);
  // The value is nowhere on the page, nor in what the API answers.
  await page.reload();
  await page.getByRole("button", { name: "Members of acme" }).click();
  await expect(page.getByRole("region", { name: "Secrets of acme" })).toContainText("TEAM_TOKEN");
  expect(await page.content()).not.toContain("team-secret-value-7781");
  expect(await (await page.request.get("/api/v1/orgs/acme/secrets")).text()).not.toContain("team-secret-value-7781");
  // Keys: owners and admins only.
  const card = page.getByRole("region", { name: "Settings of acme" });
  await card.getByLabel("Who may issue API keys").selectOption("admins");
  await card.getByRole("button", { name: "Save settings of acme" }).click();
  await expect(card.getByText("Saved.")).toBeVisible();
  expect((await (await page.request.get("/api/v1/orgs/acme/settings")).json()).key_issuers).toBe("admins");
  await shot(page, "organization-offers");
  await page.getByRole("region", { name: "Secrets of acme" }).getByRole("button", { name: "Remove TEAM_TOKEN" }).click();
  await expect(page.getByRole("region", { name: "Secrets of acme" }).getByRole("listitem").filter({ hasText: "TEAM_TOKEN" })).toHaveCount(0);
});

test("16. a subscription login: handed to Claude Code with what that means said, never shown, taken back", async ({ page }) => {
  const token = "sk-ant-oat01-browser-login-token-9k2q";
  await settings(page);
  const s = section(page, "Subscription logins");
  const claude = s.getByRole("listitem").filter({ hasText: "Claude Code" });
  await expect(claude).toContainText("none");
  await expect(claude).toContainText("It never enters the sandbox");
  const form = claude.getByRole("form", { name: "Claude Code login" });
  await form.getByLabel("Claude Code credential").fill(token);
  await form.getByRole("button", { name: "Hand over login" }).click();
  await expect(claude).toContainText("handed over · ends in …9k2q");
  await expect(form.getByLabel("Claude Code credential")).toHaveValue("");
  expect(await page.content()).not.toContain(token);
  await page.reload();
  await expect(claude).toContainText("handed over");
  expect(await page.content()).not.toContain(token);
  // The API says the same: Claude Code's calls carry it now.
  const agents = await (await page.request.get("/api/v1/agents")).json();
  expect(agents.items.find((a: { name: string }) => a.name === "claude-code").logged_in).toBe(true);
  await shot(page, "settings-agent-login");

  await claude.getByRole("button", { name: "Delete Claude Code login" }).click();
  await claude.getByRole("button", { name: "Delete", exact: true }).click();
  await expect(claude).toContainText("none");
});
