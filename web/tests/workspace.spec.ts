// The web workspace as a person uses it, in Chromium, against a real Halyard and a scripted
// LLM (tests/tests/browser.rs starts both; the LLM's steps follow the task's keyword). Each test
// saves screenshots under test-results/screenshots/.

import { createHmac } from "node:crypto";
import { execSync } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect, expectConsoleError, test, type Page } from "./fixtures";
import { mentionFrom, slackWebApi } from "./slack";

const ALICE = process.env.HALYARD_ALICE_KEY ?? "alice-secret-key";
const BOB = process.env.HALYARD_BOB_KEY ?? "bob-secret-key";
const shot = (page: Page, name: string) => page.screenshot({ path: `test-results/screenshots/${name}.png` });

async function signIn(page: Page, key: string) {
  await page.goto("/");
  await page.getByLabel("API key").fill(key);
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page.getByRole("heading", { name: "Conversations" })).toBeVisible();
}

async function start(page: Page, message: string, repo?: string) {
  await page.getByRole("link", { name: "New conversation" }).click();
  await page.getByLabel("What should the agent do?").fill(message);
  if (repo) await page.getByLabel("URL").fill(repo);
  await page.getByRole("button", { name: "Start" }).click();
  await expect(page).toHaveURL(/\/c\/[0-9a-f-]{36}/);
  return page.url().match(/\/c\/([0-9a-f-]{36})/)![1];
}

const status = (page: Page) => page.getByRole("status", { name: "Execution status" });

