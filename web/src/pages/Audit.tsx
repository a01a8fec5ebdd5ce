// The audit trail, for administrators only (the API refuses anyone else): who did what, newest
// first, filtered by actor and action, older pages on demand, and the whole of it (with the
// filters) as JSON Lines. Nothing here changes a record: the API has no way to.

import { useState, type FormEvent } from "react";
import { api, errorText } from "../api";
import type { AuditPage } from "../types";
import { ErrorText } from "../components/Status";
import { useResource } from "../resource";

/** The trail at `base` (`/admin/audit`, or an organization's `/orgs/<org>/audit`). */
export function Audit({ base = "/admin/audit", title = "Audit" }: { base?: string; title?: string }) {
  const [actor, setActor] = useState("");
  const [action, setAction] = useState("");
  const [applied, setApplied] = useState({ actor: "", action: "" });
  const filters = { actor: applied.actor.trim(), action: applied.action.trim() };
  const empty: AuditPage = { items: [] };
  const trail = useResource(() => api.audit(base, filters), [applied, base], empty);
  const { items } = trail.data;
  const next = trail.data.next_cursor ?? undefined;
  const error = trail.error;
  // An older page joins the list below the ones shown.
  const older = async (cursor: string) => {
    try {
      const page = await api.audit(base, { ...filters, cursor });
      trail.setData({ ...page, items: [...items, ...page.items] });
    } catch (e) {
      trail.setError(errorText(e));
    }
  };

  const filter = (e: FormEvent) => {
    e.preventDefault();
    setApplied({ actor, action });
  };

  return (
    <section className="page">
      {base === "/admin/audit" ? <h1>{title}</h1> : <h2>{title}</h2>}
      <form onSubmit={filter} className="inline-form" aria-label="Filter the audit trail">
        <input aria-label="Actor" placeholder="Actor (a user name)" value={actor} onChange={(e) => setActor(e.target.value)} />
        <input aria-label="Action" placeholder="Action (secret.put, or secret. for all)" value={action} onChange={(e) => setAction(e.target.value)} />
        <button type="submit">Filter</button>
        <a className="button ghost" href={api.auditJsonlUrl(base, filters)} download="halyard-audit.jsonl">
          Export JSON Lines
        </a>
      </form>
      <ErrorText error={error} />
      <table className="audit" aria-label="Audit trail">
        <thead>
          <tr>
            <th>Time</th>
            <th>Actor</th>
            <th>Action</th>
            <th>Target</th>
            <th>Detail</th>
            <th>Client</th>
          </tr>
        </thead>
        <tbody>
          {items.map((r, i) => (
            <tr key={`${r.time}-${i}`}>
              <td>
                <time dateTime={r.time}>{new Date(r.time).toLocaleString()}</time>
              </td>
              <td>{r.actor}</td>
              <td>
                <code>{r.action}</code>
              </td>
              <td>{r.target}</td>
              <td>
                <code>{Object.keys(r.detail).length ? JSON.stringify(r.detail) : ""}</code>
              </td>
              <td>{r.client ?? ""}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {items.length === 0 && !error && <p className="empty">Nothing recorded that matches.</p>}
      {next && (
        <button className="ghost" onClick={() => older(next)}>
          Older
        </button>
      )}
    </section>
  );
}
