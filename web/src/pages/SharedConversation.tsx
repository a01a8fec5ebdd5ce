// A conversation opened through a share link (`/shared/<token>`): no account, nothing to write.
// Its timeline, live, and its changes; the page checks the link now and then and says so the
// moment the owner revokes it (the gateway closes the event stream then too).

import { useEffect, useState } from "react";
import { api, ApiError, errorText } from "../api";
import { useEventStream } from "../events";
import type { SharedConversation as Shared } from "../types";
import { Timeline } from "../components/Timeline";
import { ChangesView } from "../components/ChangesView";
import { StatusBadge } from "../components/Status";

const TABS = ["Chat", "Changes"] as const;
type Tab = (typeof TABS)[number];

export function SharedConversation({ token }: { token: string }) {
  const [conv, setConv] = useState<Shared>();
  const [error, setError] = useState<string>();
  const [revoked, setRevoked] = useState(false);
  const [tab, setTab] = useState<Tab>("Chat");
  const { events, connection, writing } = useEventStream(conv?.id, !!conv && !revoked, conv?.last_event_seq, token);

  useEffect(() => {
    let stop = false;
    let t: number | undefined;
    const load = () =>
      api.shared(token).then(
        (c) => !stop && (setConv(c), setError(undefined)),
        (e) => {
          if (stop) return;
          if (e instanceof ApiError && e.status === 404) {
            // For good: a revoked link does not come back (each look would count as a guess).
            setRevoked(true);
            window.clearInterval(t);
          } else setError(errorText(e));
        },
      );
    load();
    t = window.setInterval(load, 3000);
    return () => {
      stop = true;
      window.clearInterval(t);
    };
  }, [token]);

  const observations = events.filter((e) => e.kind === "observation").length;
  // The log is newer than the summary (read every few seconds): its last status and title win.
  let status = conv?.state;
  let title = conv?.title;
  for (const e of events) {
    if (e.kind === "execution_status") status = e.status;
    if (e.kind === "title") title = e.title;
  }
  return (
    <div className="app">
      <header className="topbar">
        <span className="brand">Halyard</span>
        <span className="muted">Shared conversation · read only</span>
      </header>
      <main>
        <section className="conversation">
          {revoked ? (
            <p role="alert" className="error">
              This link was revoked, or never existed. Ask the conversation's owner for a new one.
            </p>
          ) : !conv ? (
            error ? (
              <p role="alert" className="error">
                {error}
              </p>
            ) : (
              <p className="muted">Opening…</p>
            )
          ) : (
            <>
              <div className="conv-head">
                <h1>{title ?? "Untitled conversation"}</h1>
                <div className="conv-controls">
                  <span role="status" aria-label="Execution status">
                    <StatusBadge status={status ?? "starting"} />
                  </span>
                  <span className="muted small">{connection === "live" ? "live" : connection}</span>
                </div>
              </div>
              <div role="tablist" aria-label="Views" className="tabs">
                {TABS.map((t) => (
                  <button key={t} role="tab" id={`tab-${t}`} aria-selected={tab === t} onClick={() => setTab(t)}>
                    {t}
                  </button>
                ))}
              </div>
              <div role="tabpanel" aria-labelledby={`tab-${tab}`} className="panel">
                {tab === "Chat" ? (
                  <Timeline events={events} writing={writing} />
                ) : (
                  <ChangesView id={conv.id} version={observations} shareToken={token} />
                )}
              </div>
            </>
          )}
        </section>
      </main>
    </div>
  );
}