test("1. sign in, start from a repository, watch the phases, see the command, its output and the diff", async ({ page, context }) => {
  await signIn(page, ALICE);
  // The key is not kept by the page: only an HttpOnly cookie holds the session.
  const cookies = await context.cookies();
  const session = cookies.find((c) => c.name === "halyard_session");
  expect(session?.httpOnly).toBe(true);
  expect(session?.sameSite).toBe("Strict");
  expect(await page.evaluate(() => JSON.stringify(localStorage) + document.cookie)).not.toContain(ALICE);

  await start(page, "Write hello.py that prints hello, and run it", process.env.HALYARD_SLOW_REPO);
  // The repository's setup script sleeps: the phases are there to watch.
  const setup = page.locator('[data-phase="RUNNING_SETUP_SCRIPT"]');
  await expect(setup).toHaveClass("current");
  await expect(page.locator('[data-phase="WAITING_FOR_SANDBOX"]')).toHaveClass("done");
  await shot(page, "phases");

  await expect(status(page)).toContainText("finished");
  const edit = page.getByTestId("edit-card");
  await expect(edit).toContainText("hello.py");
  await expect(edit.locator("tr.add")).toContainText('print("hello from halyard")');
  const command = page.getByTestId("command-card").filter({ hasText: "python3 hello.py" });
  await expect(command.getByTestId("observation")).toContainText("hello from halyard");
  // Markdown, rendered: the agent's **bold** is bold.
  await expect(page.locator(".msg.agent strong")).toHaveText("hello from halyard");
  await shot(page, "conversation");

  await page.getByRole("tab", { name: "Commands" }).click();
  const term = page.getByTestId("terminal");
  await expect(term).toContainText("$ python3 hello.py");
  await expect(term).toContainText("hello from halyard");
  await shot(page, "terminal");

  // The user's own terminal: typed into, answered, sized to its box.
  await page.getByRole("tab", { name: "Terminal", exact: true }).click();
  const mine = page.getByTestId("user-terminal");
  await expect(page.getByText("Your own shell in the sandbox")).toBeVisible();
  await mine.click();
  await page.keyboard.type("echo typed-$((6*7)); stty size\n");
  await expect(mine).toContainText("typed-42");
  const cols = await mine.getAttribute("data-cols");
  const rows = await mine.getAttribute("data-rows");
  expect(Number(cols)).toBeGreaterThan(20);
  await expect(mine).toContainText(`${rows} ${cols}`);
  await shot(page, "user-terminal");
  await page.getByRole("tab", { name: "Chat" }).click();
  await expect(page.getByText("alice opened a terminal in the sandbox.")).toBeVisible();

  await page.getByRole("tab", { name: "Changes" }).click();
  const diff = page.getByTestId("file-diff").filter({ hasText: "hello.py" });
  await expect(diff).toContainText("untracked");
  await expect(diff.locator("tr.add")).toContainText('print("hello from halyard")');
  await shot(page, "changes");
  // The Files tab lists the whole workspace and opens a file.
  await page.getByRole("tab", { name: "Files" }).click();
  await page.getByRole("region", { name: "Files" }).getByRole("button", { name: /hello\.py/ }).click();
  await expect(page.getByTestId("file-content")).toHaveAttribute("data-path", "hello.py");
  await expect(page.getByRole("region", { name: "Files" }).locator("code.path")).toHaveText("/hello.py");
  await expect(page.getByTestId("file-content")).toContainText('print("hello from halyard")');
  await shot(page, "files");

  // Edited in place and saved (Ctrl-S): the sandbox has the new text.
  const files = page.getByRole("region", { name: "Files", exact: true });
  await files.getByRole("button", { name: "Edit" }).click();
  const editor = page.getByLabel("Contents of hello.py");
  await expect(editor).toContainText('print("hello from halyard")');
  await editor.click();
  await page.keyboard.press("ControlOrMeta+End");
  await page.keyboard.type("# edited in the browser\n");
  await expect(files.getByText("unsaved changes")).toBeVisible();
  await page.keyboard.press("ControlOrMeta+s");
  await expect(files.getByRole("status")).toHaveText("Saved");
  const conv = page.url().match(/\/c\/([0-9a-f-]{36})/)![1];
  const saved = await (await page.request.get(`/api/v1/conversations/${conv}/files?path=hello.py`)).json();
  expect(saved.content).toBe('print("hello from halyard")\n# edited in the browser\n');
  await files.getByRole("button", { name: "Close" }).click();
  await expect(page.getByTestId("file-content")).toContainText("# edited in the browser");
  await shot(page, "edited");
  // What changed shows the edit too.
  await page.getByRole("tab", { name: "Changes" }).click();
  await expect(page.getByTestId("file-diff").filter({ hasText: "hello.py" }).locator("tr.add").filter({ hasText: "# edited in the browser" })).toHaveCount(1);
  await page.getByRole("tab", { name: "Files" }).click();
  await files.getByRole("button", { name: /hello\.py/ }).click();

  // A file downloaded as it is.
  const [one] = await Promise.all([page.waitForEvent("download"), files.getByRole("link", { name: "Download", exact: true }).click()]);
  expect(one.suggestedFilename()).toBe("hello.py");
  expect(readFileSync((await one.path())!, "utf8")).toBe('print("hello from halyard")\n# edited in the browser\n');
  // Uploaded by the picker, then by dropping a file on the list: each lands where the list is.
  await files.getByRole("button", { name: "↑ Up" }).click();
  await files.getByLabel("Upload files").setInputFiles({ name: "notes.txt", mimeType: "text/plain", buffer: Buffer.from("picked by hand\n") });
  await expect(files.getByRole("status")).toHaveText("Uploaded notes.txt");
  await files.getByRole("button", { name: /notes\.txt/ }).click();
  await expect(page.getByTestId("file-content")).toHaveText("picked by hand\n");
  await files.getByRole("button", { name: "↑ Up" }).click();
  const dropped = await page.evaluateHandle(() => {
    const dt = new DataTransfer();
    dt.items.add(new File(["dropped in\n"], "dropped.txt", { type: "text/plain" }));
    return dt;
  });
  await files.dispatchEvent("drop", { dataTransfer: dropped });
  await expect(files.getByRole("status")).toHaveText("Uploaded dropped.txt");
  await files.getByRole("button", { name: /dropped\.txt/ }).click();
  await expect(page.getByTestId("file-content")).toHaveText("dropped in\n");
  // The whole workspace, as an archive.
  const [archive] = await Promise.all([page.waitForEvent("download"), files.getByRole("link", { name: "Download workspace" }).click()]);
  expect(archive.suggestedFilename()).toMatch(/^workspace-[0-9a-f-]{36}\.tar\.gz$/);
  const gz = readFileSync((await archive.path())!);
  expect([gz[0], gz[1]]).toEqual([0x1f, 0x8b]);

  // The title, renamed in place, live.
  await page.getByRole("tab", { name: "Chat" }).click();
  await page.locator(".title-button").click();
  await page.getByLabel("Title").fill("Hello script");
  await page.getByLabel("Title").press("Enter");
  await expect(page.locator(".title-button")).toHaveText("Hello script");

  // What the run used, from the conversation's record (polled every few seconds).
  await expect(page.getByTestId("usage")).toHaveText(/^[1-9][\d,]* tokens/, { timeout: 10_000 });
  const record = (await (await page.request.get(`/api/v1/conversations/${page.url().match(/\/c\/([0-9a-f-]{36})/)![1]}`)).json()) as {
    metrics: { prompt_tokens: number; completion_tokens: number };
  };
  const tokens = record.metrics.prompt_tokens + record.metrics.completion_tokens;
  await expect(page.getByTestId("usage")).toHaveText(new RegExp(`^${tokens.toLocaleString("en")} tokens`));

  // The timeline filtered on the server: by kind, then by words in any case.
  await page.getByLabel("Event kind").selectOption("user_message");
  await expect(page.getByTestId("event-count")).toHaveText("1 event match");
  await expect(page.locator(".msg.user")).toHaveCount(1);
  await expect(page.locator(".msg.agent")).toHaveCount(0);
  await page.getByLabel("Event kind").selectOption("agent_message");
  await page.getByLabel("Filter events").fill("HELLO FROM");
  await expect(page.getByTestId("event-count")).toHaveText("1 event match");
  await expect(page.locator(".msg.agent strong")).toHaveText("hello from halyard");
  await page.getByLabel("Filter events").fill("no such words");
  await expect(page.getByTestId("event-count")).toHaveText("0 events match");
  await shot(page, "filtered");
  await page.getByLabel("Filter events").fill("");
  await page.getByLabel("Event kind").selectOption("");
  await expect(page.getByTestId("event-count")).toHaveCount(0);
  await expect(page.getByTestId("command-card").filter({ hasText: "python3 hello.py" })).toBeVisible();

  // Exported with the session: a transcript a person reads, and every event as JSON lines.
  const [transcript] = await Promise.all([page.waitForEvent("download"), page.getByRole("link", { name: "Export transcript" }).click()]);
  expect(transcript.suggestedFilename()).toBe(`conversation-${page.url().match(/\/c\/([0-9a-f-]{36})/)![1]}.md`);
  const md = readFileSync((await transcript.path())!, "utf8");
  expect(md).toMatch(/^# Hello script\n/);
  expect(md).toContain("python3 hello.py");
  expect(md).toContain("hello from halyard");
  const [lines] = await Promise.all([page.waitForEvent("download"), page.getByRole("link", { name: "Export JSON lines" }).click()]);
  const events = readFileSync((await lines.path())!, "utf8").trim().split("\n").map((l) => JSON.parse(l) as { seq: number });
  expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));

  // The list: the conversation, searchable by title, filterable by status.
  await page.getByRole("link", { name: "Conversations" }).click();
  await expect(page.getByRole("link", { name: /Hello script/ })).toBeVisible();
  await page.getByLabel("Search conversations").fill("hello scr");
  await expect(page.getByTestId("count")).toHaveText("1 conversation");
  // The first message is searched too.
  await page.getByLabel("Search conversations").fill("prints hello");
  await expect(page.getByTestId("count")).toHaveText("1 conversation");
  await page.getByLabel("Search conversations").fill("no such title");
  await expect(page.getByTestId("count")).toHaveText("0 conversations");
  await page.getByLabel("Search conversations").fill("");
  await page.getByLabel("Status").selectOption("finished");
  await expect(page.getByRole("link", { name: /Hello script/ })).toBeVisible();
  await page.getByLabel("Status").selectOption("");
});

