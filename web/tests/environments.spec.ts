// Environments as a person manages them: one defined on the page, a start with it makes a
// snapshot that the page lists with its size and setup log, the start's page says where it came
// from, and a deleted snapshot goes. tests/tests/browser.rs starts Halyard with process sandboxes.

import { expect, test, type Page } from "./fixtures";

const ALICE = process.env.HALYARD_ALICE_KEY ?? "alice-secret-key";
const API = `${process.env.HALYARD_DIRECT_URL}/api/v1`;

async function call(method: string, path: string, body?: unknown) {
  const r = await fetch(`${API}${path}`, {
    method,
    headers: { authorization: `Bearer ${ALICE}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: r.status, body: r.status === 204 ? null : await r.json() };
}

async function signIn(page: Page) {
  await page.goto("/");
  await page.getByLabel("API key").fill(ALICE);
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page.getByRole("heading", { name: "Conversations" })).toBeVisible();
}

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
