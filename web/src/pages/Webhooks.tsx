// Webhooks: create (the signing secret is shown once), rotate the secret, enable or disable,
// delete, and each one's deliveries with a retry for the failed ones.

import { useState, type FormEvent } from "react";
import { api } from "../api";
import { useItems } from "../resource";
import { ErrorText } from "../components/Status";

export function Webhooks() {
  const { data: hooks, error, run } = useItems(api.webhooks);
  const [secret, setSecret] = useState<{ id: string; secret: string }>();
  const [url, setUrl] = useState("");
  const [description, setDescription] = useState("");
  const [open, setOpen] = useState<string>();

  const create = (e: FormEvent) => {
    e.preventDefault();
    run(async () => {
      const hook = await api.createWebhook({ url: url.trim(), description: description.trim() || undefined });
      if (hook.secret) setSecret({ id: hook.id, secret: hook.secret });
      setUrl("");
      setDescription("");
    });
  };

  return (
    <section className="page">
      <h1>Webhooks</h1>
      <form onSubmit={create} className="inline-form" aria-label="New webhook">
        <input aria-label="Webhook URL" placeholder="https://example.com/halyard" value={url} onChange={(e) => setUrl(e.target.value)} required />
        <input aria-label="Description" placeholder="Description (optional)" value={description} onChange={(e) => setDescription(e.target.value)} />
        <button type="submit">Create webhook</button>
      </form>
      <ErrorText error={error} />
      {secret && (
        <div className="card secret" role="status">
          <p>
            The signing secret, shown this once: keep it where your receiver can read it.
          </p>
          <code data-testid="webhook-secret">{secret.secret}</code>
          <button className="ghost" onClick={() => navigator.clipboard?.writeText(secret.secret)}>
            Copy
          </button>
          <button className="ghost" onClick={() => setSecret(undefined)}>
            Done
          </button>
        </div>
      )}
      <ul className="hook-list" aria-label="Webhooks">
        {hooks.map((h) => (
          <li key={h.id} className="card">
            <div className="hook-head">
              <code className="hook-url">{h.url}</code>
              <span className={`badge ${h.enabled ? "s-running" : "s-paused"}`}>{h.enabled ? "enabled" : "disabled"}</span>
              {h.disabled_reason && <span className="muted small">{h.disabled_reason}</span>}
            </div>
            {h.description && <p className="muted">{h.description}</p>}
            <div className="row-buttons">
              <button className="ghost" onClick={() => run(() => api.patchWebhook(h.id, { enabled: !h.enabled }))}>
                {h.enabled ? "Disable" : "Enable"}
              </button>
              <button
                className="ghost"
                onClick={() =>
                  run(async () => {
                    const r = await api.rotateWebhook(h.id);
                    if (r.secret) setSecret({ id: h.id, secret: r.secret });
                  })
                }
              >
                Rotate secret
              </button>
              <button className="ghost" onClick={() => setOpen(open === h.id ? undefined : h.id)} aria-expanded={open === h.id}>
                Deliveries
              </button>
              <button className="danger" onClick={() => confirm(`Delete the webhook to ${h.url}?`) && run(() => api.deleteWebhook(h.id))}>
                Delete
              </button>
            </div>
            {open === h.id && <Deliveries id={h.id} />}
          </li>
        ))}
      </ul>
      {hooks.length === 0 && <p className="empty">No webhooks. Events can be signed and posted to your server as they happen.</p>}
    </section>
  );
}

function Deliveries({ id }: { id: string }) {
  const { data: items, error, loading, run } = useItems(() => api.deliveries(id), [id]);
  if (error) return <p className="error">{error}</p>;
  if (loading && items.length === 0) return <p className="muted">Loading…</p>;
  if (items.length === 0) return <p className="muted">No deliveries yet.</p>;
  return (
    <table className="deliveries">
      <thead>
        <tr>
          <th>Time</th>
          <th>Event</th>
          <th>Attempt</th>
          <th>Outcome</th>
          <th />
        </tr>
      </thead>
      <tbody>
        {items.map((d) => (
          <tr key={`${d.delivery_id}-${d.attempt}`}>
            <td>{new Date(d.time).toLocaleString()}</td>
            <td>seq {d.seq}</td>
            <td>{d.attempt}</td>
            <td>
              {d.outcome}
              {d.status_code ? ` (${d.status_code})` : ""} {d.error && <span className="muted small">{d.error}</span>}
            </td>
            <td>
              {d.outcome !== "delivered" && (
                <button className="ghost" onClick={() => run(() => api.retryDelivery(id, d.delivery_id))}>
                  Retry
                </button>
              )}
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}