test("2. pause and resume a run, reload mid-run: every event shown once, none missing", async ({ page }, testInfo) => {
  // The spec cuts the network on purpose: the live stream's reconnects fail meanwhile, and the
  // reload mid-run can drop a stream's handshake under way (what is shown is checked below).
  expectConsoleError(
    testInfo,
    /events\/ws.*(ERR_(SOCKET_NOT_CONNECTED|CONNECTION_REFUSED|CONNECTION_RESET|EMPTY_RESPONSE)|Connection closed before receiving a handshake response)/,
  );
  await signIn(page, ALICE);
  const id = await start(page, "Count: tick six times");
  await expect(page.getByTestId("observation").filter({ hasText: "tick-1" })).toBeVisible();
  await page.getByRole("button", { name: "Pause" }).click();
  await expect(status(page)).toContainText("paused");
  // Nothing runs while paused, and no card says otherwise.
  await expect(page.getByText("running…")).toHaveCount(0);
  await shot(page, "paused");
  await page.getByRole("button", { name: "Resume" }).click();
  await expect(status(page)).toContainText("running");

  // Reload while it runs: the page resumes from what it is given, with no gap and no copy.
  await expect(page.getByTestId("observation").filter({ hasText: "tick-3" })).toBeVisible();
  await page.reload();
  await expect(status(page)).toContainText("finished", { timeout: 30_000 });
  const seq = page.getByTestId("seq");
  const api = await page.request.get(`/api/v1/conversations/${id}/events?limit=1000`);
  const all = (await api.json()).items as { seq: number }[];
  await expect(seq).toHaveAttribute("data-count", String(all.length));
  await expect(seq).toHaveAttribute("data-last", String(all[all.length - 1].seq));
  // The page holds the log as the API serves it, seq 1 to the last, so each event once; the
  // list follows the end, where the last tick is.
  expect(all.map((e) => e.seq)).toEqual(all.map((_, i) => i + 1));
  await expect(page.getByTestId("observation").filter({ hasText: "tick-6" })).toHaveCount(1);

  // The network drops (the relay between the browser and Halyard cuts every connection): the
  // page says so; meanwhile the conversation goes on; when the network is back, the page
  // catches up with what it missed, once.
  const relay = process.env.HALYARD_RELAY_CONTROL!;
  await page.request.post(`${relay}/down`);
  await expect(page.getByText("reconnecting")).toBeVisible();
  const direct = process.env.HALYARD_DIRECT_URL!;
  const sent = await page.request.post(`${direct}/api/v1/conversations/${id}/messages`, {
    data: { text: "say hi" },
    headers: { "x-halyard-csrf": "1" },
  });
  expect(sent.ok(), await sent.text()).toBe(true);
  await page.waitForTimeout(1500);
  await page.request.post(`${relay}/up`);
  await expect(page.getByText("reconnecting")).toHaveCount(0);
  await expect(page.locator(".msg.user").filter({ hasText: "say hi" })).toHaveCount(1);
  await expect(page.locator(".msg.agent").filter({ hasText: "Done." })).toHaveCount(1);
  await expect(status(page)).toContainText("finished");
  const after = (await (await page.request.get(`/api/v1/conversations/${id}/events?limit=1000`)).json()).items as { seq: number }[];
  expect(after.length).toBeGreaterThan(all.length);
  await expect(seq).toHaveAttribute("data-count", String(after.length));
  await expect(seq).toHaveAttribute("data-last", String(after.length));
});

test("3. a second user sees nothing of the first", async ({ browser }) => {
  const alice = await browser.newContext();
  const a = await alice.newPage();
  await signIn(a, ALICE);
  const id = await start(a, "say hi");
  await expect(status(a)).toContainText("finished");
  // The agent's raw HTML is shown as text, never as markup.
  const said = a.locator(".msg.agent").filter({ hasText: "Done." });
  await expect(said).toContainText("<img src=x onerror=alert(1)><b>not bold</b>");
  await expect(said.locator("img, b")).toHaveCount(0);

  const bob = await browser.newContext();
  const b = await bob.newPage();
  await signIn(b, BOB);
  await expect(b.getByText("No conversations yet")).toBeVisible();
  await b.goto(`/c/${id}`);
  await expect(b.getByRole("alert")).toContainText("conversation not found");
  const events = await b.request.get(`/api/v1/conversations/${id}/events`);
  expect(events.status()).toBe(404);
  await shot(b, "other-user");
  await alice.close();
  await bob.close();
});

test("4. webhooks: create (secret shown once), disable, rotate, delete", async ({ page }) => {
  await signIn(page, ALICE);
  // The list, with what the tests before made.
  await expect(page.getByTestId("count")).toHaveText("3 conversations");
  await shot(page, "list");
  await page.getByRole("link", { name: "Webhooks" }).click();
  await page.getByLabel("Webhook URL").fill("https://example.com/halyard-hook");
  await page.getByLabel("Description").fill("CI notifier");
  await page.getByRole("button", { name: "Create webhook" }).click();
  const secret = page.getByTestId("webhook-secret");
  await expect(secret).toHaveText(/\S{20,}/);
  const first = await secret.textContent();
  await shot(page, "webhook-created");
  const hook = page.getByRole("listitem").filter({ hasText: "halyard-hook" });
  await expect(hook).toContainText("enabled");
  await hook.getByRole("button", { name: "Disable" }).click();
  await expect(hook).toContainText("disabled");
  await hook.getByRole("button", { name: "Rotate secret" }).click();
  await expect(secret).not.toHaveText(first!);
  await hook.getByRole("button", { name: "Deliveries" }).click();
  await expect(hook).toContainText("No deliveries yet");
  // Shown once: after a reload the secret is gone from the page.
  await page.reload();
  await expect(page.getByTestId("webhook-secret")).toHaveCount(0);
  page.once("dialog", (d) => d.accept());
  await page.getByRole("listitem").filter({ hasText: "halyard-hook" }).getByRole("button", { name: "Delete" }).click();
  await expect(page.getByRole("listitem").filter({ hasText: "halyard-hook" })).toHaveCount(0);
});

test("5. an app the agent serves opens in a tab of its own origin", async ({ page, context }) => {
  await signIn(page, ALICE);
  await start(page, "serve a site on WORKER_1");
  await expect(status(page)).toContainText("finished");
  await page.getByRole("tab", { name: "Apps" }).click();
  const [app] = await Promise.all([context.waitForEvent("page"), page.getByRole("button", { name: "Open WORKER_1" }).click()]);
  await expect(app.locator("h1")).toHaveText("served by the agent");
  const origin = new URL(app.url());
  expect(origin.hostname).toMatch(/^[0-9a-f]{32}-worker-1\.localhost$/);
  expect(origin.origin).not.toBe(new URL(page.url()).origin);
  // The workspace's session never reaches the app's origin.
  const appCookies = await context.cookies(app.url());
  expect(appCookies.map((c) => c.name)).toEqual(["halyard_app"]);
  await shot(app, "served-app");
  // Without the grant, the app is closed to anyone else.
  const stranger = await page.context().browser()!.newContext();
  const s = await stranger.newPage();
  const res = await s.goto(app.url());
  expect(res?.status()).toBe(401);
  await stranger.close();
});

test("6. sandboxes: status, pause and resume", async ({ page }) => {
  await signIn(page, ALICE);
  await page.getByRole("link", { name: "Sandboxes" }).click();
  const row = page.getByRole("row").filter({ hasText: "running" }).first();
  await expect(row).toBeVisible();
  const id = (await row.locator("code").textContent())!;
  await row.getByRole("button", { name: "Pause" }).click();
  const same = page.getByRole("row").filter({ hasText: id });
  await expect(same).toContainText("paused");
  await same.getByRole("button", { name: "Resume" }).click();
  await expect(same).toContainText("running");
  await shot(page, "sandboxes");
});

