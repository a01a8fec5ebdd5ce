// The user's sandboxes: status, and pause, resume, delete, each with its conversation's title.
// Sandbox ids are shown by their last twelve digits: Halyard's ids are time-ordered, so their
// first digits are shared by neighbours.

import { useEffect } from "react";
import { api } from "../api";
import type { Conversation } from "../types";
import { useResource } from "../resource";
import { Link } from "../router";
import { StatusBadge, ago, ErrorText } from "../components/Status";

export function Sandboxes() {
  const sandboxes = useResource(async () => (await api.sandboxes()).items, [], undefined);
  // The newest conversations' titles (else their first message), for the sandboxes' rows.
  const titles = useResource(
    async () => new Map((await api.conversations({ limit: 100 })).items.map((c: Conversation) => [c.id, c.title || c.message || "Untitled"])),
    [],
    new Map<string, string>(),
  );
  const { data: items, error, run } = sandboxes;
  const names = titles.data;
  const { reload } = sandboxes;
  const reloadTitles = titles.reload;
  useEffect(() => {
    const t = window.setInterval(() => (reload(), reloadTitles()), 3000);
    return () => window.clearInterval(t);
  }, [reload, reloadTitles]);

  return (
    <section className="page">
      <h1>Sandboxes</h1>
      <ErrorText error={error} />
      <table className="sandboxes">
        <thead>
          <tr>
            <th>Sandbox</th>
            <th>Status</th>
            <th>Conversation</th>
            <th>Updated</th>
            <th />
          </tr>
        </thead>
        <tbody>
          {items?.map((s) => (
            <tr key={s.id}>
              <td>
                <code title={s.id}>{s.id.slice(-12)}</code> <span className="muted small">{s.kind}{s.spec ? ` · ${s.spec}` : ""}</span>
              </td>
              <td>
                <StatusBadge status={s.status} />
                {s.detail && <div className="muted small">{s.detail}</div>}
              </td>
              <td>{s.conversation_id ? <Link href={`/c/${s.conversation_id}`} title={s.conversation_id}>{names.get(s.conversation_id) ?? s.conversation_id.slice(-12)}</Link> : <span className="muted">pool</span>}</td>
              <td>{ago(s.updated_at)}</td>
              <td className="row-buttons">
                {s.status === "RUNNING" && (
                  <button className="ghost" onClick={() => run(() => api.pauseSandbox(s.id))}>
                    Pause
                  </button>
                )}
                {(s.status === "PAUSED" || s.status === "HIBERNATED" || s.status === "MISSING" || s.status === "ERROR") && (
                  <button className="ghost" onClick={() => run(() => api.resumeSandbox(s.id))}>
                    Resume
                  </button>
                )}
                <button className="danger" onClick={() => confirm("Delete this sandbox and its workspace?") && run(() => api.deleteSandbox(s.id))}>
                  Delete
                </button>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {items && items.length === 0 && <p className="empty">No sandboxes.</p>}
    </section>
  );
}
