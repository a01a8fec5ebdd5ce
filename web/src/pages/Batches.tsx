// Batches: many tasks run a few at a time, each an ordinary conversation, with one results
// table that fills in as items end (read again every two seconds while a batch runs). A batch
// is paused, resumed, cancelled, and its failed items run again from here; it is started from
// the API or `halyard batch run tasks.jsonl`.

import { useEffect, useState } from "react";
import { api } from "../api";
import type * as S from "../api-schema";
import { useResource } from "../resource";
import { ErrorText } from "../components/Status";
import { Link } from "../router";

function BatchTable({ id, onChange }: { id: string; onChange: () => void }) {
  const batch = useResource(async () => api.batch(id), [id], undefined as S.BatchView | undefined);
  const reload = batch.reload;
  const running = batch.data?.status === "running";
  useEffect(() => {
    if (!running) return;
    const t = window.setInterval(reload, 2000);
    return () => window.clearInterval(t);
  }, [reload, running]);
  const b = batch.data;
  const act = (action: string) => batch.run(async () => (await api.batchAction(id, action), onChange()));
  return (
    <section className="card batch" aria-label={`Batch ${b?.name ?? id}`}>
      <ErrorText error={batch.error} />
      {b && (
        <>
          <h2>
            {b.name ?? `Batch ${b.id.slice(0, 8)}`} <span className="muted small" data-testid="batch-status">{b.status}</span>
          </h2>
          <p className="muted small" data-testid="batch-counts">
            {b.counts.passed ?? 0} passed, {b.counts.failed ?? 0} failed, {b.counts.running ?? 0} running, {b.counts.waiting ?? 0} waiting
            (at most {b.concurrency} at once{b.attempts > 1 ? `; best of ${b.attempts} attempts per item` : ""})
          </p>
          <div className="row-buttons">
            {b.status === "running" && <button onClick={() => act("pause")}>Pause</button>}
            {b.status === "paused" && <button onClick={() => act("resume")}>Resume</button>}
            {(b.status === "running" || b.status === "paused") && (
              <button className="danger" onClick={() => confirm("Cancel the batch? Its waiting items never start.") && act("cancel")}>
                Cancel
              </button>
            )}
            {(b.counts.failed ?? 0) > 0 && <button onClick={() => act("rerun")}>Run the failed items again</button>}
            <a className="button ghost" href={api.batchCsvUrl(id)} download>
              CSV
            </a>
          </div>
          <table className="batch-items">
            <thead>
              <tr>
                <th>#</th>
                <th>Task</th>
                <th>Status</th>
                <th>Verdict</th>
                <th>Score</th>
                <th>Tokens</th>
                <th>Cost</th>
                <th>Seconds</th>
              </tr>
            </thead>
            <tbody>
              {b.items.map((r) => (
                <tr key={r.index} data-status={r.status}>
                  <td>{r.index}</td>
                  <td>
                    {r.conversation_id ? <Link href={`/c/${r.conversation_id}`}>{r.message}</Link> : r.message}
                    {r.attempts && r.attempts.length > 0 && (
                      <div className="muted small attempts">
                        {r.attempts.map((a, i) =>
                          a.conversation_id ? (
                            <Link key={i} href={`/c/${a.conversation_id}`} className={i === r.best_attempt ? "best" : undefined}>
                              attempt {i + 1}
                              {a.score == null ? "" : ` (${a.score.toFixed(2)})`}
                              {i === r.best_attempt ? " ★ best" : ""}{" "}
                            </Link>
                          ) : (
                            <span key={i}>attempt {i + 1} waiting </span>
                          ),
                        )}
                      </div>
                    )}
                  </td>
                  <td>{r.status === "running" && r.state ? r.state : r.status}</td>
                  <td>{r.verdict ?? "—"}</td>
                  <td>{r.score == null ? "—" : r.score.toFixed(2)}</td>
                  <td>{r.tokens}</td>
                  <td>${r.cost_usd.toFixed(4)}</td>
                  <td>{r.duration_secs == null ? "—" : r.duration_secs.toFixed(1)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </>
      )}
    </section>
  );
}

export function Batches() {
  const list = useResource(async () => (await api.batches()).items, [], undefined as S.BatchView[] | undefined);
  const [open, setOpen] = useState<string>();
  const shown = open ?? list.data?.[0]?.id;
  return (
    <section className="page">
      <h1>Batches</h1>
      <p className="muted">
        Many tasks run a few at a time, each an ordinary conversation, checked as it finishes. Start one with{" "}
        <code>halyard batch run tasks.jsonl</code> or <code>POST /api/v1/batches</code>.
      </p>
      <ErrorText error={list.error} />
      <ul className="batch-list">
        {list.data?.map((b) => (
          <li key={b.id}>
            <button className={b.id === shown ? "selected" : "ghost"} onClick={() => setOpen(b.id)}>
              {b.name ?? b.id.slice(0, 8)} · {b.status} · {b.counts.passed ?? 0}/{b.items.length} passed
            </button>
          </li>
        ))}
      </ul>
      {list.data && list.data.length === 0 && <p className="empty">No batches yet.</p>}
      {shown && <BatchTable key={shown} id={shown} onChange={list.reload} />}
    </section>
  );
}
