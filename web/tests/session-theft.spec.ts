// An app the agent serves tries to get the signed-in user's session: it answers the proxied
// visit with a redirect to its direct address, and the person then follows every address the
// app could name (its port on the host the workspace is served from, on `localhost`, and where
// the sandbox publishes it). tests/tests/browser.rs starts Halyard with one sandbox kind, runs
// this spec, and reads what the app received (HALYARD_REPORT says where to find it).

import { writeFileSync } from "node:fs";
import { expect, test } from "./fixtures";

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
  // A popup's first load state can be its about:blank; the app has been opened through the proxy
  // once it wrote that visit down (read as the owner reads a file), and only then is the popup
  // sent elsewhere (a goto before that would cancel the proxied visit).
  const stolen = async () => {
    const file = await page.request.get(`/api/v1/conversations/${conversation}/files?path=stolen.log`);
    return file.ok() ? ((await file.json()).content as string) : "";
  };
  await expect.poll(stolen, { timeout: 15_000 }).toContain("-worker-1.localhost:");

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

// The rest of the browser side, as the browser sends it: the session is only good as the cookie
// it was set in, a cookie tossed in beside it is refused, every answer says nosniff and no-store,
// a session ends with its key, and a hundred failed sign-ins leave a right key working.
test("a session is a cookie bound to its key, and failed sign-ins lock nobody out", async ({ page, context, playwright }) => {
  const issued = process.env.HALYARD_ISSUED_KEY!;
  const issuedId = process.env.HALYARD_ISSUED_KEY_ID!;
  await page.goto("/");
  await page.getByLabel("API key").fill(issued);
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page.getByRole("heading", { name: "Conversations" })).toBeVisible();
  const session = (await context.cookies()).find((c) => c.name === "halyard_session")!;

  const me = await page.request.get("/api/v1/me");
  expect(me.status()).toBe(200);
  expect(me.headers()["x-content-type-options"]).toBe("nosniff");
  expect(me.headers()["cache-control"]).toBe("no-store");
  // Stolen from the cookie jar, the token is worth nothing as a bearer token.
  const asBearer = await page.request.get("/api/v1/me", { headers: { Authorization: `Bearer ${session.value}` } });
  expect(asBearer.status()).toBe(401);
  // A second session cookie, tossed in for /api by another page of this host: refused.
  const host = new URL(page.url()).hostname;
  await context.addCookies([{ name: "halyard_session", value: "hal_tossed_0000", domain: host, path: "/api" }]);
  const tossed = await page.request.get("/api/v1/me");
  expect(tossed.status()).toBe(400);
  expect((await tossed.json()).error.code).toBe("ambiguous_session");
  await context.clearCookies({ name: "halyard_session", path: "/api" });
  expect((await page.request.get("/api/v1/me")).status()).toBe(200);

  // The key is revoked: its session ends at once, and the page asks to sign in again.
  const admin = await playwright.request.newContext({
    baseURL: process.env.HALYARD_URL,
    extraHTTPHeaders: { Authorization: `Bearer ${ALICE}` },
  });
  expect((await admin.delete(`/api/v1/admin/keys/${issuedId}`)).status()).toBe(200);
  await admin.dispose();
  expect((await page.request.get("/api/v1/me")).status()).toBe(401);
  await page.reload();
  await expect(page.getByLabel("API key")).toBeVisible();

  // A hundred failed sign-ins from this browser's address, at once (past the budget they are
  // answered 429); then the right key signs in all the same.
  const failed = await Promise.all(
    Array.from({ length: 100 }, (_, i) => page.request.post("/api/v1/session", { data: { api_key: `guess-${i}` } })),
  );
  expect(failed.every((r) => r.status() === 401 || r.status() === 429)).toBe(true);
  expect(failed.some((r) => r.status() === 429)).toBe(true);
  await page.getByLabel("API key").fill(ALICE);
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page.getByRole("heading", { name: "Conversations" })).toBeVisible();
});
