// Plugins: the marketplaces of one scope (yours, an organization's, the deployment's) with what
// each plugin would add before anything is installed, the plugins installed there with the
// updates their marketplaces offer (applied only with a click), and for yours what a conversation
// gets now: the deployment's and organizations' plugins too, turned off here unless required.

import { useState } from "react";
import { api, errorText } from "../api";
import type * as S from "../api-schema";
import { useResource } from "../resource";
import { ErrorText, ago } from "../components/Status";

function Adds({ adds }: { adds: S.PluginAdds }) {
  const parts: [string, string[]][] = [
    ["Skills", adds.skills],
    ["Commands", adds.commands.map((c) => `/${c}`)],
    ["Agents", adds.agents],
    ["Hooks", adds.hooks],
    ["MCP servers", adds.mcp_servers],
  ];
  const shown = parts.filter(([, names]) => names.length > 0);
  if (shown.length === 0) return <span className="muted">nothing Halyard uses</span>;
  return (
    <ul className="adds" aria-label="Adds">
      {shown.map(([what, names]) => (
        <li key={what}>
          {what}: {names.join(", ")}
        </li>
      ))}
    </ul>
  );
}

const short = (commit: string) => commit.slice(0, 10);

function MarketplaceForm({ scope, onAdded }: { scope: string; onAdded: () => void }) {
  const [url, setUrl] = useState("");
  const [ref, setRef] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string>();
  const add = async () => {
    setBusy(true);
    setError(undefined);
    try {
      await api.addMarketplace(scope, { url, ref: ref || null });
      setUrl("");
      onAdded();
    } catch (e) {
      setError(errorText(e));
    } finally {
      setBusy(false);
    }
  };
  return (
    <form
      className="card"
      aria-label="Add a marketplace"
      onSubmit={(e) => {
        e.preventDefault();
        void add();
      }}
    >
      <label>
        Marketplace repository (git URL) <input value={url} onChange={(e) => setUrl(e.target.value)} required />
      </label>
      <label>
        Branch or tag (optional) <input value={ref} onChange={(e) => setRef(e.target.value)} />
      </label>
      <button disabled={busy}>{busy ? "Fetching…" : "Add marketplace"}</button>
      <ErrorText error={error} />
    </form>
  );
}

