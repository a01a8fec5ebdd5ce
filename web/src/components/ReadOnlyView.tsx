// A conversation shown to someone who may only read it: a share link's reader, or a member of
// the organization it is shared with. Its title and status as its log last says them, then its
// timeline, live, and its changes; nothing here writes.

import { useState, type ReactNode } from "react";
import type { HalyardEvent } from "../types";
import { Timeline, UserLabel } from "./Timeline";
import { ChangesView } from "./ChangesView";
import { StatusBadge } from "./Status";

const TABS = ["Chat", "Changes"] as const;
type Tab = (typeof TABS)[number];

export function ReadOnlyView(props: {
  id: string;
  /** The summary's title and state (the log's newer ones win). */
  title?: string | null;
  state: string;
  events: HalyardEvent[];
  connection: string;
  writing?: string;
  /** Under the title: who shares it, or an error. */
  notice?: ReactNode;
  /** How the owner's messages are labelled ("You" if absent). */
  owner?: string;
  shareToken?: string;
}) {
  const { id, events, connection, writing, notice, owner, shareToken } = props;
  const [tab, setTab] = useState<Tab>("Chat");
  let status = props.state;
  let title = props.title;
  for (const e of events) {
    if (e.kind === "execution_status") status = e.status;
    if (e.kind === "title") title = e.title;
  }
  const observations = events.filter((e) => e.kind === "observation").length;
  const timeline = <Timeline events={events} writing={writing} />;
  return (
    <>
      <div className="conv-head">
        <h1>{title ?? "Untitled conversation"}</h1>
        <div className="conv-controls">
          <span role="status" aria-label="Execution status">
            <StatusBadge status={status} />
          </span>
          <span className="muted small">{connection === "live" ? "live" : connection}</span>
        </div>
      </div>
      {notice}
      <div role="tablist" aria-label="Views" className="tabs">
        {TABS.map((t) => (
          <button key={t} role="tab" id={`tab-${t}`} aria-selected={tab === t} onClick={() => setTab(t)}>
            {t}
          </button>
        ))}
      </div>
      <div role="tabpanel" aria-labelledby={`tab-${tab}`} className="panel">
        {tab === "Chat" ? (
          owner ? <UserLabel.Provider value={owner}>{timeline}</UserLabel.Provider> : timeline
        ) : (
          <ChangesView id={id} version={observations} shareToken={shareToken} />
        )}
      </div>
    </>
  );
}
