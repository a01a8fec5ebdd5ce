// Plugins as a person manages them: a marketplace added on its page shows what each plugin would
// add before anything is installed; a plugin installed with a click; its author publishes a new
// version, which a check offers and only an upgrade applies; a conversation then has the new
// version. tests/tests/browser.rs serves the marketplace with git's http-backend (private: Alice
// has a git provider for it) and passes where its working copy is, to publish from.

import { execSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { expect, test } from "./fixtures";
import { call, signIn } from "./alice";

const URL = process.env.HALYARD_MARKETPLACE_URL ?? "";
const SRC = process.env.HALYARD_MARKETPLACE_SRC ?? "";
const BARE = process.env.HALYARD_MARKETPLACE_BARE ?? "";

test("a marketplace added on the Plugins page offers its plugins, one is installed, and an update is applied with a click", async ({ page }) => {
  await signIn(page);
  await page.getByRole("link", { name: "Plugins" }).click();
  await expect(page.getByRole("heading", { name: "Plugins" })).toBeVisible();
  await expect(page.getByText("No marketplaces added here yet.")).toBeVisible();

  const form = page.getByRole("form", { name: "Add a marketplace" });
  await form.getByLabel(/Marketplace repository/).fill(URL);
  await form.getByRole("button", { name: "Add marketplace" }).click();
  const market = page.getByRole("region", { name: "Marketplace acme-tools" });
  await expect(market).toBeVisible();
  // What kit would add, before it is installed.
  const kit = market.getByRole("row").filter({ hasText: "kit" }).first();
  await expect(kit.getByText("Commands: /review")).toBeVisible();
  await expect(kit.getByText("Agents: reviewer")).toBeVisible();
  await expect(kit.getByText("Hooks: PreToolUse")).toBeVisible();
  await expect(kit.getByText("MCP servers: weather")).toBeVisible();
  await expect(kit.getByText("Skills: kit:release-notes")).toBeVisible();

  await kit.getByRole("button", { name: "Install kit" }).click();
  const installed = page.getByRole("table", { name: "Installed plugins" }).getByRole("row").filter({ hasText: "kit@acme-tools" });
  await expect(installed.getByText("1.0.0")).toBeVisible();
  await expect(installed.getByText("up to date")).toBeVisible();
  await expect(kit.getByText("installed")).toBeVisible();

  // The author publishes 1.1.0: nothing changes until a check offers it, and an upgrade applies it.
  writeFileSync(`${SRC}/plugins/kit/.claude-plugin/plugin.json`, JSON.stringify({ name: "kit", version: "1.1.0" }));
  execSync(`git -c user.name=t -c user.email=t@example.com commit -qam 1.1.0 && git push -q '${BARE}' main`, { cwd: SRC });
  await page.reload();
  await expect(installed.getByText("up to date")).toBeVisible();
  await page.getByRole("button", { name: "Check acme-tools for updates" }).click();
  await expect(installed.getByText("Update available: 1.1.0")).toBeVisible();
  await expect(installed.getByText("1.0.0")).toBeVisible();
  await installed.getByRole("button", { name: "Upgrade kit" }).click();
  await expect(installed.getByText("1.1.0")).toBeVisible();
  await expect(installed.getByText("up to date")).toBeVisible();

  // A conversation now has 1.1.0, and its /review expands.
  const start = await call("POST", "/conversations", { message: "/review a.rs" });
  expect(start.status).toBe(202);
  const id = start.body.conversation_id;
  await expect
    .poll(async () => (await call("GET", `/conversations/${id}/events`)).body.items?.find((e: { kind: string }) => e.kind === "conversation_started")?.plugins?.[0]?.version, {
      timeout: 30_000,
    })
    .toBe("1.1.0");
  const events = (await call("GET", `/conversations/${id}/events`)).body.items;
  const message = events.find((e: { kind: string }) => e.kind === "user_message");
  expect(message.command).toBe("/review a.rs");
  expect(message.text).toBe("Review a.rs with care. Focus: a.rs");
});