function Installed({ scope, view, run }: { scope: string; view: S.ScopeView; run: (change: () => Promise<unknown>) => Promise<boolean> }) {
  const widened = scope !== "me";
  if (view.installed.length === 0) return <p className="muted">No plugins installed here yet.</p>;
  return (
    <table aria-label="Installed plugins">
      <thead>
        <tr>
          <th>Plugin</th>
          <th>Version</th>
          <th>Adds</th>
          <th>On</th>
          {widened && <th>Required</th>}
          <th>Update</th>
          <th />
        </tr>
      </thead>
      <tbody>
        {view.installed.map((p) => (
          <tr key={p.id}>
            <td>{p.id}</td>
            <td>
              {p.version ?? "—"} <code title={p.commit}>{short(p.commit)}</code>
            </td>
            <td>
              <Adds adds={p.adds} />
            </td>
            <td>
              <input
                type="checkbox"
                aria-label={`${p.id} enabled`}
                checked={p.enabled}
                onChange={(e) => void run(() => api.changePlugin(scope, p.id, { enabled: e.target.checked }))}
              />
            </td>
            {widened && (
              <td>
                <input
                  type="checkbox"
                  aria-label={`${p.id} required`}
                  checked={p.policy === "required"}
                  onChange={(e) => void run(() => api.changePlugin(scope, p.id, { policy: e.target.checked ? "required" : "optional" }))}
                />
              </td>
            )}
            <td>
              {p.update ? (
                <>
                  <span>
                    Update available: {p.update.version ?? short(p.update.commit)}
                  </span>{" "}
                  <button onClick={() => void run(() => api.upgradePlugin(scope, p.id))}>Upgrade {p.name}</button>
                </>
              ) : (
                <span className="muted">up to date</span>
              )}
            </td>
            <td>
              <button
                className="ghost"
                onClick={() => confirm(`Remove ${p.id}? Conversations that have it keep it.`) && void run(() => api.uninstallPlugin(scope, p.id))}
              >
                Remove
              </button>
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function Marketplaces({ scope, view, run }: { scope: string; view: S.ScopeView; run: (change: () => Promise<unknown>) => Promise<boolean> }) {
  if (view.marketplaces.length === 0) return <p className="muted">No marketplaces added here yet.</p>;
  const installed = new Set(view.installed.map((p) => p.id));
  return (
    <>
      {view.marketplaces.map((m) => (
        <section key={m.name} className="card" aria-label={`Marketplace ${m.name}`}>
          <h3>
            {m.name} <code title={m.commit}>{short(m.commit)}</code>
          </h3>
          <p className="muted">
            {m.source.url}
            {m.source.git_ref ? ` (${m.source.git_ref})` : ""} · fetched {ago(m.fetched_at)}
          </p>
          {m.description && <p>{m.description}</p>}
          <button onClick={() => void run(() => api.refreshMarketplace(scope, m.name))}>Check {m.name} for updates</button>{" "}
          <button className="ghost" onClick={() => confirm(`Remove marketplace ${m.name}?`) && void run(() => api.removeMarketplace(scope, m.name))}>
            Remove marketplace
          </button>
          <table aria-label={`Plugins of ${m.name}`}>
            <tbody>
              {m.plugins.map((p) => {
                const id = `${p.name}@${m.name}`;
                return (
                  <tr key={p.name}>
                    <td>
                      <strong>{p.name}</strong> {p.version ?? ""}
                      <div className="muted">{p.description}</div>
                    </td>
                    <td>{p.error ? <span className="error">{p.error}</span> : <Adds adds={p.adds} />}</td>
                    <td>
                      {installed.has(id) ? (
                        <span className="muted">installed</span>
                      ) : (
                        <button disabled={!!p.error} onClick={() => void run(() => api.installPlugin(scope, { plugin: id }))}>
                          Install {p.name}
                        </button>
                      )}
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </section>
      ))}
    </>
  );
}

/** What a conversation of yours gets now, with the switches for plugins of wider scopes. */
function Effective({ view, run }: { view: S.ScopeView; run: (change: () => Promise<unknown>) => Promise<boolean> }) {
  const theirs = (view.effective ?? []).filter((p) => p.scope !== "user");
  const off = view.disabled;
  if (theirs.length === 0 && off.length === 0) return null;
  return (
    <section aria-label="From your organization and the deployment">
      <h3>From your organization and the deployment</h3>
      <ul>
        {theirs.map((p) => {
          const id = `${p.name}@${p.marketplace}`;
          return (
            <li key={id}>
              {id} {p.version ?? ""} ({p.scope}){" "}
              {p.required ? (
                <span className="muted">required</span>
              ) : (
                <button onClick={() => void run(() => api.changePlugin("me", id, { enabled: false }))}>Turn off {p.name}</button>
              )}
            </li>
          );
        })}
        {off.map((id) => (
          <li key={id}>
            {id} (turned off) <button onClick={() => void run(() => api.changePlugin("me", id, { enabled: true }))}>Turn on</button>
          </li>
        ))}
      </ul>
    </section>
  );
}

export function Plugins({ admin }: { admin: boolean }) {
  const orgs = useResource(async () => (await api.orgs()).items.map((o) => o.name), [], [] as string[]);
  const [scope, setScope] = useState("me");
  const [org, setOrg] = useState("");
  const view = useResource(() => api.plugins(scope, scope === "me" ? org || undefined : undefined), [scope, org], undefined as S.ScopeView | undefined);
  const scopes = ["me", ...orgs.data.map((o) => `@${o}`), "deployment"];
  const canChange = scope !== "deployment" || admin;
  return (
    <main className="page">
      <h1>Plugins</h1>
      <p className="muted">
        Plugins in Claude Code's format bring skills, slash commands, named agents, hooks and MCP servers. A conversation gets the
        deployment's, then its organization's, then yours, at the versions installed when it starts.
      </p>
      <label>
        Whose{" "}
        <select aria-label="Scope" value={scope} onChange={(e) => setScope(e.target.value)}>
          {scopes.map((s) => (
            <option key={s} value={s}>
              {s === "me" ? "Mine" : s === "deployment" ? "The deployment's" : `Organization ${s.slice(1)}`}
            </option>
          ))}
        </select>
      </label>
      {scope === "me" && orgs.data.length > 0 && (
        <label>
          {" "}
          Conversations in{" "}
          <select aria-label="Organization" value={org} onChange={(e) => setOrg(e.target.value)}>
            <option value="">no organization</option>
            {orgs.data.map((o) => (
              <option key={o} value={o}>
                {o}
              </option>
            ))}
          </select>
        </label>
      )}
      <ErrorText error={view.error} />
      {view.data && (
        <>
          <h2>Installed</h2>
          <Installed scope={scope} view={view.data} run={view.run} />
          {scope === "me" && <Effective view={view.data} run={view.run} />}
          <h2>Marketplaces</h2>
          {canChange && <MarketplaceForm scope={scope} onAdded={() => void view.reload()} />}
          <Marketplaces scope={scope} view={view.data} run={view.run} />
        </>
      )}
    </main>
  );
}
