// The start queue as a person waiting for a sandbox sees it. tests/tests/browser.rs starts
// Halyard with one running sandbox per user (HALYARD_MAX_RUNNING_PER_USER=1): Alice's first
// conversation runs, her next two wait their turn, and the page of the last counts down.

import { expect, test, type Page } from "./fixtures";

const ALICE = process.env.HALYARD_ALICE_KEY ?? "alice-secret-key";
const API = `${process.env.HALYARD_DIRECT_URL}/api/v1`;

async function call(method: string, path: string, body?: unknown) {
  const r = await fetch(`${API}${path}`, {
    method,
    headers: { authorization: `Bearer ${ALICE}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: r.status, body: await r.json() };
}

async function signIn(page: Page, key: string) {
  await page.goto("/");
  await page.getByLabel("API key").fill(key);
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page.getByRole("heading", { name: "Conversations" })).toBeVisible();
}

async function status(task: string): Promise<string> {
  return (await call("GET", `/start-tasks/${task}`)).body.status;
}

test("a start past the limit shows its place in line counting down, and can be cancelled", async ({ page }) => {
  const first = await call("POST", "/conversations", {});
  expect(first.status).toBe(202);
  await expect.poll(() => status(first.body.id), { timeout: 30_000 }).toBe("READY");
  const second = await call("POST", "/conversations", {});
  const third = await call("POST", "/conversations", {});
  await expect.poll(() => status(third.body.id), { timeout: 30_000 }).toBe("QUEUED");

  await signIn(page, ALICE);
  await page.goto(`/c/${third.body.conversation_id}?task=${third.body.id}`);
  const place = page.getByRole("status").filter({ hasText: "in line" });
  await expect(place).toContainText("2nd in line");
  await expect(page.locator('[data-phase="QUEUED"]')).toHaveClass(/current/);

  // Her running conversation goes: the second takes its place, the third moves up.
  expect((await call("DELETE", `/conversations/${first.body.conversation_id}`)).status).toBe(202);
  await expect(place).toContainText("1st in line", { timeout: 30_000 });
  await expect.poll(() => status(second.body.id), { timeout: 30_000 }).toBe("READY");

  // Cancelled from the page, it never starts.
  await place.getByRole("button", { name: "Cancel" }).click();
  await expect.poll(() => status(third.body.id), { timeout: 30_000 }).toBe("CANCELLED");
  await expect(page.getByRole("heading", { name: "The start was cancelled" })).toBeVisible();
});
