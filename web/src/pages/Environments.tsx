// Environments: what a conversation's sandbox is set up with, once, and the snapshots later
// starts begin from. Each environment (yours, editable here; the deployment's, read-only) with
// its setup, and each snapshot with its size against the quota, its pool and the end of its
// setup's output; deleting a snapshot makes the next start set up again.

import { useEffect, useState } from "react";
import { api, errorText } from "../api";
import type * as S from "../api-schema";
import { useResource } from "../resource";
import { ErrorText, ago } from "../components/Status";

const lines = (text: string) =>
  text
    .split("\n")
    .map((l) => l.trim())
    .filter(Boolean);

function mib(bytes: number) {
  return `${Math.ceil(bytes / (1 << 20))} MiB`;
}

function EnvironmentForm({ onSaved }: { onSaved: () => void }) {
  const [name, setName] = useState("");
  const [setup, setSetup] = useState("");
  const [postStart, setPostStart] = useState("");
  const [secrets, setSecrets] = useState("");
  const [cacheKey, setCacheKey] = useState("");
  const [pool, setPool] = useState(0);
  const [setupEgress, setSetupEgress] = useState("");
  const [runtime, setRuntime] = useState("");
  const [memory, setMemory] = useState("");
  const [ports, setPorts] = useState("");
  const [error, setError] = useState<string>();
  const save = async () => {
    setError(undefined);
    try {
      await api.putEnvironment(name, {
        setup: lines(setup),
        post_start: lines(postStart),
        setup_secrets: lines(secrets.replace(/,/g, "\n")),
        cache_key: lines(cacheKey.replace(/,/g, "\n")),
        pool_size: pool,
        setup_egress: setupEgress || null,
        runtime: runtime || null,
        resources: memory ? { memory_mb: Number(memory) } : {},
        forward_ports: lines(ports.replace(/,/g, "\n")).map(Number),
      });
      onSaved();
    } catch (e) {
      setError(errorText(e));
    }
  };
  return (
    <form
      className="card"
      aria-label="Environment"
      onSubmit={(e) => {
        e.preventDefault();
        void save();
      }}
    >
      <label>
        Name <input value={name} onChange={(e) => setName(e.target.value)} required />
      </label>
      <label>
        Setup commands (one a line, run once; the result is kept)
        <textarea value={setup} onChange={(e) => setSetup(e.target.value)} rows={3} />
      </label>
      <label>
        On every start (one a line)
        <textarea value={postStart} onChange={(e) => setPostStart(e.target.value)} rows={2} />
      </label>
      <label>
        Secrets setup may use (names, comma separated; never in the snapshot)
        <input value={secrets} onChange={(e) => setSecrets(e.target.value)} />
      </label>
      <label>
        Files that key the snapshot (lock files, comma separated; else the branch's head)
        <input value={cacheKey} onChange={(e) => setCacheKey(e.target.value)} />
      </label>
      <label>
        Warm pool (containers kept ready from each snapshot)
        <input type="number" min={0} max={10} value={pool} onChange={(e) => setPool(Number(e.target.value))} />
      </label>
      <label>
        Setup's network (when wider or narrower than the sandbox's own)
        <select value={setupEgress} onChange={(e) => setSetupEgress(e.target.value)}>
          <option value="">the sandbox's own</option>
          <option value="open">open</option>
          <option value="internet">internet</option>
          <option value="none">none</option>
        </select>
      </label>
      <label>
        Runtime
        <select value={runtime} onChange={(e) => setRuntime(e.target.value)}>
          <option value="">the spec's</option>
          <option value="runc">runc</option>
          <option value="gvisor">gVisor (a kernel of its own: safer, slower system calls)</option>
        </select>
      </label>
      <label>
        Memory limit in MiB (at most the spec's; empty: the spec's)
        <input type="number" min={64} value={memory} onChange={(e) => setMemory(e.target.value)} />
      </label>
      <label>
        Forwarded ports (served as apps, comma separated)
        <input value={ports} onChange={(e) => setPorts(e.target.value)} />
      </label>
      <ErrorText error={error} />
      <button type="submit">Save environment</button>
    </form>
  );
}

