// The start queue as a person waiting for a sandbox sees it. tests/tests/browser.rs starts
// Halyard with one running sandbox per user (HALYARD_MAX_RUNNING_PER_USER=1): Alice's first
// conversation runs, her next two wait their turn, and the page of the last counts down. She is
// an administrator too (HALYARD_ADMINS=alice): the Queue page shows who waits, and sets shares.

import { expect, test } from "./fixtures";
import { ALICE, call, signIn } from "./alice";


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

test("an administrator sees who waits on the Queue page and gives an organization a share", async ({ page }) => {
  // Alice (an administrator here) runs her one sandbox already: her next start waits.
  const waiting = await call("POST", "/conversations", {});
  expect(waiting.status).toBe(202);
  await expect.poll(() => status(waiting.body.id), { timeout: 30_000 }).toBe("QUEUED");
  expect((await call("POST", "/orgs", { name: "acme" })).status).toBe(201);

  await signIn(page, ALICE);
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Queue" }).click();
  await expect(page.getByRole("heading", { name: "Start queue" })).toBeVisible();
  const line = page.getByRole("table", { name: "Waiting starts" });
  await expect(line.getByRole("row").filter({ hasText: "alice" })).toContainText("1st");
  await expect(line).toContainText("an interactive start");
  await expect(page.getByRole("region", { name: "Sandbox hosts" }).getByRole("listitem")).toHaveCount(1);

  // A share for acme: weight 3, priority 1, at most 4 running; then back to the default.
  const shares = page.getByRole("region", { name: "Organizations' shares" });
  await shares.getByLabel("Organization").fill("acme");
  await shares.getByLabel("Weight").fill("3");
  await shares.getByLabel("Priority").fill("1");
  await shares.getByLabel("Max running").fill("4");
  await shares.getByRole("button", { name: "Set share" }).click();
  await expect(shares.getByRole("listitem").filter({ hasText: "acme" })).toContainText("weight 3 · priority 1 · at most 4 running");
  await shares.getByRole("button", { name: "Reset acme" }).click();
  await expect(shares.getByRole("listitem")).toHaveCount(0);

  // Cancelled, it leaves the line.
  expect((await call("DELETE", `/start-tasks/${waiting.body.id}`)).status).toBe(202);
  await expect(line).toContainText("Nobody waits.", { timeout: 10_000 });
});
