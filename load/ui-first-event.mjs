// The web workspace in headless Chromium (Debian's; HALYARD_CHROMIUM): for each conversation,
// a fresh browser context signs in, opens the conversation's page, and times, from the start
// of navigation, the first event on screen and the whole log held (data-count = all events).
// Also the JavaScript the page loads, gzipped. Prints one JSON object; load/src/ui.rs runs it.
//
// Usage: node load/ui-first-event.mjs <web dir> <base url> <api key> <runs> <conv id>=<events>...
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { gzipSync } from "node:zlib";

const [webDir, base, key, runsArg, ...convs] = process.argv.slice(2);
const { chromium } = await import(pathToFileURL(join(webDir, "node_modules/playwright-core/index.mjs")).href);

// Bundle sizes: what index.html loads at once, and every script there is.
const assets = join(webDir, "dist/assets");
const html = readFileSync(join(webDir, "dist/index.html"), "utf8");
let initial = 0;
let all = 0;
for (const f of readdirSync(assets).filter((f) => f.endsWith(".js"))) {
  const gz = gzipSync(readFileSync(join(assets, f)), { level: 9 }).length;
  all += gz;
  if (html.includes(`/assets/${f}`)) initial += gz;
}

const browser = await chromium.launch({ executablePath: process.env.HALYARD_CHROMIUM ?? "/usr/bin/chromium", args: ["--no-sandbox"] });
const results = {};
for (const spec of convs) {
  const [id, events] = spec.split("=");
  const runs = [];
  for (let i = 0; i < Number(runsArg); i++) {
    const context = await browser.newContext({ baseURL: base, viewport: { width: 1280, height: 800 } });
    const signIn = await context.request.post("/api/v1/session", { data: { api_key: key } });
    if (!signIn.ok()) throw new Error(`sign-in: ${signIn.status()}`);
    const page = await context.newPage();
    await page.goto(`/c/${id}`);
    await page.waitForSelector(".row[data-seq]");
    const first = await page.evaluate(() => performance.now());
    await page
      // At least: the conversation's own late events (a title, a state) may land after the fill.
      .waitForFunction((n) => Number(document.querySelector('[data-testid="seq"]')?.getAttribute("data-count")) >= n, Number(events), {
        timeout: 60_000,
        polling: 20,
      })
      .catch(async (e) => {
        const seq = page.getByTestId("seq");
        throw new Error(`${events} events: the page holds ${await seq.getAttribute("data-count")} up to ${await seq.getAttribute("data-last")}: ${e}`);
      });
    const whole = await page.evaluate(() => performance.now());
    // Where the time goes (the first run only): the document, each resource, the first paint.
    const timeline =
      i === 0
        ? await page.evaluate(() =>
            [...performance.getEntriesByType("navigation"), ...performance.getEntriesByType("resource"), ...performance.getEntriesByType("paint")].map(
              (e) => `${e.name.replace(location.origin, "")} ${Math.round(e.startTime)}-${Math.round(e.responseEnd ?? e.startTime)}`,
            ),
          )
        : undefined;
    runs.push({ first_event_ms: Math.round(first), all_events_ms: Math.round(whole), timeline });
    await context.close();
  }
  results[events] = runs;
}
await browser.close();
console.log(JSON.stringify({ js_gzip_bytes_initial: initial, js_gzip_bytes_all: all, runs: results }));
