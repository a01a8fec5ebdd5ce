// The specs' `test`: Playwright's, with every page of every context a test opens watched for
// console errors and uncaught exceptions, which fail the test when it ends. A page that logs an
// error on load (a `pattern` Chromium cannot compile, a render that throws) is broken even when
// everything a spec clicks works.
//
// Only Halyard's own pages count (the `baseURL` origin): an identity provider's login form or an
// agent's served app is not this project's to judge. Not counted either: Chromium's own line for
// an HTTP answer of 4xx or 5xx ("Failed to load resource: the server responded with a status of
// ..."), which is the API refusing what a spec asks it to refuse, not the page failing; and what
// a spec names with `expectConsoleError` (a WebSocket whose server the spec took down on
// purpose).

import { test as base, expect, type BrowserContext, type ConsoleMessage } from "@playwright/test";

export { expect };
export type { Page } from "@playwright/test";

const HTTP_STATUS = /^Failed to load resource: the server responded with a status of \d{3}/;

type Watch = { errors: string[]; expected: RegExp[]; origin: string };
const watches = new WeakMap<object, Watch>();

/** Lets the current test's pages log errors matching `pattern` (say why where it is called). */
export function expectConsoleError(testInfo: { title: string }, pattern: RegExp) {
  const w = watches.get(testInfo);
  if (w) w.expected.push(pattern);
}

function watch(context: BrowserContext, w: Watch) {
  const seen = (where: string, text: string) => {
    if (!where.startsWith(w.origin) || HTTP_STATUS.test(text) || w.expected.some((p) => p.test(text))) return;
    w.errors.push(`${where}: ${text}`);
  };
  // Where a message comes from is the script (or resource) that logged it, else its page: a
  // frame of another origin (VS Code, a served app) logs from there.
  context.on("console", (m: ConsoleMessage) => {
    if (m.type() === "error") seen(m.location().url || (m.page()?.url() ?? "?"), m.text());
  });
  context.on("weberror", (e) => seen(e.page()?.url() ?? "?", String(e.error())));
}

export const test = base.extend<{ consoleErrors: void }>({
  consoleErrors: [
    async ({ context, browser, baseURL }, use, testInfo) => {
      const w: Watch = { errors: [], expected: [], origin: new URL(baseURL ?? "http://127.0.0.1:3000").origin };
      watches.set(testInfo, w);
      watch(context, w);
      // Contexts a test opens itself (another user, a stranger) are watched too.
      const newContext = browser.newContext.bind(browser);
      browser.newContext = async (...args) => {
        const c = await newContext(...args);
        watch(c, w);
        return c;
      };
      try {
        await use();
      } finally {
        browser.newContext = newContext;
      }
      expect(w.errors, "the pages logged errors").toEqual([]);
    },
    { auto: true },
  ],
});
