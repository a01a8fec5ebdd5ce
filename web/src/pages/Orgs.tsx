// Organizations: the ones you are in (with your role), a new one (you own it), and one's
// members: added by owners and admins, roles changed by owners, removed (or left), then its
// settings, prices and budgets ([`OrgSettings`]). Owners and admins also read what happened in
// it (its audit trail). The API enforces every rule; the page
// offers what your role may do.

import { useEffect, useState, type FormEvent } from "react";
import { call, errorText } from "../api";
import type { Conversation, Member, Org } from "../types";
import { Link } from "../router";
import { ErrorText } from "../components/Status";
import { Audit } from "./Audit";
import { OrgSettings } from "./OrgSettings";
import { OrgResources } from "./OrgResources";

const enc = encodeURIComponent;
const ROLES = ["member", "admin", "owner"] as const;

export function Orgs({ me }: { me: string }) {
  const [orgs, setOrgs] = useState<Org[]>([]);
  const [error, setError] = useState<string>();
  const [name, setName] = useState("");
  const [open, setOpen] = useState<string>();
  const load = () => call<{ items: Org[] }>("GET", "/orgs").then((r) => setOrgs(r.items), (e) => setError(errorText(e)));
  useEffect(() => {
    load();
  }, []);
  const create = async (e: FormEvent) => {
    e.preventDefault();
    try {
      const org = await call<Org>("POST", "/orgs", { name: name.trim() });
      setName("");
      setError(undefined);
      setOpen(org.name);
      await load();
    } catch (err) {
      setError(errorText(err));
    }
  };
  const current = orgs.find((o) => o.name === open);
  return (
    <section className="page">
      <h1>Organizations</h1>
      <form onSubmit={create} className="inline-form" aria-label="New organization">
        <input aria-label="Organization name" placeholder="acme" value={name} onChange={(e) => setName(e.target.value)} required />
        <button type="submit">Create organization</button>
      </form>
      <ErrorText error={error} />
      <ul className="settings-list" aria-label="Your organizations">
        {orgs.map((o) => (
          <li key={o.name}>
            <strong>{o.name}</strong> <span className="muted">
              {o.role}, {o.members} {o.members === 1 ? "member" : "members"}
            </span>{" "}
            <button className="ghost" onClick={() => setOpen(open === o.name ? undefined : o.name)}>
              Members of {o.name}
            </button>
          </li>
        ))}
      </ul>
      {orgs.length === 0 && <p className="empty">You are in no organization.</p>}
      {current && <Members key={current.name} org={current} me={me} onChange={load} onGone={() => (setOpen(undefined), load())} />}
      {current && <Shared key={`shared-${current.name}`} org={current.name} />}
      {current && <OrgSettings key={`settings-${current.name}`} org={current} />}
      {current && <OrgResources key={`offers-${current.name}`} org={current} />}
    </section>
  );
}

function Members({ org, me, onChange, onGone }: { org: Org; me: string; onChange: () => void; onGone: () => void }) {
  const [members, setMembers] = useState<Member[]>([]);
  const [error, setError] = useState<string>();
  const [user, setUser] = useState("");
  const [role, setRole] = useState<Member["role"]>("member");
  const path = `/orgs/${enc(org.name)}/members`;
  const load = () => call<{ items: Member[] }>("GET", path).then((r) => setMembers(r.items), (e) => setError(errorText(e)));
  useEffect(() => {
    load();
  }, [path]);
  const run = async (f: () => Promise<unknown>, after = load) => {
    try {
      await f();
      setError(undefined);
      await after();
      onChange();
    } catch (e) {
      setError(errorText(e));
    }
  };
  const add = (e: FormEvent) => {
    e.preventDefault();
    run(() => call("POST", path, { user: user.trim(), role })).then(() => setUser(""));
  };
  const manages = org.role === "owner" || org.role === "admin";
  return (
    <div className="card" role="region" aria-label={`Members of ${org.name}`}>
      <h2>Members of {org.name}</h2>
      <ErrorText error={error} />
      <table className="admin-users" aria-label="Members">
        <thead>
          <tr>
            <th>User</th>
            <th>Role</th>
            <th />
          </tr>
        </thead>
        <tbody>
          {members.map((m) => (
            <tr key={m.user}>
              <td>{m.user}</td>
              <td>
                {org.role === "owner" ? (
                  <select aria-label={`Role of ${m.user}`} value={m.role} onChange={(e) => run(() => call("PATCH", `${path}/${enc(m.user)}`, { role: e.target.value }))}>
                    {ROLES.map((r) => (
                      <option key={r}>{r}</option>
                    ))}
                  </select>
                ) : (
                  m.role
                )}
              </td>
              <td className="row-actions">
                {m.user === me ? (
                  <button className="ghost" onClick={() => run(() => call("DELETE", `${path}/${enc(m.user)}`), async () => onGone())}>
                    Leave {org.name}
                  </button>
                ) : (
                  (org.role === "owner" || (org.role === "admin" && m.role === "member")) && (
                    <button className="ghost" onClick={() => run(() => call("DELETE", `${path}/${enc(m.user)}`))}>
                      Remove {m.user}
                    </button>
                  )
                )}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {manages && (
        <form onSubmit={add} className="inline-form" aria-label="Add a member">
          <input aria-label="User" placeholder="A user name" value={user} onChange={(e) => setUser(e.target.value)} required />
          <select aria-label="Role" value={role} onChange={(e) => setRole(e.target.value as Member["role"])}>
            {(org.role === "owner" ? ROLES : (["member"] as const)).map((r) => (
              <option key={r}>{r}</option>
            ))}
          </select>
          <button type="submit">Add member</button>
        </form>
      )}
      {manages && <Audit key={`audit-${members.length}`} base={`/orgs/${enc(org.name)}/audit`} title={`What happened in ${org.name}`} />}
    </div>
  );
}

/** The conversations members share with the organization, to open read-only. */
function Shared({ org }: { org: string }) {
  const [items, setItems] = useState<Conversation[]>([]);
  const [error, setError] = useState<string>();
  useEffect(() => {
    call<{ items: Conversation[] }>("GET", `/orgs/${enc(org)}/conversations`).then(
      (r) => setItems(r.items),
      (e) => setError(errorText(e)),
    );
  }, [org]);
  return (
    <div className="card" role="region" aria-label={`Shared with ${org}`}>
      <h2>Shared with {org}</h2>
      <ErrorText error={error} />
      {items.length === 0 ? (
        <p className="empty">No conversation is shared with {org} yet.</p>
      ) : (
        <ul className="settings-list">
          {items.map((c) => (
            <li key={c.id}>
              <Link href={`/c/${c.id}`}>{c.title ?? c.message ?? "Untitled conversation"}</Link> <span className="muted">{c.owner}, {c.state}</span>
            </li>
          ))}
        </ul>
      )}
    </div>
  );
}
