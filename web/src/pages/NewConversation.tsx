// Start a conversation: a message, optionally a repository (picked from what the user's git
// providers reach, with its branches, or any URL typed in), the agent (Halyard's own or a
// third-party one, as `GET /agents` offers them), an LLM profile and a sandbox spec.
// The start task itself is followed on the conversation's page.

import { useEffect, useState, type FormEvent } from "react";
import { api, errorText } from "../api";
import { navigate } from "../router";
import { ErrorText } from "../components/Status";
import { ORG_EXPOSURE } from "./Orgs";
import type { AgentView } from "../types";

export function NewConversation() {
  const [message, setMessage] = useState("");
  const [repo, setRepo] = useState("");
  const [branch, setBranch] = useState("");
  const [spec, setSpec] = useState("");
  const [specs, setSpecs] = useState<string[]>([]);
  const [error, setError] = useState<string>();
  const [busy, setBusy] = useState(false);
  const [profile, setProfile] = useState("");
  const [profiles, setProfiles] = useState<string[]>([]);
  const [org, setOrg] = useState("");
  const [shared, setShared] = useState(false);
  const [orgs, setOrgs] = useState<string[]>([]);
  const [orgProfiles, setOrgProfiles] = useState<string[]>([]);
  const [repos, setRepos] = useState<Repo[]>([]);
  const [branches, setBranches] = useState<string[]>([]);
  const [agent, setAgent] = useState("");
  const [agents, setAgents] = useState<AgentView[]>([]);

  useEffect(() => {
    api.agents.list().then(
      (r) => {
        setAgents(r.items);
        setAgent(r.items.find((a) => a.default)?.name ?? "");
      },
      () => {},
    );
    api.specs().then(
      (s) => setSpecs(s.items.map((i) => i.name)),
      () => setSpecs([]),
    );
    api.llmProfiles.list().then(
      (r) => setProfiles(r.items.map((p) => p.name)),
      () => {},
    );
    api.orgs().then(
      (r) => setOrgs(r.items.map((o) => o.name)),
      () => {},
    );
  }, []);

  // In an organization, its profiles come first (its default, or only it, is the server's rule).
  useEffect(() => {
    setOrgProfiles([]);
    if (!org) return;
    api.org(org).llmProfiles.list().then(
      (r) => setOrgProfiles(r.items.map((p) => p.name)),
      () => {},
    );
  }, [org]);

  // What the user's git providers reach, narrowed by what is typed (asked for after a pause).
  useEffect(() => {
    const t = window.setTimeout(() => {
      const words = repo.includes("://") ? "" : repo.trim();
      api.repositories({ q: words }).then(
        (r) => setRepos(r.items),
        () => setRepos([]),
      );
    }, 250);
    return () => window.clearTimeout(t);
  }, [repo]);

  // A repository picked from the list: its branches, the default one filled in.
  const picked = repos.find((r) => r.clone_url === repo.trim());
  useEffect(() => {
    setBranches([]);
    if (!picked) return;
    api.branches(picked.provider, picked.full_name).then(
      (b) => {
        setBranches(b.branches.map((x) => x.name));
        setBranch((current) => current || b.default_branch || "");
      },
      () => {},
    );
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [picked?.clone_url]);

  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setBusy(true);
    setError(undefined);
    try {
      const task = await api.start({
        message: message.trim(),
        repository: repo.trim() ? { url: repo.trim(), branch: branch.trim() || undefined } : undefined,
        sandbox_spec: spec || undefined,
        llm_profile: profile || undefined,
        agent: agent || undefined,
        org: org || undefined,
        visibility: org && shared ? "org" : undefined,
      });
      navigate(`/c/${task.conversation_id}?task=${task.id}`);
    } catch (err) {
      setError(errorText(err));
      setBusy(false);
    }
  };

  return (
    <section className="page narrow">
      <h1>New conversation</h1>
      <form onSubmit={submit} className="stack">
        <label htmlFor="message">What should the agent do?</label>
        <textarea
          id="message"
          rows={5}
          autoFocus
          value={message}
          onChange={(e) => setMessage(e.target.value)}
          onKeyDown={(e) => {
            if (e.key === "Enter" && (e.metaKey || e.ctrlKey)) (e.currentTarget.form as HTMLFormElement).requestSubmit();
          }}
          required
        />
        <fieldset>
          <legend>Repository (optional)</legend>
          <label htmlFor="repo">URL</label>
          <input id="repo" list="repo-choices" value={repo} onChange={(e) => setRepo(e.target.value)} placeholder="https://github.com/you/project" />
          <datalist id="repo-choices" data-testid="repo-choices">
            {repos.map((r) => (
              <option key={`${r.provider}/${r.full_name}`} value={r.clone_url}>
                {r.full_name}
              </option>
            ))}
          </datalist>
          <label htmlFor="branch">Branch</label>
          <input id="branch" list="branch-choices" value={branch} onChange={(e) => setBranch(e.target.value)} placeholder="main" />
          <datalist id="branch-choices" data-testid="branch-choices">
            {branches.map((b) => (
              <option key={b} value={b} />
            ))}
          </datalist>
        </fieldset>
        {orgs.length > 0 && (
          <>
            <label htmlFor="org">Organization</label>
            <select id="org" value={org} onChange={(e) => (setOrg(e.target.value), setProfile(""))}>
              <option value="">None (your own)</option>
              {orgs.map((o) => (
                <option key={o}>{o}</option>
              ))}
            </select>
            {org && (
              <p className="muted small" data-testid="org-exposure">
                In {org}: {ORG_EXPOSURE}
              </p>
            )}
            {org && (
              <label className="check">
                <input type="checkbox" checked={shared} onChange={(e) => setShared(e.target.checked)} />
                Share with {org}: its members follow it, read-only
              </label>
            )}
          </>
        )}
        {agents.length > 1 && (
          <>
            <label htmlFor="agent">Agent</label>
            <select id="agent" value={agent} onChange={(e) => setAgent(e.target.value)}>
              {agents.map((a) => (
                <option key={a.name} value={a.name} disabled={!a.available} title={a.why ?? undefined}>
                  {a.title}
                  {a.available ? "" : ` (${a.why})`}
                </option>
              ))}
            </select>
            {agents.find((a) => a.name === agent && a.wires.length > 0) && (
              <p className="muted small" data-testid="agent-note">
                Runs in the sandbox; its LLM calls go through Halyard with your profile's key, which it never holds. It speaks{" "}
                {agents.find((a) => a.name === agent)?.wires.join(" or ")}: choose a profile that does.
              </p>
            )}
          </>
        )}
        {(profiles.length > 0 || orgProfiles.length > 0) && (
          <>
            <label htmlFor="profile">LLM</label>
            <select id="profile" value={profile} onChange={(e) => setProfile(e.target.value)}>
              <option value="">{org ? "The organization's default" : "Your default"}</option>
              {orgProfiles.map((p) => (
                <option key={`org-${p}`} value={p}>
                  {p} ({org})
                </option>
              ))}
              {profiles.filter((p) => !orgProfiles.includes(p)).map((p) => (
                <option key={p}>{p}</option>
              ))}
            </select>
          </>
        )}
        {specs.length > 0 && (
          <>
            <label htmlFor="spec">Sandbox</label>
            <select id="spec" value={spec} onChange={(e) => setSpec(e.target.value)}>
              <option value="">Default</option>
              {specs.map((s) => (
                <option key={s}>{s}</option>
              ))}
            </select>
          </>
        )}
        <ErrorText error={error} />
        <button type="submit" disabled={busy || !message.trim()}>
          {busy ? "Starting…" : "Start"}
        </button>
      </form>
    </section>
  );
}

type Repo = { provider: string; full_name: string; clone_url: string; default_branch?: string };
