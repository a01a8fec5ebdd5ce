// The Network tab: what a sandbox held to an outbound policy reached, with its bytes, and what
// it was refused, with the rule. tests/tests/browser.rs starts Halyard with process sandboxes
// and a registry server the egress proxy knows as `registry.test` (and `other.test`).

import { expect, test } from "./fixtures";
import { call, signIn } from "./alice";

test("the Network tab shows what the sandbox reached and what it was refused, with the rule", async ({ page }) => {
  expect((await call("PUT", "/environments/net", { egress: { allow: ["registry.test"] } })).status).toBe(201);
  const start = await call("POST", "/conversations", { message: "reach the registry", environment: "net" });
  expect(start.status).toBe(202);
  const id = start.body.conversation_id;
  await expect
    .poll(async () => (await call("GET", `/conversations/${id}`)).body.execution_status, { timeout: 60_000 })
    .toBe("finished");

  await signIn(page);
  await page.goto(`/c/${id}`);
  await page.getByRole("tab", { name: "Network" }).click();
  // The proxy reports traffic every few seconds: Refresh until the registry's row is there.
  const reached = page.getByRole("region", { name: "Reached" });
  await expect(async () => {
    await page.getByRole("button", { name: "Refresh" }).click();
    await expect(reached.getByRole("row").filter({ hasText: "registry.test:8080" })).toBeVisible({ timeout: 1_000 });
  }).toPass({ timeout: 30_000 });
  const row = reached.getByRole("row").filter({ hasText: "registry.test:8080" });
  // One connection; the answer ("registry-http GET /simple") and its headers came back.
  await expect(row.getByRole("cell").nth(1)).toHaveText("1");
  await expect(row.getByRole("cell").nth(3)).toHaveText(/^\d+ B$/);
  expect(Number((await row.getByRole("cell").nth(3).textContent())?.split(" ")[0])).toBeGreaterThan(20);

  const refused = page.getByRole("region", { name: "Refused" }).getByRole("row").filter({ hasText: "other.test:8080" });
  await expect(refused).toContainText("not in the allow list");
  await expect(refused.getByRole("cell").nth(2)).toHaveText("1");
  await expect(page.getByRole("region", { name: "Reached" })).not.toContainText("other.test");
});