test("7. narrow, dark, keyboard only", async ({ page }) => {
  await page.setViewportSize({ width: 390, height: 844 });
  await page.goto("/");
  // Sign in with the keyboard alone: the key field has the focus.
  await expect(page.getByLabel("API key")).toBeFocused();
  await page.keyboard.type(ALICE);
  await page.keyboard.press("Enter");
  await expect(page.getByRole("heading", { name: "Conversations" })).toBeVisible();
  await page.getByRole("button", { name: /Switch to (dark|light) theme/ }).click();
  if ((await page.evaluate(() => document.documentElement.dataset.theme)) !== "dark")
    await page.getByRole("button", { name: /Switch to dark theme/ }).click();
  expect(await page.evaluate(() => document.documentElement.dataset.theme)).toBe("dark");
  // Nothing sticks out sideways at 390 px.
  expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
  await shot(page, "narrow-dark-list");

  // Open a conversation and move between its tabs with the arrow keys.
  await page.getByRole("link", { name: /Hello script/ }).focus();
  await page.keyboard.press("Enter");
  await expect(page.getByRole("tab", { name: "Chat" })).toHaveAttribute("aria-selected", "true");
  await page.getByRole("tab", { name: "Chat" }).focus();
  await page.keyboard.press("ArrowRight");
  await expect(page.getByRole("tab", { name: "Plan" })).toHaveAttribute("aria-selected", "true");
  await page.keyboard.press("ArrowRight");
  await expect(page.getByRole("tab", { name: "Terminal", exact: true })).toHaveAttribute("aria-selected", "true");
  await page.keyboard.press("ArrowRight");
  await expect(page.getByRole("tab", { name: "Commands" })).toHaveAttribute("aria-selected", "true");
  await expect(page.getByTestId("terminal")).toContainText("hello from halyard");
  expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
  await shot(page, "narrow-dark-terminal");
});

test("8. a start that fails says why, in words", async ({ page }) => {
  await signIn(page, ALICE);
  await start(page, "work on a repository that is not there", "/nonexistent/repository");
  await expect(page.getByRole("heading", { name: "The conversation could not start" })).toBeVisible();
  await expect(page.locator(".phases").getByRole("alert")).toContainText("PREPARING_REPOSITORY");
  await expect(page.locator('[data-phase="WAITING_FOR_SANDBOX"]')).toHaveClass("done");
  await expect(page.locator('[data-phase="PREPARING_REPOSITORY"]')).toHaveClass("failed");
  // What was asked stays in view, and can be asked again.
  await expect(page.getByLabel("Your message")).toContainText("work on a repository that is not there");
  await shot(page, "start-failed");
  const retried = page.waitForResponse((r) => r.url().endsWith("/retry") && r.request().method() === "POST");
  await page.getByRole("button", { name: "Retry" }).click();
  expect((await retried).status()).toBe(202);
  await expect(page.locator(".phases").getByRole("alert")).toContainText("PREPARING_REPOSITORY");
  await expect(page.getByLabel("Your message")).toContainText("work on a repository that is not there");
});

test("9. delete a conversation, with a confirmation", async ({ page }) => {
  await signIn(page, ALICE);
  await expect(page.getByTestId("count")).toHaveText("5 conversations");
  const row = page.getByRole("listitem").filter({ hasText: "say hi" });
  await row.getByRole("button", { name: /Delete/ }).click();
  await row.getByRole("button", { name: "Keep" }).click();
  await expect(page.getByTestId("count")).toHaveText("5 conversations");
  await row.getByRole("button", { name: /Delete/ }).click();
  await expect(row.getByRole("group", { name: "Confirm delete" })).toBeVisible();
  await row.getByRole("button", { name: "Delete", exact: true }).click();
  await expect(page.getByRole("listitem").filter({ hasText: "say hi" })).toHaveCount(0);
  await expect(page.getByTestId("count")).toHaveText("4 conversations");
  // Gone on the server too.
  await page.reload();
  await expect(page.getByTestId("count")).toHaveText("4 conversations");
});

test("10. an action waiting for confirmation says when the model stated no risk", async ({ page }) => {
  await signIn(page, ALICE);
  const started = await page.request.post("/api/v1/conversations", {
    data: { message: "be careful with this", confirmation_policy: "always" },
    headers: { "x-halyard-csrf": "1" },
  });
  expect(started.status(), await started.text()).toBe(202);
  const task = (await started.json()) as { id: string };
  let conversation = "";
  await expect
    .poll(async () => {
      const t = (await (await page.request.get(`/api/v1/start-tasks/${task.id}`)).json()) as { status: string; conversation_id?: string };
      conversation = t.conversation_id ?? "";
      return t.status;
    })
    .toBe("READY");
  await page.goto(`/c/${conversation}`);
  const card = page.getByTestId("command-card").filter({ hasText: "echo carefully-done" });
  await expect(card).toContainText("waiting for your confirmation");
  await expect(card).toContainText("risk not stated");
  await expect(card).not.toContainText("medium");
  await shot(page, "risk-not-stated");
  await page.getByRole("button", { name: "Run them" }).click();
  await expect(card.getByTestId("observation")).toContainText("carefully-done");
  await expect(card).not.toContainText("risk not stated");
});

test("11. an image pasted into the message box goes with the message", async ({ page }) => {
  await signIn(page, ALICE);
  await start(page, "Look at what I paste next");
  await expect(status(page)).toContainText(/finished|idle/);
  const box = page.getByLabel("Message");
  await box.click();
  // A screenshot on the clipboard, pasted.
  await box.evaluate((el) => {
    const bytes = Uint8Array.from(atob("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="), (c) => c.charCodeAt(0));
    const data = new DataTransfer();
    data.items.add(new File([bytes], "screenshot.png", { type: "image/png" }));
    el.dispatchEvent(new ClipboardEvent("paste", { clipboardData: data, bubbles: true, cancelable: true }));
  });
  await expect(page.getByRole("img", { name: "Image 1 to send" })).toBeVisible();
  await box.fill("What is in this image?");
  await box.press("Enter");
  await expect(page.getByRole("img", { name: "Image 1 to send" })).toHaveCount(0);
  const sent = page.locator(".msg.user").filter({ hasText: "What is in this image?" });
  await expect(sent.getByRole("img", { name: "Attached image 1" })).toBeVisible();
  await shot(page, "image-sent");
});

