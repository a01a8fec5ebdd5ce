// A conversation another member of one of your organizations shares with it (`visibility: org`):
// its timeline, live, and its changes, read-only, the way a share link shows it. Only its owner
// acts on it (the API answers anyone else 403 `read_only`), so nothing here writes.

import { useEffect, useState } from "react";
import { api, errorText } from "../api";
import { useEventStream } from "../events";
import type { Conversation } from "../types";
import { ErrorText } from "../components/Status";
import { ReadOnlyView } from "../components/ReadOnlyView";
import { ConversationPage } from "./ConversationPage";

export function OrgConversation({ first }: { first: Conversation }) {
  const [conv, setConv] = useState(first);
  const [error, setError] = useState<string>();
  const { events, connection, writing } = useEventStream(first.id, true, first.last_event_seq);
  useEffect(() => {
    // The summary now and then: its owner may stop sharing it (then it is 404 here).
    const t = window.setInterval(() => api.conversation(first.id).then((c) => (setConv(c), setError(undefined)), (e) => setError(errorText(e))), 5000);
    return () => window.clearInterval(t);
  }, [first.id]);
  const notice = (
    <>
      <p className="muted" aria-label="Shared by">
        {conv.owner}'s conversation, shared with {conv.org} · read only
      </p>
      <ErrorText error={error} />
    </>
  );
  return (
    <section className="conversation">
      <ReadOnlyView
        id={conv.id}
        title={conv.title}
        state={conv.state}
        events={events}
        connection={connection}
        writing={writing}
        notice={notice}
        owner={conv.owner}
      />
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
