// Start a conversation: a message, optionally a repository (picked from what the user's git
// providers reach, with its branches, or any URL typed in), the agent (Halyard's own or a
// third-party one, as `GET /agents` offers them), an LLM profile and a sandbox spec; or one
// of the user's templates with its parameters filled in. With several attempts the start runs
// side by side and the group's page follows them; else the start task itself is followed on
// the conversation's page.

import { useEffect, useState, type FormEvent } from "react";
import { api, errorText } from "../api";
import { navigate } from "../router";
import { ErrorText } from "../components/Status";
import { ORG_EXPOSURE } from "./Orgs";
import type { AgentView } from "../types";
import type * as S from "../api-schema";

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
  const [templates, setTemplates] = useState<S.TemplateView[]>([]);
  const [template, setTemplate] = useState("");
  const [params, setParams] = useState<Record<string, string>>({});
  const [attempts, setAttempts] = useState(1);
  const chosen = templates.find((t) => t.name === template);

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
    api.templates().then(
      (r) => setTemplates(r.items),
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
      const body = {
        message: message.trim() || undefined,
        repository: repo.trim() ? { url: repo.trim(), branch: branch.trim() || undefined } : undefined,
        sandbox_spec: spec || undefined,
        llm_profile: profile || undefined,
        agent: agent || undefined,
        org: org || undefined,
        visibility: org && shared ? ("org" as const) : undefined,
        template: template || undefined,
        parameters: template ? params : undefined,
      };
      if (attempts > 1) {
        const group = await api.startAttempts({ ...body, attempts });
        navigate(`/batches/${group.id}`);
        return;
      }
      const task = await api.start(body);
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
        {templates.length > 0 && (
          <>
            <label htmlFor="template">From a template</label>
            <select id="template" value={template} onChange={(e) => (setTemplate(e.target.value), setParams({}))}>
              <option value="">None</option>
              {templates.map((t) => (
                <option key={t.name}>{t.name}</option>
              ))}
            </select>
            {chosen?.parameters.map((p) => (
              <div key={p} className="stack">
                <label htmlFor={`param-${p}`}>{p}</label>
                <input id={`param-${p}`} value={params[p] ?? ""} onChange={(e) => setParams({ ...params, [p]: e.target.value })} required />
              </div>
            ))}
            {chosen && (
              <p className="muted small" data-testid="template-start">
                Starts with: {chosen.start.message}
                {chosen.checks ? " (its work is checked)" : ""}
              </p>
            )}
          </>
        )}
        <label htmlFor="message">{chosen ? "What should the agent do? (the template's message if empty)" : "What should the agent do?"}</label>
        <textarea
          id="message"
          rows={5}
          autoFocus
          value={message}
          onChange={(e) => setMessage(e.target.value)}
          onKeyDown={(e) => {
            if (e.key === "Enter" && (e.metaKey || e.ctrlKey)) (e.currentTarget.form as HTMLFormElement).requestSubmit();
          }}
          required={!chosen}
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
        <label htmlFor="attempts">Attempts</label>
        <input
          id="attempts"
          type="number"
          min={1}
          max={8}
          value={attempts}
          onChange={(e) => setAttempts(Math.max(1, Math.min(8, Number(e.target.value) || 1)))}
        />
        {attempts > 1 && (
          <p className="muted small">
            The task runs {attempts} times side by side, each in its own sandbox; the best (its checks passed, then the highest score, then the
            fewest tokens) is chosen and the others are kept to read.
          </p>
        )}
        <ErrorText error={error} />
        <button type="submit" disabled={busy || (!message.trim() && !chosen)}>
          {busy ? "Starting…" : "Start"}
        </button>
      </form>
    </section>
  );
}

type Repo = { provider: string; full_name: string; clone_url: string; default_branch?: string };