export function Environments() {
  const envs = useResource(async () => (await api.environments()).items, [], undefined);
  const snaps = useResource(async () => api.snapshots(), [], undefined);
  const reloadSnaps = snaps.reload;
  useEffect(() => {
    const t = window.setInterval(reloadSnaps, 5000);
    return () => window.clearInterval(t);
  }, [reloadSnaps]);
  const list: S.SnapshotList | undefined = snaps.data;

  return (
    <section className="page">
      <h1>Environments</h1>
      <p className="muted">
        A start names one (or gets its repository's <code>.devcontainer/devcontainer.json</code>, its organization's default, or the
        deployment's). Setup runs once; later starts begin from its snapshot, fetch the repository, and run only what runs on every start.
      </p>
      <ErrorText error={envs.error ?? snaps.error} />
      <table className="environments">
        <thead>
          <tr>
            <th>Environment</th>
            <th>Setup</th>
            <th>Pool</th>
            <th />
          </tr>
        </thead>
        <tbody>
          {envs.data?.map((e) => (
            <tr key={e.name}>
              <td>
                <code>{e.name}</code> <span className="muted small">{e.scope}{e.default ? " · default" : ""}</span>
              </td>
              <td>
                <pre className="small">{e.setup.join("\n") || "—"}</pre>
                {e.setup_secrets.length > 0 && <div className="muted small">secrets: {e.setup_secrets.join(", ")}</div>}
                {e.cache_key.length > 0 && <div className="muted small">keyed by: {e.cache_key.join(", ")}</div>}
                {e.setup_egress && <div className="muted small">setup's network: {e.setup_egress}</div>}
                {(e.spec || e.runtime || e.resources.memory_mb || e.resources.cpus) && (
                  <div className="muted small">
                    {e.spec && `spec ${e.spec}`} {e.runtime && `under ${e.runtime}`} {e.resources.memory_mb && `${e.resources.memory_mb} MiB`} {e.resources.cpus && `${e.resources.cpus} CPUs`}
                  </div>
                )}
                {e.forward_ports.length > 0 && <div className="muted small">forwards: {e.forward_ports.join(", ")}</div>}
              </td>
              <td>{e.pool_size}</td>
              <td className="row-buttons">
                {e.scope === "user" && (
                  <button className="danger" onClick={() => confirm(`Delete environment ${e.name}?`) && envs.run(() => api.deleteEnvironment(e.name))}>
                    Delete
                  </button>
                )}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {envs.data && envs.data.length === 0 && <p className="empty">No environments yet.</p>}
      <EnvironmentForm onSaved={envs.reload} />

      <h2>Snapshots</h2>
      {list && (
        <p className="muted">
          {mib(list.used_bytes)} used{list.quota_bytes ? ` of ${mib(list.quota_bytes)}` : ""}
        </p>
      )}
      <table className="snapshots">
        <thead>
          <tr>
            <th>Snapshot</th>
            <th>Environment</th>
            <th>Size</th>
            <th>Pool</th>
            <th>Made</th>
            <th />
          </tr>
        </thead>
        <tbody>
          {list?.items.map((s) => (
            <tr key={s.id}>
              <td>
                <code title={s.id}>{s.id.slice(-12)}</code> <span className="muted small">{s.kind} · {s.status}</span>
                {s.detail && <div className="muted small">{s.detail}</div>}
                {s.setup_log && (
                  <details>
                    <summary className="small">Setup log ({s.setup_secs.toFixed(1)} s)</summary>
                    <pre className="small">{s.setup_log}</pre>
                  </details>
                )}
              </td>
              <td>
                <code>{s.environment}</code>
                {s.repository && <div className="muted small">{s.repository}{s.branch ? ` @ ${s.branch}` : ""}</div>}
              </td>
              <td>{mib(s.size_bytes)}</td>
              <td>{s.pool_size > 0 ? `${s.pool_ready} / ${s.pool_size} ready` : "—"}</td>
              <td>{ago(s.created_at)}</td>
              <td className="row-buttons">
                <button className="danger" onClick={() => confirm("Delete this snapshot? The next start sets up again.") && snaps.run(() => api.deleteSnapshot(s.id))}>
                  Delete
                </button>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {list && list.items.length === 0 && <p className="empty">No snapshots yet: the first start with an environment makes one.</p>}
    </section>
  );
}
