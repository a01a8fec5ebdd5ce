// A conversation another member of one of your organizations shares with it (`visibility: org`):
// its timeline, live, and its changes, read-only, the way a share link shows it. Only its owner
// acts on it (the API answers anyone else 403 `read_only`), so nothing here writes.

import { useEffect, useState } from "react";
import { api, errorText } from "../api";
import { useEventStream } from "../events";
import type { Conversation } from "../types";
import { Timeline, UserLabel } from "../components/Timeline";
import { ChangesView } from "../components/ChangesView";
import { StatusBadge, ErrorText } from "../components/Status";
import { ConversationPage } from "./ConversationPage";

const TABS = ["Chat", "Changes"] as const;
type Tab = (typeof TABS)[number];

export function OrgConversation({ first }: { first: Conversation }) {
  const [conv, setConv] = useState(first);
  const [error, setError] = useState<string>();
  const [tab, setTab] = useState<Tab>("Chat");
  const { events, connection, writing } = useEventStream(first.id, true, first.last_event_seq);
  useEffect(() => {
    // The summary now and then: its owner may stop sharing it (then it is 404 here).
    const t = window.setInterval(() => api.conversation(first.id).then((c) => (setConv(c), setError(undefined)), (e) => setError(errorText(e))), 5000);
    return () => window.clearInterval(t);
  }, [first.id]);
  let status: string = conv.state;
  let title = conv.title;
  for (const e of events) {
    if (e.kind === "execution_status") status = e.status;
    if (e.kind === "title") title = e.title;
  }
  const observations = events.filter((e) => e.kind === "observation").length;
  return (
    <section className="conversation">
      <div className="conv-head">
        <h1>{title ?? "Untitled conversation"}</h1>
        <div className="conv-controls">
          <span role="status" aria-label="Execution status">
            <StatusBadge status={status} />
          </span>
          <span className="muted small">{connection === "live" ? "live" : connection}</span>
        </div>
      </div>
      <p className="muted" aria-label="Shared by">
        {conv.owner}'s conversation, shared with {conv.org} · read only
      </p>
      <ErrorText error={error} />
      <div role="tablist" aria-label="Views" className="tabs">
        {TABS.map((t) => (
          <button key={t} role="tab" id={`tab-${t}`} aria-selected={tab === t} onClick={() => setTab(t)}>
            {t}
          </button>
        ))}
      </div>
      <div role="tabpanel" aria-labelledby={`tab-${tab}`} className="panel">
        {tab === "Chat" ? (
          <UserLabel.Provider value={conv.owner}>
            <Timeline events={events} writing={writing} />
          </UserLabel.Provider>
        ) : (
          <ChangesView id={conv.id} version={observations} />
        )}
      </div>
    </section>
  );
}

/** `/c/<id>`: your own conversation's page, or, for one another member shares with your
 * organization, the read-only view (yours shows at once; the owner is known from one read). */
export function ConversationRoute({ id, me }: { id: string; me: string }) {
  const [other, setOther] = useState<Conversation>();
  useEffect(() => {
    setOther(undefined);
    api.conversation(id).then(
      (c) => c.owner !== me && setOther(c),
      () => {},
    );
  }, [id, me]);
  return other ? <OrgConversation first={other} /> : <ConversationPage key={id} id={id} />;
}
