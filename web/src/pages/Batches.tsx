// Batches: many tasks run a few at a time, each an ordinary conversation, with one results
// table that fills in as items end (read again every two seconds while a batch runs). A batch
// is paused, resumed, cancelled, and its failed items run again from here; it is started from
// the API or `halyard batch run tasks.jsonl`. A group (one start run several times, `attempts`)
// has a page of its own (`/batches/<id>`): its attempts side by side, the best one marked.

import { type ReactNode, useEffect, useState } from "react";
import { api } from "../api";
import type * as S from "../api-schema";
import { useResource } from "../resource";
import { ErrorText } from "../components/Status";
import { Link } from "../router";

/** Batch `id` (with `diff`: each attempt's changes), read again every two seconds while it runs. */
function useLiveBatch(id: string, diff = false) {
  const batch = useResource(async () => api.batch(id, diff), [id, diff], undefined as S.BatchView | undefined);
  const reload = batch.reload;
  const running = batch.data?.status === "running";
  useEffect(() => {
    if (!running) return;
    const t = window.setInterval(reload, 2000);
    return () => window.clearInterval(t);
  }, [reload, running]);
  return batch;
}

function BatchTable({ id, onChange }: { id: string; onChange: () => void }) {
  const batch = useLiveBatch(id);
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
            <Link className="button ghost" href={`/batches/${id}`}>
              Its own page
            </Link>
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

/** A size of changes as a diffstat says it. */
function diffText(d: S.DiffSize | null | undefined) {
  if (!d) return "—";
  return `${d.files} file${d.files === 1 ? "" : "s"}, +${d.additions} −${d.deletions}`;
}

/** A group's attempts side by side: one column each, the best marked once every one ended. */
function Group({ id }: { id: string }) {
  const group = useLiveBatch(id, true);
  const g = group.data;
  const row = g?.items[0];
  const attempts = row?.attempts ?? [];
  const line = (label: string, cell: (a: S.ItemRow) => ReactNode) => (
    <tr>
      <th scope="row">{label}</th>
      {attempts.map((a, i) => (
        <td key={i} className={i === row?.best_attempt ? "best" : undefined}>
          {cell(a)}
        </td>
      ))}
    </tr>
  );
  return (
    <section className="page">
      <ErrorText error={group.error} />
      {g && row && (
        <section className="card batch" aria-label={`Group ${g.name ?? id}`}>
          <h1>
            {g.name ?? `Group ${g.id.slice(0, 8)}`} <span className="muted small" data-testid="batch-status">{g.status}</span>
          </h1>
          <p className="muted">
            {row.message} · best of {g.attempts}
            {row.best_attempt == null ? "" : `: attempt ${row.best_attempt + 1} was chosen; the others are kept to read (fork one to carry on)`}
          </p>
          <table className="batch-items group" data-testid="attempts">
            <thead>
              <tr>
                <th />
                {attempts.map((a, i) => (
                  <th key={i} scope="col" data-status={a.status}>
                    Attempt {i + 1}
                    {i === row.best_attempt ? " ★ best" : ""}
                  </th>
                ))}
              </tr>
            </thead>
            <tbody>
              {line("Status", (a) => (a.status === "running" && a.state ? a.state : a.status))}
              {line("Verdict", (a) => a.verdict ?? "—")}
              {line("Score", (a) => (a.score == null ? "—" : a.score.toFixed(2)))}
              {line("Tokens", (a) => a.tokens)}
              {line("Cost", (a) => `$${a.cost_usd.toFixed(4)}`)}
              {line("Seconds", (a) => (a.duration_secs == null ? "—" : a.duration_secs.toFixed(1)))}
              {line("Changes", (a) => diffText(a.diff))}
              {line("Result", (a) => (a.result == null ? "—" : <code>{JSON.stringify(a.result)}</code>))}
              {line("", (a) => (a.conversation_id ? <Link href={`/c/${a.conversation_id}`}>Open</Link> : "waiting"))}
            </tbody>
          </table>
        </section>
      )}
    </section>
  );
}

/** `/batches/<id>`: a group's page, or a batch's table alone. */
export function BatchPage({ id }: { id: string }) {
  const batch = useResource(async () => api.batch(id), [id], undefined as S.BatchView | undefined);
  const b = batch.data;
  if (!b) return <ErrorText error={batch.error} />;
  if (b.items.length === 1 && b.attempts > 1) return <Group id={id} />;
  return (
    <section className="page">
      <BatchTable id={id} onChange={batch.reload} />
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
