// The conversations, newest first: searched by title and first message and filtered by state on
// the server (`GET /conversations?q=&state=`), loaded a page at a time as the list scrolls.

import { useEffect, useMemo, useRef, useState } from "react";
import { api, errorText } from "../api";
import type { Conversation } from "../types";
import { Link } from "../router";
import { StatusBadge, ago, ErrorText } from "../components/Status";

/** The list in the order it is shown: each helper right under its parent (when the parent is
 * loaded too), indented by how deep it is. */
function nest(items: Conversation[]): { c: Conversation; depth: number }[] {
  const ids = new Set(items.map((c) => c.id));
  const children = new Map<string, Conversation[]>();
  for (const c of items) {
    const p = c.parent_conversation_id;
    if (p && ids.has(p)) children.set(p, [...(children.get(p) ?? []), c]);
  }
  const out: { c: Conversation; depth: number }[] = [];
  const add = (c: Conversation, depth: number) => {
    out.push({ c, depth });
    // Helpers in the order they were asked for (the list itself is newest first).
    const kids = [...(children.get(c.id) ?? [])].sort((a, b) => a.created_at.localeCompare(b.created_at));
    for (const k of kids) add(k, depth + 1);
  };
  for (const c of items) if (!c.parent_conversation_id || !ids.has(c.parent_conversation_id)) add(c, 0);
  return out;
}

const STATUSES = [
  "",
  "starting",
  "start_failed",
  "idle",
  "running",
  "paused",
  "finished",
  "error",
  "stuck",
  "waiting_for_confirmation",
  "sandbox_deleted",
];

export function ConversationList() {
  const [query, setQuery] = useState("");
  const [debounced, setDebounced] = useState("");
  const [status, setStatus] = useState("");
  const [items, setItems] = useState<Conversation[]>([]);
  const [count, setCount] = useState<number>();
  const [cursor, setCursor] = useState<string>();
  const [loading, setLoading] = useState(false);
  const [error, setError] = useState<string>();
  const [confirming, setConfirming] = useState<string>();
  const sentinel = useRef<HTMLDivElement>(null);
  // Answers to an older search are dropped.
  const generation = useRef(0);

  useEffect(() => {
    const t = window.setTimeout(() => setDebounced(query.trim()), 250);
    return () => window.clearTimeout(t);
  }, [query]);

  const load = async (reset: boolean) => {
    const gen = reset ? ++generation.current : generation.current;
    setLoading(true);
    try {
      const page = await api.conversations({ q: debounced, state: status, cursor: reset ? undefined : cursor, limit: 30 });
      if (gen !== generation.current) return;
      setItems((prev) => (reset ? page.items : prev.concat(page.items)));
      setCursor(page.next_cursor ?? undefined);
      setCount(page.count);
      setError(undefined);
    } catch (e) {
      if (gen === generation.current) setError(errorText(e));
    } finally {
      if (gen === generation.current) setLoading(false);
    }
  };

  useEffect(() => {
    load(true);
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [debounced, status]);

  // Infinite scroll: the next page when the end of the list comes into view.
  useEffect(() => {
    const el = sentinel.current;
    if (!el || !cursor) return;
    const io = new IntersectionObserver((entries) => {
      if (entries.some((e) => e.isIntersecting) && !loading) load(false);
    });
    io.observe(el);
    return () => io.disconnect();
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [cursor, loading]);

  const rows = useMemo(() => nest(items), [items]);

  const remove = async (id: string) => {
    try {
      await api.remove(id);
      setItems((prev) => prev.filter((c) => c.id !== id));
      setCount((n) => (n === undefined ? n : n - 1));
    } catch (e) {
      setError(errorText(e));
    } finally {
      setConfirming(undefined);
    }
  };

  return (
    <section className="page">
      <div className="page-head">
        <h1>Conversations</h1>
        <Link href="/new" className="button">
          New conversation
        </Link>
      </div>
      <div className="filters" role="search">
        <input
          type="search"
          placeholder="Search titles and first messages"
          aria-label="Search conversations"
          value={query}
          onChange={(e) => setQuery(e.target.value)}
        />
        <select aria-label="Status" value={status} onChange={(e) => setStatus(e.target.value)}>
          {STATUSES.map((s) => (
            <option key={s} value={s}>
              {s === "" ? "Any status" : s.replace(/_/g, " ")}
            </option>
          ))}
        </select>
        {count !== undefined && (
          <span className="muted" data-testid="count">
            {count} conversation{count === 1 ? "" : "s"}
          </span>
        )}
      </div>
      <ErrorText error={error} />
      <ul className="conv-list" aria-label="Conversations">
        {rows.map(({ c, depth }) => (
          <li key={c.id} className={`conv-row${depth ? " helper-row" : ""}`} style={depth ? { marginLeft: `${depth * 1.5}rem` } : undefined}>
            <Link href={`/c/${c.id}`} className="conv-link">
              <span className="conv-title">{c.title || c.message || "Untitled"}</span>
              {c.title && c.message && <span className="conv-first">{c.message}</span>}
              <span className="conv-meta">
                <StatusBadge status={c.state} />
                {c.parent_conversation_id && <span className="badge helper">helper</span>}
                {c.repository && <span className="repo">{c.repository.url.replace(/^https?:\/\//, "")}</span>}
                {c.verdict && (
                  <span className={`badge verdict ${c.verdict.passed ? "passed" : "failed"}`} title={`score ${c.verdict.score.toFixed(2)}`}>
                    {c.verdict.passed ? "checks passed" : "checks failed"}
                  </span>
                )}
                {(c.pull_requests ?? []).map((p) => (
                  <span key={p.url} className="badge pr" title={p.title ?? undefined}>
                    PR #{p.number}
                  </span>
                ))}
                {Object.entries(c.tags ?? {}).map(([k, v]) => (
                  <span key={k} className="badge tag" data-testid="tag">
                    {k}: {v}
                  </span>
                ))}
                <time dateTime={c.updated_at} title={c.updated_at}>
                  {ago(c.updated_at)}
                </time>
              </span>
            </Link>
            {confirming === c.id ? (
              <span className="confirm" role="group" aria-label="Confirm delete">
                <span>Delete?</span>
                <button className="danger" onClick={() => remove(c.id)} autoFocus>
                  Delete
                </button>
                <button className="ghost" onClick={() => setConfirming(undefined)}>
                  Keep
                </button>
              </span>
            ) : (
              <button className="ghost" aria-label={`Delete ${c.title || "conversation"}`} onClick={() => setConfirming(c.id)}>
                Delete
              </button>
            )}
          </li>
        ))}
      </ul>
      {!loading && items.length === 0 && !error && (
        <p className="empty">{debounced || status ? "No conversation matches." : "No conversations yet. Start one."}</p>
      )}
      <div ref={sentinel} className="sentinel" />
      {loading && <p className="muted">Loading…</p>}
    </section>
  );
}
