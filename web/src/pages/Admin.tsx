// Administration, for administrators only (the API refuses anyone else): users (made, made
// administrators or not, disabled and enabled again), each user's API keys (issued with the
// key shown once, revoked), and the ACP agents the deployment registers for everyone (a command
// line, an environment whose values are never shown, the LLM wire it speaks).

import { useEffect, useState, type FormEvent } from "react";
import { ApiError, call, errorText } from "../api";
import { AgentFields } from "../components/InlineForm";
import { str, useChange, useList } from "../components/SettingsParts";
import { ErrorText } from "../components/Status";

type User = { name: string; admin: boolean; disabled: boolean; managed: boolean; keys: number };
type Key = { id: string; name: string; scope: string; created_at: string; revoked_at?: string | null; session: boolean };
const enc = encodeURIComponent;

export function Admin() {
  const [users, setUsers] = useState<User[]>([]);
  const [error, setError] = useState<string>();
  const [name, setName] = useState("");
  const [admin, setAdmin] = useState(false);
  const [open, setOpen] = useState<string>();
  const load = () => call<{ items: User[] }>("GET", "/admin/users").then((r) => setUsers(r.items), (e) => setError(errorText(e)));
  useEffect(() => {
    load();
  }, []);
  const run = async (f: () => Promise<unknown>) => {
    try {
      await f();
      setError(undefined);
      await load();
      return true;
    } catch (e) {
      setError(e instanceof ApiError && e.code === "step_up_required" ? `${e.message} (sign out and in again, then retry)` : errorText(e));
      return false;
    }
  };
  const create = async (e: FormEvent) => {
    e.preventDefault();
    if (await run(() => call("POST", "/admin/users", { name: name.trim(), admin }))) (setName(""), setAdmin(false));
  };
  return (
    <section className="page">
      <h1>Users</h1>
      <ErrorText error={error} />
      <table className="admin-users" aria-label="Users">
        <thead>
          <tr>
            <th>Name</th>
            <th>Role</th>
            <th>State</th>
            <th>Keys</th>
            <th />
          </tr>
        </thead>
        <tbody>
          {users.map((u) => (
            <tr key={u.name}>
              <td>{u.name}</td>
              <td>{u.admin ? "administrator" : "user"}</td>
              <td>{u.disabled ? "disabled" : "active"}</td>
              <td>{u.keys}</td>
              <td className="row-actions">
                <button className="ghost" onClick={() => run(() => call("PATCH", `/admin/users/${enc(u.name)}`, { admin: !u.admin }))}>
                  {u.admin ? `Make ${u.name} a user` : `Make ${u.name} an administrator`}
                </button>
                <button className="ghost" onClick={() => run(() => call("PATCH", `/admin/users/${enc(u.name)}`, { disabled: !u.disabled }))}>
                  {u.disabled ? `Enable ${u.name}` : `Disable ${u.name}`}
                </button>
                <button className="ghost" aria-expanded={open === u.name} onClick={() => setOpen(open === u.name ? undefined : u.name)}>
                  {`Keys of ${u.name}`}
                </button>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      <form onSubmit={create} className="settings-form" aria-label="New user">
        <div className="field">
          <label htmlFor="new-user">Name</label>
          <input id="new-user" value={name} onChange={(e) => setName(e.target.value)} required pattern="[A-Za-z0-9_\-]+" />
        </div>
        <div className="field">
          <label htmlFor="new-admin">Administrator</label>
          <input id="new-admin" type="checkbox" checked={admin} onChange={(e) => setAdmin(e.target.checked)} />
        </div>
        <button type="submit">Add user</button>
      </form>
      {open && <Keys key={open} user={open} onChange={load} />}
      <Agents />
    </section>
  );
}

/** The deployment's registered agents: listed from `GET /agents` (those of no organization). */
function Agents() {
  const listed = useList("/agents");
  const { error, run, prompt } = useChange(listed.reload);
  const agents = listed.items.filter((a) => a.custom && !a.name.startsWith("@"));
  // (The form keeps what was typed when the change fails: the error says why.)
  const save = async (name: string, body: unknown) => {
    if (!(await run(() => call("PUT", `/agents/${enc(name)}`, body)))) throw new Error("refused");
  };
  return (
    <section className="card" aria-label="Registered agents">
      <h2>Registered agents</h2>
      <p className="muted small">Any program that speaks ACP on stdio, for every user's conversations (besides the installed ones).</p>
      <ul className="settings-list">
        {agents.map((a) => (
          <li key={a.name}>
            <strong>{a.name}</strong> <span className="muted">{`${str(a.title)} · speaks ${(a.wires as string[]).join(", ")}`}</span>{" "}
            <button className="ghost" onClick={() => run(() => call("DELETE", `/agents/${enc(a.name)}`))}>
              {`Remove ${a.name}`}
            </button>
          </li>
        ))}
      </ul>
      <AgentFields onSave={save} />
      {prompt}
      <ErrorText error={error ?? listed.loadError} />
    </section>
  );
}

function Keys({ user, onChange }: { user: string; onChange: () => void }) {
  const [keys, setKeys] = useState<Key[]>([]);
  const [error, setError] = useState<string>();
  const [label, setLabel] = useState("");
  const [shown, setShown] = useState<string>();
  const load = () => call<{ items: Key[] }>("GET", `/admin/users/${enc(user)}/keys`).then((r) => setKeys(r.items), (e) => setError(errorText(e)));
  useEffect(() => {
    load();
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [user]);
  const run = async (f: () => Promise<unknown>) => {
    try {
      await f();
      setError(undefined);
      await load();
      onChange();
    } catch (e) {
      setError(errorText(e));
    }
  };
  const issue = (e: FormEvent) => {
    e.preventDefault();
    run(async () => {
      const made = await call<{ key: string }>("POST", `/admin/users/${enc(user)}/keys`, { name: label.trim() });
      setShown(made.key);
      setLabel("");
    });
  };
  return (
    <section className="card" aria-label={`API keys of ${user}`}>
      <h2>API keys of {user}</h2>
      <ErrorText error={error} />
      {shown && (
        <div className="card secret" role="status">
          <p>The new key, shown this once: give it to {user}.</p>
          <code data-testid="issued-key">{shown}</code>
          <button className="ghost" onClick={() => setShown(undefined)}>
            Done
          </button>
        </div>
      )}
      <ul className="settings-list">
        {keys
          .filter((k) => !k.session)
          .map((k) => (
            <li key={k.id}>
              <strong>{k.name || "(unnamed)"}</strong>
              <span className="muted">
                {k.scope} · made {k.created_at.slice(0, 10)}
                {k.revoked_at ? " · revoked" : ""}
              </span>
              {!k.revoked_at && (
                <button className="ghost" onClick={() => run(() => call("DELETE", `/admin/keys/${enc(k.id)}`))}>
                  {`Revoke ${k.name || k.id}`}
                </button>
              )}
            </li>
          ))}
      </ul>
      <form onSubmit={issue} className="settings-form" aria-label={`New key for ${user}`}>
        <div className="field">
          <label htmlFor="key-label">Key name</label>
          <input id="key-label" value={label} onChange={(e) => setLabel(e.target.value)} required />
        </div>
        <button type="submit">Issue key</button>
      </form>
    </section>
  );
}
