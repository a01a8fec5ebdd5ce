// What the specs share as Alice: the API called directly with her key (`call`), and signing in
// on the page (`signIn`, with her key or another).

import { expect, type Page } from "./fixtures";

export const ALICE = process.env.HALYARD_ALICE_KEY ?? "alice-secret-key";
const API = `${process.env.HALYARD_DIRECT_URL}/api/v1`;

/** The API's answer to `method path` with `body`, as Alice: its status and JSON (null for 204). */
export async function call(method: string, path: string, body?: unknown) {
  const r = await fetch(`${API}${path}`, {
    method,
    headers: { authorization: `Bearer ${ALICE}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: r.status, body: r.status === 204 ? null : await r.json() };
}

/** Signs in on the page with `key` (Alice's by default) and waits for the conversations. */
export async function signIn(page: Page, key = ALICE) {
  await page.goto("/");
  await page.getByLabel("API key").fill(key);
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page.getByRole("heading", { name: "Conversations" })).toBeVisible();
}