test("12. a share link opens live with no account, writes nothing, and is revoked at once", async ({ page, browser }, testInfo) => {
  // Revoked while open: the shared page's live stream is refused (Chromium logs it), and it says so.
  expectConsoleError(testInfo, /shared\/.*events\/ws.*Unexpected response code: 404/);
  await signIn(page, ALICE);
  const id = await start(page, "tick six times, to be watched");
  await expect(page.getByTestId("command-card").first()).toBeVisible();
  await page.getByRole("button", { name: "Share" }).click();
  const url = await page.getByTestId("share-url").inputValue();
  expect(url).toMatch(new RegExp(`/shared/${id}\\.[0-9a-f]{64}$`));
  const token = url.split("/shared/")[1];

  // A fresh browser: no cookie, no key.
  const stranger = await browser.newContext();
  const view = await stranger.newPage();
  await view.goto(url);
  await expect(view.getByText("Shared conversation · read only")).toBeVisible();
  await expect(view.locator(".msg.user").first()).toContainText("tick six times");
  // Live: the run goes on while the stranger watches.
  await expect(view.getByTestId("command-card").filter({ hasText: "tick-6" })).toBeVisible({ timeout: 30_000 });
  await expect(view.getByText("Ticked six times.")).toBeVisible();
  await expect(status(view)).toContainText("finished");
  await view.screenshot({ path: "test-results/screenshots/shared.png" });
  // Nothing to write with, and no terminal or files.
  await expect(view.locator("textarea, input, [contenteditable=true]")).toHaveCount(0);
  await expect(view.getByRole("tab")).toHaveText(["Chat", "Changes"]);
  await view.getByRole("tab", { name: "Changes" }).click();
  await expect(view.getByRole("heading", { name: "Changes" })).toBeVisible();
  await expect(view.getByText("No changes yet.")).toBeVisible();
  expect((await view.request.post(`/api/v1/shared/${token}/events`, { data: {} })).status()).toBe(405);
  expect((await view.request.get(`/api/v1/conversations/${id}`)).status()).toBe(401);

  // Revoked: the open page says so, and so does a reload.
  await page.getByRole("button", { name: "Stop sharing" }).click();
  await expect(page.getByRole("button", { name: "Share" })).toBeVisible();
  await expect(view.getByRole("alert")).toContainText("revoked", { timeout: 10_000 });
  await view.reload();
  await expect(view.getByRole("alert")).toContainText("revoked");
  await stranger.close();
});

test("13. fork from any event of the timeline: the log up to there, the files as they were, the original untouched", async ({ page }) => {
  await signIn(page, ALICE);
  const id = await start(page, "write two drafts");
  await expect(page.getByText("Wrote two drafts.")).toBeVisible({ timeout: 30_000 });
  const first = page.locator(".row").filter({ has: page.getByTestId("command-card").filter({ hasText: "echo first" }) });
  await first.hover();
  await first.getByRole("button", { name: "Fork from here" }).click();

  // The fork's own page: it says where it comes from and shows the log up to that action.
  await expect(page).not.toHaveURL(new RegExp(id));
  const fork = page.url().match(/\/c\/([0-9a-f-]{36})/)![1];
  await expect(page.locator(".forked-from")).toContainText("Forked from");
  // Named as its source, marked as a fork (the source's generated title, copied, is the source's).
  await expect(page.locator(".conv-head")).toContainText("write two drafts (fork)");
  await expect(page.locator(".forked-from").getByRole("link")).toHaveAttribute("href", `/c/${id}`);
  await expect(page.getByTestId("command-card").filter({ hasText: "first-draft" })).toBeVisible({ timeout: 30_000 });
  await expect(page.locator(".msg.user").first()).toContainText("write two drafts");
  await expect(page.getByTestId("command-card").filter({ hasText: "echo second" })).toHaveCount(0);
  await expect(status(page)).toContainText("idle");
  await shot(page, "forked");

  // Its workspace is as it was after that action; the original's is as the run left it.
  const read = async (conv: string) => (await (await page.request.get(`/api/v1/conversations/${conv}/files?path=draft.txt`)).json()).content;
  expect(await read(fork)).toBe("first\n");
  expect(await read(id)).toBe("second\n");
  await page.locator(".forked-from").getByRole("link").click();
  await expect(page).toHaveURL(new RegExp(`/c/${id}`));
  await expect(page.getByTestId("command-card").filter({ hasText: "echo second" })).toBeVisible();
});

test("14. the Plan tab shows the agent's plan as it changes", async ({ page }) => {
  await signIn(page, ALICE);
  await start(page, "work in steps");
  await page.getByRole("tab", { name: "Plan" }).click();
  const tasks = page.getByTestId("plan-task");
  // Live: first one task in progress, then the next, then both done.
  await expect(tasks).toHaveCount(2, { timeout: 30_000 });
  await expect(tasks.nth(0)).toContainText("Look around");
  await expect(tasks.nth(0)).toContainText("list the files");
  await expect(tasks.nth(1)).toContainText("Write the report");
  await expect(tasks.nth(1)).toContainText("in progress", { timeout: 30_000 });
  await expect(tasks.nth(0)).toContainText("done");
  await shot(page, "plan");
  await expect(page.getByTestId("plan-progress")).toHaveText("2 of 2 done", { timeout: 30_000 });
  await page.getByRole("tab", { name: "Chat" }).click();
  await expect(page.getByText("Done in steps.")).toBeVisible();
  await expect(page.getByText("Plan updated: 2 of 2 tasks done.")).toBeVisible();
});

