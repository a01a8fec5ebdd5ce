// A conversation opened through a share link (`/shared/<token>`): no account, nothing to write.
// Its timeline, live, and its changes; the page checks the link now and then and says so the
// moment the owner revokes it (the gateway closes the event stream then too).

import { useEffect, useState } from "react";
import { api, ApiError, errorText } from "../api";
import { useEventStream } from "../events";
import type { SharedConversation as Shared } from "../types";
import { ReadOnlyView } from "../components/ReadOnlyView";

export function SharedConversation({ token }: { token: string }) {
  const [conv, setConv] = useState<Shared>();
  const [error, setError] = useState<string>();
  const [revoked, setRevoked] = useState(false);
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
            <ReadOnlyView
              id={conv.id}
              title={conv.title}
              state={conv.state}
              events={events}
              connection={connection}
              writing={writing}
              shareToken={token}
            />
          )}
        </section>
      </main>
    </div>
  );
}
