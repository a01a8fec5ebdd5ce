// Administration, for administrators only (the API refuses anyone else): users (made, made
// administrators or not, disabled and enabled again), each user's API keys (issued with the
// key shown once, revoked), and the ACP agents the deployment registers for everyone (a command
// line, an environment whose values are never shown, the LLM wire it speaks). A change that
// needs a recent sign-in asks for the API key again, as on the settings page.

import { useState, type FormEvent } from "react";
import { api } from "../api";
import { AgentFields } from "../components/InlineForm";
import { str, useChange, useList } from "../components/SettingsParts";
import { ErrorText } from "../components/Status";
import { useItems } from "../resource";

export function Admin() {
  const listed = useItems(api.users);
  const users = listed.data;
  const { error, run, prompt } = useChange(listed.reload);
  const [name, setName] = useState("");
  const [admin, setAdmin] = useState(false);
  const [open, setOpen] = useState<string>();
  const create = async (e: FormEvent) => {
    e.preventDefault();
    if (await run(() => api.createUser(name.trim(), admin))) (setName(""), setAdmin(false));
  };
  return (
    <section className="page">
      <h1>Users</h1>
      {prompt}
      <ErrorText error={error ?? listed.error} />
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
                <button className="ghost" onClick={() => run(() => api.patchUser(u.name, { admin: !u.admin }))}>
                  {u.admin ? `Make ${u.name} a user` : `Make ${u.name} an administrator`}
                </button>
                <button className="ghost" onClick={() => run(() => api.patchUser(u.name, { disabled: !u.disabled }))}>
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
      {open && <Keys key={open} user={open} onChange={listed.reload} />}
      <Agents />
    </section>
  );
}

/** The deployment's registered agents: listed from `GET /agents` (those of no organization). */
function Agents() {
  const listed = useList(api.agents.list);
  const { error, run, prompt } = useChange(listed.reload);
  const agents = listed.items.filter((a) => a.custom && !a.name.startsWith("@"));
  // (The form keeps what was typed when the change fails: the error says why.)
  const save = async (name: string, body: unknown) => {
    if (!(await run(() => api.agents.put(name, body)))) throw new Error("refused");
  };
  return (
    <section className="card" aria-label="Registered agents">
      <h2>Registered agents</h2>
      <p className="muted small">Any program that speaks ACP on stdio, for every user's conversations (besides the installed ones).</p>
      <ul className="settings-list">
        {agents.map((a) => (
          <li key={a.name}>
            <strong>{a.name}</strong> <span className="muted">{`${str(a.title)} · speaks ${(a.wires as string[]).join(", ")}`}</span>{" "}
            <button className="ghost" onClick={() => run(() => api.agents.remove(a.name))}>
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
  const listed = useItems(() => api.userKeys(user), [user]);
  const [label, setLabel] = useState("");
  const [shown, setShown] = useState<string>();
  const run = async (f: () => Promise<unknown>) => (await listed.run(f)) && onChange();
  const issue = (e: FormEvent) => {
    e.preventDefault();
    run(async () => {
      const made = await api.createUserKey(user, label.trim());
      setShown(made.key ?? undefined);
      setLabel("");
    });
  };
  return (
    <section className="card" aria-label={`API keys of ${user}`}>
      <h2>API keys of {user}</h2>
      <ErrorText error={listed.error} />
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
        {listed.data
          .filter((k) => !k.session)
          .map((k) => (
            <li key={k.id}>
              <strong>{k.name || "(unnamed)"}</strong>
              <span className="muted">
                {k.scope} · made {k.created_at.slice(0, 10)}
                {k.revoked_at ? " · revoked" : ""}
              </span>
              {!k.revoked_at && (
                <button className="ghost" onClick={() => run(() => api.revokeAnyKey(k.id))}>
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
