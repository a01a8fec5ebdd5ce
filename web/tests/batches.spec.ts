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
