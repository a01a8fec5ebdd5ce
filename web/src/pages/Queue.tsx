// The start queue, for administrators (the API refuses anyone else): each sandbox host's room,
// who waits for a sandbox in the order they will be placed (new starts and wakes of hibernated
// sandboxes alike), and organizations' shares of the queue (a weight against the others while
// they wait, a priority, and how many sandboxes they may run at once), set and reset here. The
// page reads the queue again every two seconds while it is open.

import { useEffect, useState, type FormEvent } from "react";
import { api } from "../api";
import type { QueueView } from "../api-schema";
import { useChange } from "../components/SettingsParts";
import { ErrorText, ordinal } from "../components/Status";
import { useResource } from "../resource";

const EMPTY: QueueView = { waiting: [], hosts: [], per_place_ms: null, shares: [] };

export function Queue() {
  const queue = useResource(api.queue, [], EMPTY);
  const { reload } = queue;
  useEffect(() => {
    const every = window.setInterval(reload, 2000);
    return () => window.clearInterval(every);
  }, [reload]);
  const { waiting, hosts, shares } = queue.data;
  return (
    <section className="page">
      <h1>Start queue</h1>
      <ErrorText error={queue.error} />
      <section className="card" aria-label="Sandbox hosts">
        <h2>Hosts</h2>
        <ul className="settings-list">
          {hosts.map((h) => (
            <li key={h.node}>
              <strong>{h.node}</strong>{" "}
              <span className="muted">
                {h.slots === 0 ? `${h.busy} running (no limit)` : `busy ${h.busy} of ${h.slots}`}
                {h.alive ? "" : " · silent"}
              </span>
            </li>
          ))}
        </ul>
      </section>
      <table className="admin-users" aria-label="Waiting starts">
        <caption>
          {waiting.length === 0 ? "Nobody waits." : `${waiting.length} waiting`}
          {queue.data.per_place_ms != null && waiting.length > 0 && ` · one placed about every ${Math.round(queue.data.per_place_ms / 100) / 10} s`}
        </caption>
        <thead>
          <tr>
            <th>Place</th>
            <th>Owner</th>
            <th>Organization</th>
            <th>For</th>
            <th>Waited</th>
            <th>Taken by</th>
          </tr>
        </thead>
        <tbody>
          {waiting.map((w) => (
            <tr key={w.sandbox_id}>
              <td>{ordinal(w.position)}</td>
              <td>{w.owner}</td>
              <td>{w.org ?? "—"}</td>
              <td>{w.wake_on ? `a wake (on ${w.wake_on})` : `${w.class === "interactive" ? "an" : "a"} ${w.class} start`}</td>
              <td>{w.waited_secs} s</td>
              <td>{w.taken_by ?? "—"}</td>
            </tr>
          ))}
        </tbody>
      </table>
      <Shares shares={shares} onChange={reload} />
    </section>
  );
}

/** Organizations' shares: those set, each with a reset, and a form to set one. */
function Shares({ shares, onChange }: { shares: QueueView["shares"]; onChange: () => Promise<void> }) {
  const [org, setOrg] = useState("");
  const [weight, setWeight] = useState(1);
  const [priority, setPriority] = useState(0);
  const [maxRunning, setMaxRunning] = useState("");
  const { error, run, prompt } = useChange(onChange);
  const save = async (e: FormEvent) => {
    e.preventDefault();
    const max_running = maxRunning.trim() === "" ? undefined : Number(maxRunning);
    if (await run(() => api.putShare(org.trim(), { weight, priority, max_running }))) (setOrg(""), setMaxRunning(""));
  };
  return (
    <section className="card" aria-label="Organizations' shares">
      <h2>Shares</h2>
      <p className="muted small">
        While several wait, an organization of weight 3 takes three turns to another's one; a higher priority goes first; past its maximum, its
        next start waits. The others have weight 1, priority 0 and no maximum of their own.
      </p>
      <ul className="settings-list">
        {shares.map((s) => (
          <li key={s.org}>
            <strong>{s.org}</strong>{" "}
            <span className="muted">{`weight ${s.weight} · priority ${s.priority}${s.max_running != null ? ` · at most ${s.max_running} running` : ""}`}</span>{" "}
            <button className="ghost" onClick={() => run(() => api.resetShare(s.org))}>
              {`Reset ${s.org}`}
            </button>
          </li>
        ))}
      </ul>
      <form onSubmit={save} className="settings-form" aria-label="Set a share">
        <div className="field">
          <label htmlFor="share-org">Organization</label>
          <input id="share-org" value={org} onChange={(e) => setOrg(e.target.value)} required />
        </div>
        <div className="field">
          <label htmlFor="share-weight">Weight</label>
          <input id="share-weight" type="number" min={1} max={100} value={weight} onChange={(e) => setWeight(Number(e.target.value))} />
        </div>
        <div className="field">
          <label htmlFor="share-priority">Priority</label>
          <input id="share-priority" type="number" min={-10} max={10} value={priority} onChange={(e) => setPriority(Number(e.target.value))} />
        </div>
        <div className="field">
          <label htmlFor="share-max">Max running</label>
          <input id="share-max" type="number" min={1} placeholder="no limit" value={maxRunning} onChange={(e) => setMaxRunning(e.target.value)} />
        </div>
        <button type="submit">Set share</button>
      </form>
      {prompt}
      <ErrorText error={error} />
    </section>
  );
}