test("15. helpers: the parent's timeline links to each, and the list nests them under it", async ({ page }) => {
  await signIn(page, ALICE);
  const id = await start(page, "hand out the work to helpers");
  await expect(page.getByText("Both helpers answered.")).toBeVisible({ timeout: 30_000 });
  // One card for the delegate call: each helper, how it ended and what it said.
  const card = page.getByTestId("helpers");
  await expect(card.getByRole("link")).toHaveCount(2);
  await expect(card).toContainText("said one");
  await expect(card).toContainText("said two");
  await expect(page.locator(".helpers-line").getByRole("link")).toHaveCount(2);
  await shot(page, "helpers");

  // A helper's page: its own log, and the way back to its parent.
  await card.getByRole("link", { name: "First helper" }).click();
  await expect(page).not.toHaveURL(new RegExp(id));
  await expect(page.locator(".helper-of")).toContainText("A helper of");
  await expect(page.getByTestId("command-card").filter({ hasText: "echo one" })).toBeVisible({ timeout: 30_000 });
  await expect(page.getByTestId("command-card").filter({ hasText: "echo two" })).toHaveCount(0);
  await page.locator(".helper-of").getByRole("link").click();
  await expect(page).toHaveURL(new RegExp(`/c/${id}`));

  // The list: both helpers right under their parent, marked as helpers.
  await page.goto("/");
  const rows = page.locator("li.conv-row");
  await expect(rows.filter({ hasText: "First helper" })).toHaveCount(1);
  const texts = await rows.allInnerTexts();
  const at = texts.findIndex((t) => t.includes("hand out the work to helpers"));
  expect(at).toBeGreaterThanOrEqual(0);
  const under = texts.slice(at + 1, at + 3).join("\n");
  expect(under).toContain("First helper");
  expect(under).toContain("Second helper");
  await expect(rows.nth(at + 1)).toHaveClass(/helper-row/);
  await expect(rows.nth(at + 2)).toHaveClass(/helper-row/);
  await shot(page, "helpers-list");
});

test("16. an answer shows as the model writes it, then once as the agent's message", async ({ page }) => {
  await signIn(page, ALICE);
  await start(page, "write slowly");
  const writing = page.getByTestId("writing");
  await expect(writing).toBeVisible({ timeout: 30_000 });
  await expect(writing).toContainText("Here is the slow answer");
  // It grows while the model writes (the whole of it is not there yet).
  await expect(writing).toContainText("word10", { timeout: 30_000 });
  await expect(writing).not.toContainText("end of the slow answer");
  await shot(page, "streaming");
  // The finished message replaces it, once.
  await expect(page.getByText("and that is the end of the slow answer.")).toHaveCount(1, { timeout: 30_000 });
  await expect(writing).toHaveCount(0);
});

test("17. the Browser tab shows the page the agent browses, live", async ({ page }) => {
  await signIn(page, ALICE);
  await start(page, "browse the form");
  await page.getByRole("tab", { name: "Browser" }).click();
  const url = page.getByTestId("browser-url");
  const shotImg = page.getByTestId("browser-screenshot");
  // First the form, with a screenshot the browser really loads (the browser's window size)...
  await expect(url).toHaveText(/^http:\/\/localhost:8125\/index\.html$/, { timeout: 30_000 });
  await expect.poll(() => shotImg.evaluate((i: HTMLImageElement) => i.naturalWidth), { timeout: 10_000 }).toBe(1280);
  const first = await shotImg.getAttribute("src");
  await shot(page, "browser");
  // ...then, without a reload, the page the form led to, and a new screenshot of it.
  await expect(url).toHaveText(/next\.html\?who=Ada$/, { timeout: 30_000 });
  await expect(shotImg).not.toHaveAttribute("src", first ?? "");
  await expect.poll(() => shotImg.evaluate((i: HTMLImageElement) => i.complete && i.naturalWidth > 0), { timeout: 10_000 }).toBe(true);
  await page.getByRole("tab", { name: "Chat" }).click();
  await expect(page.getByText("Signed up as Ada.")).toBeVisible({ timeout: 30_000 });
  // Each browser step's card shows its screenshot, small, linked to the whole.
  const pictures = page.getByTestId("picture");
  await expect(pictures).toHaveCount(3);
  await expect.poll(() => pictures.last().evaluate((i: HTMLImageElement) => i.naturalWidth), { timeout: 10_000 }).toBe(1280);
});

test("18. a Python cell shows its code, what it printed and its plot", async ({ page }) => {
  await signIn(page, ALICE);
  await start(page, "plot the squares");
  await expect(page.getByText("Plotted the squares.")).toBeVisible({ timeout: 30_000 });
  const card = page.getByTestId("cell-card");
  await expect(card).toContainText("In: import matplotlib.pyplot as plt");
  await expect(card.getByTestId("observation")).toContainText("[0, 1, 4, 9, 16, 25]");
  const plot = card.getByTestId("picture");
  await expect.poll(() => plot.evaluate((i: HTMLImageElement) => i.naturalWidth), { timeout: 10_000 }).toBeGreaterThan(100);
  await shot(page, "cell");
});

