// Environments as a person manages them: one defined on the page, a start with it makes a
// snapshot that the page lists with its size and setup log, the start's page says where it came
// from, and a deleted snapshot goes. tests/tests/browser.rs starts Halyard with process sandboxes.

import { expect, test } from "./fixtures";
import { call, signIn } from "./alice";


test("an environment defined on its page is set up once, its snapshot listed with its setup log, and deleted", async ({ page }) => {
  await signIn(page);
  await page.getByRole("link", { name: "Environments" }).click();
  await expect(page.getByRole("heading", { name: "Environments" })).toBeVisible();
  await expect(page.getByText("No snapshots yet")).toBeVisible();

  const form = page.getByRole("form", { name: "Environment" });
  await form.getByLabel("Name", { exact: true }).fill("web");
  await form.getByLabel(/Setup commands/).fill("echo installing the toolchain\necho done > toolchain.txt");
  await form.getByLabel(/On every start/).fill("echo hello");
  await form.getByRole("button", { name: "Save environment" }).click();
  await expect(page.getByRole("cell", { name: "web user" })).toBeVisible();

  // A start with it sets up and keeps the result.
  const start = await call("POST", "/conversations", { message: "hi", environment: "web" });
  expect(start.status).toBe(202);
  await expect.poll(async () => (await call("GET", `/start-tasks/${start.body.id}`)).body.status, { timeout: 30_000 }).toBe("READY");
  const task = (await call("GET", `/start-tasks/${start.body.id}`)).body;
  expect(task.detail).toContain("set up in");

  await page.reload();
  const row = page.getByRole("row").filter({ hasText: "MiB" }).filter({ hasText: "web" });
  await expect(row).toBeVisible();
  await row.getByText(/Setup log/).click();
  await expect(row.getByText("installing the toolchain")).toBeVisible();
  await expect(page.getByText(/MiB used of \d+ MiB/)).toBeVisible();

  // Deleted from the page: the next start sets up again.
  page.once("dialog", (d) => void d.accept());
  await row.getByRole("button", { name: "Delete" }).click();
  await expect(page.getByText("No snapshots yet")).toBeVisible();
  expect((await call("GET", "/environments/snapshots")).body.items).toEqual([]);
});
