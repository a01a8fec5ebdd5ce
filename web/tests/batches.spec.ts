// A batch as a person watches it: started from the API, its page lists it, and its table fills
// in as the items end (the page reads it again while the batch runs; nobody reloads), then it
// says done. tests/tests/browser.rs answers each "batch item" after a moment.

import { expect, test } from "./fixtures";
import { call, signIn } from "./alice";


test("a batch's table fills in live as its items end", async ({ page }) => {
  await signIn(page);
  const items = Array.from({ length: 6 }, (_, i) => ({ message: `batch item ${i}`, title: `item ${i}` }));
  const made = await call("POST", "/batches", { name: "nightly", items, concurrency: 2 });
  expect(made.status).toBe(201);

  await page.getByRole("link", { name: "Batches" }).click();
  const table = page.getByRole("region", { name: "Batch nightly" });
  await expect(table).toBeVisible();
  // Seen part way: some items not done yet.
  await expect(table.locator("tr[data-status=waiting], tr[data-status=running]").first()).toBeVisible();
  // Then every item passed, without a reload.
  await expect(table.getByTestId("batch-status")).toHaveText("done", { timeout: 60_000 });
  await expect(table.getByTestId("batch-counts")).toContainText("6 passed, 0 failed");
  await expect(table.locator("tr[data-status=passed]")).toHaveCount(6);
  // A row leads to its conversation.
  await table.getByRole("link", { name: "batch item 3" }).click();
  await expect(page).toHaveURL(/\/c\/[0-9a-f-]{36}$/);
});

test("a start from a template with attempts opens its group: the attempts side by side, the best marked", async ({ page }) => {
  await signIn(page);
  const made = await call("PUT", "/templates/groupie", { start: { message: "batch item group {{n}}" } });
  expect(made.status).toBe(201);

  await page.goto("/new");
  await page.getByLabel("From a template").selectOption("groupie");
  await expect(page.getByTestId("template-start")).toContainText("batch item group {{n}}");
  await page.getByLabel("n", { exact: true }).fill("7");
  await page.getByLabel("Attempts").fill("2");
  await page.getByRole("button", { name: "Start" }).click();
  await expect(page).toHaveURL(/\/batches\/[0-9a-f-]{36}$/);

  const group = page.getByRole("region", { name: "Group batch item group 7" });
  await expect(group.getByRole("columnheader", { name: /Attempt 1/ })).toBeVisible();
  await expect(group.getByRole("columnheader", { name: /Attempt 2/ })).toBeVisible();
  // Both end without a reload; one is chosen, and each says what it changed.
  await expect(group.getByTestId("batch-status")).toHaveText("done", { timeout: 60_000 });
  await expect(group.getByRole("columnheader", { name: /★ best/ })).toHaveCount(1);
  await expect(group.getByRole("row", { name: /Changes/ })).toContainText("0 files, +0 −0");
  // Each attempt is one click away.
  await group.getByRole("link", { name: "Open" }).first().click();
  await expect(page).toHaveURL(/\/c\/[0-9a-f-]{36}$/);
  // And the group is one click back.
  await page.getByTestId("batch-of").getByRole("link", { name: "Attempt 1 of a group" }).click();
  await expect(page).toHaveURL(/\/batches\/[0-9a-f-]{36}$/);
  await expect(page.getByRole("region", { name: "Group batch item group 7" })).toBeVisible();
});
