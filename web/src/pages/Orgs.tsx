// Organizations: the invitations waiting for your answer (accept or decline: nobody is a member
// without saying yes), the ones you are in (with your role), a new one (you own it), and one's
// members: invited by owners and admins, roles changed by owners, removed (or left), then its
// settings, prices and budgets ([`OrgSettings`]). Owners and admins also read what happened in
// it (its audit trail). The API enforces every rule; the page offers what your role may do, and
// says what joining exposes.

import { useState, type FormEvent } from "react";
import { api, errorText } from "../api";
import type { Member, MemberList, Org } from "../types";
import { useItems, useResource } from "../resource";
import { Link } from "../router";
import { ErrorText } from "../components/Status";
import { Audit } from "./Audit";
import { OrgSettings } from "./OrgSettings";
import { OrgResources } from "./OrgResources";
import { useChange } from "../components/SettingsParts";

const ROLES = ["member", "admin", "owner"] as const;

export function Orgs({ me }: { me: string }) {
  const listed = useItems(api.orgs);
  const { data: orgs, error, reload: load } = listed;
  const [name, setName] = useState("");
  // (Opened from a link that names one: an MCP sign-in's way back, `?org=`.)
  const [open, setOpen] = useState<string | undefined>(() => new URLSearchParams(location.search).get("org") ?? undefined);
  const create = async (e: FormEvent) => {
    e.preventDefault();
    const wanted = name.trim();
    if (await listed.run(() => api.createOrg(wanted))) (setName(""), setOpen(wanted));
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
      <Invitations onJoined={(org) => (setOpen(org), load())} />
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

/** What joining an organization exposes to it, in words, where a member decides. */
export const ORG_EXPOSURE =
  "Conversations you start in an organization run on its secrets, LLM profiles, git providers and MCP servers, are counted in its usage and budgets, and are recorded in its audit trail, which its owners and admins read. Your own secrets are not given to its MCP servers.";

function Invitations({ onJoined }: { onJoined: (org: string) => void }) {
  const listed = useItems(api.invitations);
  const { data: items, error } = listed;
  const answer = async (org: string, how: "accept" | "decline") => {
    if ((await listed.run(() => api.answerInvitation(org, how))) && how === "accept") onJoined(org);
  };
  if (items.length === 0 && !error) return null;
  return (
    <div className="card" role="region" aria-label="Invitations">
      <h2>Invitations</h2>
      <ErrorText error={error} />
      <p className="muted small">{ORG_EXPOSURE}</p>
      <ul className="settings-list">
        {items.map((i) => (
          <li key={i.org}>
            <strong>{i.org}</strong> <span className="muted">as {i.role}, from {i.invited_by}</span>{" "}
            <button onClick={() => answer(i.org, "accept")}>Accept {i.org}</button>{" "}
            <button className="ghost" onClick={() => answer(i.org, "decline")}>
              Decline {i.org}
            </button>
          </li>
        ))}
      </ul>
    </div>
  );
}

function Members({ org, me, onChange, onGone }: { org: Org; me: string; onChange: () => void; onGone: () => void }) {
  const o = api.org(org.name);
  const empty: MemberList = { items: [], invited: [] };
  const listed = useResource(o.members, [org.name], empty);
  const { items: members, invited } = listed.data;
  const [user, setUser] = useState("");
  const [role, setRole] = useState<Member["role"]>("member");
  // Leaving: the list is no longer yours to read.
  const leave = async () => {
    try {
      await o.removeMember(me);
      onGone();
      onChange();
    } catch (e) {
      listed.setError(errorText(e));
    }
  };
  // Rights change here: from a session older than a few minutes, the key is asked for again.
  const change = useChange(() => (listed.reload(), onChange()));
  const add = (e: FormEvent) => {
    e.preventDefault();
    change.run(() => o.addMember(user.trim(), role)).then((ok) => ok && setUser(""));
  };
  const manages = org.role === "owner" || org.role === "admin";
  return (
    <div className="card" role="region" aria-label={`Members of ${org.name}`}>
      <h2>Members of {org.name}</h2>
      <ErrorText error={listed.error ?? change.error} />
      {change.prompt}
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
                  <select aria-label={`Role of ${m.user}`} value={m.role} onChange={(e) => change.run(() => o.setRole(m.user, e.target.value))}>
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
                  <button className="ghost" onClick={leave}>
                    Leave {org.name}
                  </button>
                ) : (
                  (org.role === "owner" || (org.role === "admin" && m.role === "member")) && (
                    <button className="ghost" onClick={() => change.run(() => o.removeMember(m.user))}>
                      Remove {m.user}
                    </button>
                  )
                )}
              </td>
            </tr>
          ))}
          {invited.map((m) => (
            <tr key={`invited-${m.user}`} className="muted">
              <td>{m.user}</td>
              <td>invited as {m.role}</td>
              <td className="row-actions">
                {manages && (
                  <button className="ghost" onClick={() => change.run(() => o.removeMember(m.user))}>
                    Withdraw the invitation to {m.user}
                  </button>
                )}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {manages && (
        <form onSubmit={add} className="inline-form" aria-label="Invite a member">
          <input aria-label="User" placeholder="A user name" value={user} onChange={(e) => setUser(e.target.value)} required />
          <select aria-label="Role" value={role} onChange={(e) => setRole(e.target.value as Member["role"])}>
            {(org.role === "owner" ? ROLES : (["member"] as const)).map((r) => (
              <option key={r}>{r}</option>
            ))}
          </select>
          <button type="submit">Invite</button>
        </form>
      )}
      {manages && <Audit key={`audit-${members.length}`} base={o.auditPath} title={`What happened in ${org.name}`} />}
    </div>
  );
}

/** The conversations members share with the organization, to open read-only. */
function Shared({ org }: { org: string }) {
  const { data: items, error } = useItems(() => api.org(org).conversations(), [org]);
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
