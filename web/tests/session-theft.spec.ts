// An app the agent serves tries to get the signed-in user's session: it answers the proxied
// visit with a redirect to its direct address, and the person then follows every address the
// app could name (its port on the host the workspace is served from, on `localhost`, and where
// the sandbox publishes it). tests/tests/browser.rs starts Halyard with one sandbox kind, runs
// this spec, and reads what the app received (HALYARD_REPORT says where to find it).

import { writeFileSync } from "node:fs";
import { expect, test } from "@playwright/test";

const ALICE = process.env.HALYARD_ALICE_KEY ?? "alice-secret-key";

test("an app the agent serves never receives the session cookie, wherever it sends the browser", async ({ page, context }) => {
  await page.goto("/");
  await page.getByLabel("API key").fill(ALICE);
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page.getByRole("heading", { name: "Conversations" })).toBeVisible();
  const session = (await context.cookies()).find((c) => c.name === "halyard_session");
  expect(session?.value).toBeTruthy();

  await page.getByRole("link", { name: "New conversation" }).click();
  await page.getByLabel("What should the agent do?").fill("serve a thief on WORKER_1");
  await page.getByRole("button", { name: "Start" }).click();
  await expect(page).toHaveURL(/\/c\/[0-9a-f-]{36}/);
  const conversation = page.url().match(/\/c\/([0-9a-f-]{36})/)![1];
  await expect(page.getByRole("status", { name: "Execution status" })).toContainText("finished");

  // Opened as a person opens it: the app's first answer sends the browser to its direct address.
  await page.getByRole("tab", { name: "Apps" }).click();
  const [app] = await Promise.all([context.waitForEvent("page"), page.getByRole("button", { name: "Open WORKER_1" }).click()]);
  await app.waitForLoadState("domcontentloaded").catch(() => {});

  // Every address the app can name, followed as links a person clicks.
  const view = await (await page.request.get(`/api/v1/conversations/${conversation}`)).json();
  const sandbox = await (await page.request.get(`/api/v1/sandboxes/${view.sandbox_id}`)).json();
  const published: string = sandbox.exposed_urls.find((u: { name: string }) => u.name === "WORKER_1").url;
  const port = new URL(published).port;
  const workspace = new URL(page.url());
  const targets = [published, `http://${workspace.hostname}:${port}/`, `http://localhost:${port}/`];
  for (const inner of ["8001", process.env.HALYARD_INNER_PORT ?? "8001"]) {
    targets.push(`http://${workspace.hostname}:${inner}/`, `http://localhost:${inner}/`);
  }
  for (const target of targets) {
    await app.goto(`${target.replace(/\/$/, "")}/stolen`, { timeout: 5_000 }).catch(() => {});
  }
  // The user is still signed in, with the same session.
  expect((await context.cookies()).find((c) => c.name === "halyard_session")?.value).toBe(session!.value);
  writeFileSync(process.env.HALYARD_REPORT!, JSON.stringify({ conversation, session: session!.value, targets, published }));
});