test("19. VS Code opens in its tab on the sandbox's files; a file saved there shows in Changes", async ({ page, browser }, testInfo) => {
  // The browser reaches Halyard through the spec's relay, whose port is not the address Halyard
  // names as the workspace's origin in VS Code's frame-ancestors: the frame's first load is
  // refused for that (its own messages, from its own origin, are not counted anyway).
  expectConsoleError(testInfo, /^Framing '.*-vscode\.localhost:\d+\/' violates the following Content Security Policy directive: "frame-ancestors/);
  await signIn(page, ALICE);
  const id = await start(page, "Write hello.py that prints hello, and run it");
  await expect(status(page)).toContainText("finished");
  await page.getByRole("tab", { name: "VS Code" }).click();
  const frameEl = page.getByTestId("vscode-frame");
  await expect(frameEl).toBeVisible({ timeout: 60_000 });
  const link = (await frameEl.getAttribute("src"))!;
  // Never the workspace's origin: the proxy's, a host of its own for this sandbox's VS Code.
  expect(new URL(link).hostname).toMatch(/^[0-9a-f]{32}-vscode\.localhost$/);
  const vscode = page.frameLocator('[data-testid="vscode-frame"]');
  await expect(vscode.locator(".monaco-workbench")).toBeVisible({ timeout: 60_000 });
  // The workspace's files, over the workbench's own WebSocket to the sandbox.
  const file = vscode.getByRole("treeitem", { name: "hello.py" });
  await expect(file).toBeVisible({ timeout: 60_000 });
  await file.dblclick();
  const editor = vscode.locator(".monaco-editor .view-lines").first();
  await expect(editor).toContainText("hello from halyard", { timeout: 30_000 });
  await editor.click();
  await page.keyboard.press("Control+End");
  await page.keyboard.type("# edited in VS Code\n");
  // Saved in the sandbox: the file as the API reads it there. (Once, in a full run on a busy
  // machine, a Ctrl+S pressed while the workbench was still starting did nothing; a person
  // presses it again, and so does this test, once.)
  const onDisk = async () => {
    const res = await page.request.get(`/api/v1/conversations/${id}/files?path=hello.py`);
    return res.ok() ? String((await res.json()).content ?? "") : `HTTP ${res.status()}`;
  };
  await page.keyboard.press("Control+s");
  try {
    await expect.poll(onDisk, { timeout: 10_000 }).toContain("# edited in VS Code");
  } catch {
    console.log("spec 19: the first Ctrl+S did not reach the sandbox; pressing it again");
    await editor.click();
    await page.keyboard.press("Control+s");
    await expect.poll(onDisk, { timeout: 30_000 }).toContain("# edited in VS Code");
  }
  await shot(page, "vscode");
  // And the Changes tab shows the line.
  await page.getByRole("tab", { name: "Changes" }).click();
  await expect(page.getByText("# edited in VS Code").first()).toBeVisible({ timeout: 30_000 });
  // Back in VS Code: the same workbench, not reloaded (its open editor is still there).
  await page.getByRole("tab", { name: "VS Code" }).click();
  await expect(frameEl).toHaveAttribute("src", link);
  await expect(editor).toContainText("# edited in VS Code");

  // The link the frame used opens nothing a second time, nor for anyone else.
  const stranger = await browser.newContext();
  const s = await stranger.newPage();
  const replayed = await s.goto(link);
  expect(replayed?.status()).toBe(403);
  await signIn(s, BOB);
  expect((await s.request.get(`/api/v1/conversations/${id}/vscode`)).status()).toBe(404);
  await stranger.close();
});

test("20. automations: a hook shown once with its setup, a signed request's run linked to its conversation, a schedule's next tick", async ({
  page,
}) => {
  await signIn(page, ALICE);
  await page.getByRole("link", { name: "Automations" }).click();
  await expect(page.getByText("No automations")).toBeVisible();
  await page.getByLabel("Name").fill("Triage bot");
  await page.getByLabel("Prompt").fill("Triage: {{title}}");
  await page.getByRole("button", { name: "Create automation" }).click();
  const setup = page.getByRole("status", { name: "Hook setup" });
  await expect(setup).toContainText("webhook-signature");
  const hookUrl = (await page.getByTestId("hook-url").textContent())!;
  const secret = (await page.getByTestId("automation-secret").textContent())!;
  expect(hookUrl).toMatch(/\/api\/v1\/hooks\/[0-9a-f-]{36}$/);
  expect(secret).toMatch(/^whsec_/);
  await shot(page, "automation-created");

  // A program posts a request signed as Standard Webhooks: a run starts a conversation.
  const body = JSON.stringify({ title: "the login page is slow" });
  const id = "msg_from_the_browser_test";
  const ts = Math.floor(Date.now() / 1000);
  const key = Buffer.from(secret.slice("whsec_".length), "base64");
  const signature = "v1," + createHmac("sha256", key).update(`${id}.${ts}.${body}`).digest("base64");
  const res = await page.request.post(hookUrl, {
    headers: { "content-type": "application/json", "webhook-id": id, "webhook-timestamp": String(ts), "webhook-signature": signature },
    data: body,
  });
  expect(res.status()).toBe(202);

  await page.getByRole("button", { name: "Done" }).click();
  await expect(page.getByTestId("automation-secret")).toHaveCount(0);
  const item = page.getByRole("listitem").filter({ hasText: "Triage bot" });
  await expect(item).toContainText("enabled");
  await expect(async () => {
    await page.reload();
    await expect(page.getByRole("listitem").filter({ hasText: "Triage bot" })).toContainText("Last run", { timeout: 1000 });
  }).toPass({ timeout: 20_000 });
  await item.getByRole("button", { name: "Runs" }).click();
  const runs = item.getByRole("table", { name: "Runs" });
  await expect(runs).toContainText(`delivery ${id}`);
  await expect(runs).toContainText("started");
  await shot(page, "automation-runs");
  await runs.getByRole("link", { name: "Conversation" }).click();
  await expect(page).toHaveURL(/\/c\/[0-9a-f-]{36}/);
  await expect(page.getByText("Triage: the login page is slow")).toBeVisible();

  // A schedule: its next tick is shown; it can be disabled and deleted.
  await page.getByRole("link", { name: "Automations" }).click();
  await page.getByLabel("Kind").selectOption("schedule");
  await page.getByLabel("Name").fill("Nightly deps");
  await page.getByLabel("Cron").fill("0 3 * * *");
  await page.getByLabel("Time zone").fill("Europe/Paris");
  await page.getByLabel("Prompt").fill("Update the dependencies.");
  await page.getByRole("button", { name: "Create automation" }).click();
  const nightly = page.getByRole("listitem").filter({ hasText: "Nightly deps" });
  await expect(nightly).toContainText("schedule 0 3 * * * (Europe/Paris)");
  await expect(nightly).toContainText("next");
  // Edited in place: another time, another prompt.
  await nightly.getByRole("button", { name: "Edit" }).click();
  await nightly.getByLabel("New cron").fill("30 4 * * 1-5");
  await nightly.getByLabel("New prompt").fill("Update the dependencies, then run the tests.");
  await nightly.getByRole("button", { name: "Save" }).click();
  await expect(nightly).toContainText("schedule 30 4 * * 1-5 (Europe/Paris)");
  const listed = await (await page.request.get("/api/v1/automations")).json();
  expect(listed.items.find((a: { name: string }) => a.name === "Nightly deps").prompt).toBe("Update the dependencies, then run the tests.");
  await nightly.getByRole("button", { name: "Disable" }).click();
  await expect(nightly).toContainText("disabled");
  await expect(nightly).not.toContainText("next");
  // A bad schedule is refused in words.
  await page.getByLabel("Name").fill("Broken");
  await page.getByLabel("Cron").fill("0 3 * *");
  await page.getByLabel("Prompt").fill("x");
  await page.getByRole("button", { name: "Create automation" }).click();
  await expect(page.getByText("five-field")).toBeVisible();
  // An agent that cannot speak the LLM's wire is refused in words, naming both.
  await page.getByLabel("Cron").fill("0 3 * * *");
  await page.getByLabel("Agent", { exact: true }).selectOption({ label: "Claude Code" });
  await page.getByRole("button", { name: "Create automation" }).click();
  await expect(page.getByText(/Claude Code speaks `?anthropic/)).toBeVisible();
  await page.getByLabel("Agent", { exact: true }).selectOption({ label: "Your default agent" });
  page.once("dialog", (d) => d.accept());
  await nightly.getByRole("button", { name: "Delete" }).click();
  await expect(page.getByRole("listitem").filter({ hasText: "Nightly deps" })).toHaveCount(0);
  await shot(page, "automations");
});

test("21. a Slack user nobody linked gets a sign-in link privately; Bob follows it and links it, and with no Sign in with Slack nothing runs as him", async ({ page, browser }) => {
  const slack = await slackWebApi();
  try {
    await signIn(page, ALICE);
    const signing = "8f742231b10e8888abcd99yyyzzz85a5";
    const made = await page.request.post("/api/v1/automations", {
      headers: { "x-halyard-csrf": "1" },
      data: { name: "Team bot", trigger: { kind: "slack", signing_secret: signing, bot_token: "xoxb-1-2-3", channels: { C0123ABC: null }, users: {}, api_url: slack.url } },
    });
    const automation = await made.json();
    expect(made.status(), JSON.stringify(automation)).toBe(201);
    // Slack posts a mention by a user nobody linked, signed with the app's signing secret.
    const link = await mentionFrom(slack, automation.hook_url, signing, "U0999XYZ");

    // Bob, signed in, follows the link: it says what it links, and links when he confirms.
    const bob = await (await browser.newContext()).newPage();
    await signIn(bob, BOB);
    await bob.goto(link);
    await expect(bob.getByRole("heading", { name: "Link your Slack account" })).toBeVisible();
    await expect(bob.getByText("U0999XYZ")).toBeVisible();
    await expect(bob.getByText("Team bot")).toBeVisible();
    // Who and where, in words, as the app's Slack names them.
    await expect(bob.getByText("Bob Builder (@bob.b)")).toBeVisible();
    await expect(bob.getByText("Acme (acme-corp.slack.com)")).toBeVisible();
    // Nothing here can ask Slack who Bob is: the automation may not run as him.
    await expect(bob.getByTestId("no-slack-sign-in")).toBeVisible();
    await expect(bob.getByLabel(/Let this automation run agents as me/)).toBeDisabled();
    const code = link.split("/").pop();
    const refused = await bob.request.post(`/api/v1/slack-links/${code}`, { headers: { "x-halyard-csrf": "1" }, data: { run_as_me: true } });
    expect(refused.status()).toBe(403);
    expect((await refused.json()).error.code).toBe("slack_sign_in_not_configured");
    await shot(bob, "slack-link");
    await bob.getByRole("button", { name: "Link my Slack account" }).click();
    await expect(bob.getByRole("status")).toContainText("is bob");
    await expect(bob.getByRole("status")).toContainText("Nothing will run as you");
    // The link worked once.
    await bob.reload();
    await expect(bob.getByText("unknown, used or expired")).toBeVisible();
    // Alice's page shows who is linked.
    await page.getByRole("link", { name: "Automations" }).click();
    await expect(page.getByRole("listitem").filter({ hasText: "Team bot" })).toContainText("U0999XYZ → bob");
  } finally {
    slack.close();
  }
});

test("22. a Claude Code conversation started from the page: its command and answer in the timeline like Halyard's own", async ({ page }) => {
  // Claude Code speaks Anthropic's wire: an Anthropic profile (the scripted LLM) for it.
  const profile = { provider: "anthropic", base_url: process.env.HALYARD_LLM_URL, model: "claude-scripted", api_key: "sk-ant-scripted" };
  const put = await fetch(`${process.env.HALYARD_DIRECT_URL}/api/v1/llm-profiles/claude`, {
    method: "PUT",
    headers: { authorization: `Bearer ${ALICE}`, "content-type": "application/json" },
    body: JSON.stringify(profile),
  });
  expect([200, 201]).toContain(put.status);
  await signIn(page, ALICE);
  await page.getByRole("link", { name: "New conversation" }).click();
  await page.getByLabel("What should the agent do?").fill("Use Claude to write claude.txt");
  await page.getByLabel("Agent", { exact: true }).selectOption({ label: "Claude Code" });
  await expect(page.getByTestId("agent-note")).toContainText("anthropic");
  await page.getByLabel("LLM", { exact: true }).selectOption("claude");
  await page.getByRole("button", { name: "Start" }).click();
  await expect(page).toHaveURL(/\/c\/[0-9a-f-]{36}/);

  await expect(status(page)).toContainText("finished", { timeout: 60_000 });
  await expect(page.getByText(/Claude Agent .* works in this conversation/)).toBeVisible();
  const command = page.getByTestId("command-card").filter({ hasText: "echo from claude | tee claude.txt" });
  await expect(command.getByTestId("observation")).toContainText("from claude");
  await expect(page.locator(".msg.agent strong")).toHaveText("claude.txt");
  await shot(page, "claude-code");

  // Automations can have it too: every run of this one is a Claude Code conversation.
  await page.getByRole("link", { name: "Automations" }).click();
  await page.getByLabel("Kind").selectOption("schedule");
  await page.getByLabel("Name").fill("Claude nightly");
  await page.getByLabel("Cron").fill("0 2 * * *");
  await page.getByLabel("Prompt").fill("Review yesterday's changes.");
  await page.getByLabel("Agent", { exact: true }).selectOption({ label: "Claude Code" });
  await page.getByLabel("LLM", { exact: true }).selectOption("claude");
  await page.getByRole("button", { name: "Create automation" }).click();
  const nightly = page.getByRole("listitem").filter({ hasText: "Claude nightly" });
  await expect(nightly).toContainText("agent Claude Code · LLM claude");
  page.once("dialog", (d) => d.accept());
  await nightly.getByRole("button", { name: "Delete" }).click();
  await expect(nightly).toHaveCount(0);
});

test("23. a repository's hooks wait for the owner: the file is shown, and once allowed the agent goes on", async ({ page }) => {
  // A repository whose hooks file runs a command at every session's start.
  const dir = mkdtempSync(join(tmpdir(), "hooks-"));
  chmodSync(dir, 0o755);
  mkdirSync(join(dir, ".openhands"));
  writeFileSync(join(dir, ".openhands/hooks.json"), JSON.stringify({ session_start: [{ hooks: [{ command: "echo started > started.txt" }] }] }));
  execSync("git init -q -b main && git add . && git -c user.name=t -c user.email=t@example.com commit -qm hooks", { cwd: dir });
  await signIn(page, ALICE);
  await start(page, "look at the hooks", dir);
  const bar = page.getByRole("region", { name: "Repository hooks waiting for your consent" });
  await expect(bar.getByLabel("The hooks file")).toContainText("echo started > started.txt");
  await expect(bar).toContainText("with this conversation's secrets");
  await expect(status(page)).toContainText("idle");
  await shot(page, "hooks-consent");
  await bar.getByRole("button", { name: "Allow these hooks" }).click();
  await expect(status(page)).toContainText("finished");
  await expect(bar).toHaveCount(0);
  await expect(page.getByText("You allowed the repository's hooks.")).toBeVisible();
  await expect(page.getByText(/Hook session_start `echo started > started.txt` exited 0/)).toBeVisible();
});
