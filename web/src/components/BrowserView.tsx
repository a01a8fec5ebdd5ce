// The agent's browser, live: the page its last browser tool left (each browser step's
// observation names the page and a screenshot of it) and that screenshot, which the browser
// loads from the API with the session cookie. Before the timeline has caught up, the
// conversation's own record of the page stands in.

import { useMemo } from "react";
import { api } from "../api";
import type { BrowserPage, HalyardEvent } from "../types";

/** The page the events left the browser on last, and which step left it there. */
export function latestPage(events: HalyardEvent[]): (BrowserPage & { tool: string; seq: number }) | undefined {
  for (let i = events.length - 1; i >= 0; i--) {
    const e = events[i];
    if (e.kind === "observation" && e.url !== undefined) return { url: e.url, screenshot_id: e.screenshot_id, tool: e.tool, seq: e.seq };
  }
  return undefined;
}

export function BrowserView({ id, events, known }: { id: string; events: HalyardEvent[]; known?: BrowserPage }) {
  const latest = useMemo(() => latestPage(events), [events]);
  const page = latest ?? known;
  if (!page) return <p className="muted">The agent has not used the browser yet.</p>;
  return (
    <section className="browser" aria-label="Browser">
      <div className="browser-bar">
        <span className="muted small">Address</span>{" "}
        <output className="browser-url" data-testid="browser-url">
          {page.url}
        </output>
      </div>
      {page.screenshot_id ? (
        <img
          className="browser-shot"
          data-testid="browser-screenshot"
          src={api.screenshotUrl(id, page.screenshot_id)}
          alt={`The agent's browser at ${page.url}`}
        />
      ) : (
        <p className="muted">There is no screenshot of this page.</p>
      )}
      {latest && (
        <p className="muted small">
          After <code>{latest.tool}</code> (event {latest.seq}).
        </p>
      )}
    </section>
  );
}
