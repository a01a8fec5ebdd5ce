// Automations: work that starts by itself. Create one per kind (a hook that programs post signed
// requests to, or a schedule), see the hook URL and secret once with what to set up on the
// sender's side, enable or disable, delete, and each one's runs linked to their conversations.
// Each can name the LLM profile and the agent its conversations have (the server checks that
// the two fit).

import { useState, type FormEvent } from "react";
import { api } from "../api";
import { useItems } from "../resource";
import type { Automation, AutomationTrigger, NewAutomation } from "../types";
import { ErrorText } from "../components/Status";
import { Link } from "../router";

type Kind = "webhook" | "schedule" | "github" | "gitlab" | "forgejo" | "bitbucket" | "azure_devops" | "slack" | "jira" | "linear";

/** Kinds answered through one of the user's git providers, with a label (but Bitbucket) and a mention. */
const FORGES: Kind[] = ["github", "gitlab", "forgejo", "bitbucket", "azure_devops"];

/** `C0123=owner/name` (or a bare channel id) a line, as the trigger's `channels`. */
function parseChannels(text: string): Record<string, string | null> {
  const out: Record<string, string | null> = {};
  for (const line of text.split("\n").map((l) => l.trim()).filter(Boolean)) {
    const [channel, repo] = line.split("=").map((x) => x.trim());
    out[channel] = repo || null;
  }
  return out;
}

export function Automations({ me }: { me: string }) {
  const listed = useItems(api.automations);
  const { data: items, error, run } = listed;
  const [created, setCreated] = useState<Automation>();
  const [open, setOpen] = useState<string>();
  const [editing, setEditing] = useState<string>();
  const [kind, setKind] = useState<Kind>("webhook");
  const [name, setName] = useState("");
  const [cron, setCron] = useState("0 3 * * *");
  const [timezone, setTimezone] = useState(Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC");
  const [prompt, setPrompt] = useState("");
  const [provider, setProvider] = useState("");
  const [repo, setRepo] = useState("");
  const [signingSecret, setSigningSecret] = useState("");
  const [botToken, setBotToken] = useState("");
  const [channels, setChannels] = useState("");
  const [slackUsers, setSlackUsers] = useState("");
  const [site, setSite] = useState("");
  const [email, setEmail] = useState("");
  const [label, setLabel] = useState("halyard");
  const [mention, setMention] = useState("@halyard");
  const [agent, setAgent] = useState("");
  const agents = useItems(api.agents.list).data;
  const [profile, setProfile] = useState("");
  const profiles = useItems(api.llmProfiles.list).data.map((p) => p.name);

  const optional = (v: string) => v.trim() || undefined;
  const trigger = (): AutomationTrigger => {
    switch (kind) {
      case "schedule":
        return { kind, cron: cron.trim(), timezone: optional(timezone) };
      case "slack": {
        const users = Object.fromEntries(slackUsers.split(/[\s,]+/).filter(Boolean).map((u) => [u, me]));
        return { kind, signing_secret: signingSecret.trim(), bot_token: botToken.trim(), channels: parseChannels(channels), users, provider: optional(provider) };
      }
      case "jira":
        return { kind, api_url: site.trim(), email: email.trim(), api_token: botToken.trim(), projects: parseChannels(channels), provider: optional(provider), label: optional(label), mention: optional(mention) };
      case "linear":
        return { kind, signing_secret: signingSecret.trim(), api_key: botToken.trim(), teams: parseChannels(channels), provider: optional(provider), label: optional(label), mention: optional(mention) };
      case "bitbucket":
      case "azure_devops":
        return { kind, provider: provider.trim(), mention: optional(mention) };
      case "github":
      case "gitlab":
      case "forgejo":
        return { kind, provider: provider.trim(), label: optional(label), mention: optional(mention) };
      default:
        return { kind: "webhook" };
    }
  };

  const create = (e: FormEvent) => {
    e.preventDefault();
    run(async () => {
      const body: NewAutomation = {
        name: name.trim(),
        trigger: trigger(),
        prompt: prompt.trim() || undefined,
        llm_profile: profile || undefined,
        agent: agent || undefined,
      };
      if (provider.trim() && repo.trim()) body.repository = { provider: provider.trim(), full_name: repo.trim() };
      const a = await api.createAutomation(body);
      if (a.hook_url) setCreated(a);
      setName("");
      setPrompt("");
    });
  };

  return (
    <section className="page">
      <h1>Automations</h1>
      <form onSubmit={create} className="stack-form" aria-label="New automation">
        <div className="inline-form">
          <select aria-label="Kind" value={kind} onChange={(e) => setKind(e.target.value as Kind)}>
            <option value="webhook">Webhook: a program posts signed JSON</option>
            <option value="schedule">Schedule: at fixed times</option>
            <option value="github">GitHub: a label or a mention</option>
            <option value="gitlab">GitLab: a label or a mention</option>
            <option value="forgejo">Forgejo or Gitea: a label or a mention</option>
            <option value="bitbucket">Bitbucket: a mention in a pull request</option>
            <option value="azure_devops">Azure DevOps: a mention in a pull request or work item</option>
            <option value="slack">Slack: a mention of the bot</option>
            <option value="jira">Jira: a label or a mention</option>
            <option value="linear">Linear: a label or a mention</option>
          </select>
          <input aria-label="Name" placeholder="Name" value={name} onChange={(e) => setName(e.target.value)} required />
        </div>
        {kind === "slack" && (
          <>
            <div className="inline-form">
              <input aria-label="Signing secret" type="password" placeholder="Signing secret" value={signingSecret} onChange={(e) => setSigningSecret(e.target.value)} required />
              <input aria-label="Bot token" type="password" placeholder="xoxb-..." value={botToken} onChange={(e) => setBotToken(e.target.value)} required />
            </div>
            <textarea aria-label="Channels" placeholder={"C0123ABC=owner/repo\nC0456DEF"} value={channels} onChange={(e) => setChannels(e.target.value)} rows={2} required />
            <input aria-label="Slack users" placeholder="Your Slack user ids (U0456DEF), separated by spaces" value={slackUsers} onChange={(e) => setSlackUsers(e.target.value)} required />
          </>
        )}
        {(FORGES.includes(kind) || kind === "jira" || kind === "linear") && (
          <div className="inline-form">
            {kind !== "bitbucket" && kind !== "azure_devops" && <input aria-label="Label" placeholder="halyard" value={label} onChange={(e) => setLabel(e.target.value)} />}
            <input aria-label="Mention" placeholder="@halyard" value={mention} onChange={(e) => setMention(e.target.value)} />
          </div>
        )}
        {(kind === "jira" || kind === "linear") && (
          <>
            <div className="inline-form">
              {kind === "jira" ? (
                <>
                  <input aria-label="Jira site" placeholder="https://acme.atlassian.net" value={site} onChange={(e) => setSite(e.target.value)} required />
                  <input aria-label="Jira account e-mail" placeholder="bot@acme.com" value={email} onChange={(e) => setEmail(e.target.value)} required />
                </>
              ) : (
                <input aria-label="Signing secret" type="password" placeholder="The webhook's signing secret" value={signingSecret} onChange={(e) => setSigningSecret(e.target.value)} required />
              )}
              <input aria-label="API token" type="password" placeholder={kind === "jira" ? "Jira API token" : "lin_api_..."} value={botToken} onChange={(e) => setBotToken(e.target.value)} required />
            </div>
            <textarea
              aria-label={kind === "jira" ? "Projects" : "Teams"}
              placeholder={"KEY=owner/repo\nOTHER"}
              value={channels}
              onChange={(e) => setChannels(e.target.value)}
              rows={2}
              required
            />
          </>
        )}
        {kind === "schedule" && (
          <div className="inline-form">
            <input aria-label="Cron" placeholder="minute hour day month weekday" value={cron} onChange={(e) => setCron(e.target.value)} required />
            <input aria-label="Time zone" placeholder="Europe/Paris" value={timezone} onChange={(e) => setTimezone(e.target.value)} />
          </div>
        )}
        <textarea
          aria-label="Prompt"
          placeholder={
            kind === "schedule"
              ? "What each run should do"
              : "The first message ({{title}}, {{body}}, {{payload}}...); the request itself if empty"
          }
          value={prompt}
          onChange={(e) => setPrompt(e.target.value)}
          rows={3}
          required={kind === "schedule"}
        />
        <div className="inline-form">
          <select aria-label="Agent" value={agent} onChange={(e) => setAgent(e.target.value)}>
            <option value="">Your default agent</option>
            {agents.map((a) => (
              <option key={a.name} value={a.name}>
                {a.title}
              </option>
            ))}
          </select>
          <select aria-label="LLM" value={profile} onChange={(e) => setProfile(e.target.value)}>
            <option value="">Your default LLM</option>
            {profiles.map((p) => (
              <option key={p} value={p}>
                {p}
              </option>
            ))}
          </select>
        </div>
        <div className="inline-form">
          <input
            aria-label="Git provider"
            placeholder={FORGES.includes(kind) ? `Git provider (a ${kind} one)` : "Git provider (optional)"}
            value={provider}
            onChange={(e) => setProvider(e.target.value)}
            required={FORGES.includes(kind)}
          />
          <input aria-label="Repository" placeholder="owner/name" value={repo} onChange={(e) => setRepo(e.target.value)} />
          <button type="submit">Create automation</button>
        </div>
      </form>
      <ErrorText error={error} />
      {created && <HookSetup automation={created} onDone={() => setCreated(undefined)} />}
      <ul className="hook-list" aria-label="Automations">
        {items.map((a) => (
          <li key={a.id} className="card">
            <div className="hook-head">
              <strong>{a.name}</strong>
              <span className="muted small">
                {describe(a)}
                {a.agent && ` · agent ${agents.find((x) => x.name === a.agent)?.title ?? a.agent}`}
                {a.llm_profile && ` · LLM ${a.llm_profile}`}
              </span>
              <span className={`badge ${a.enabled ? "s-running" : "s-paused"}`}>{a.enabled ? "enabled" : "disabled"}</span>
            </div>
            <p className="muted small">
              {a.last_run ? `Last run ${new Date(a.last_run.time).toLocaleString()}: ${a.last_run.outcome}` : "Never run"}
              {a.next_run_at && ` · next ${new Date(a.next_run_at).toLocaleString()}`}
            </p>
            {a.hook_url && <code className="hook-url">{a.hook_url}</code>}
            <div className="row-buttons">
              <button className="ghost" onClick={() => run(() => api.patchAutomation(a.id, { enabled: !a.enabled }))}>
                {a.enabled ? "Disable" : "Enable"}
              </button>
              <button className="ghost" onClick={() => setOpen(open === a.id ? undefined : a.id)} aria-expanded={open === a.id}>
                Runs
              </button>
              <button className="ghost" onClick={() => setEditing(editing === a.id ? undefined : a.id)} aria-expanded={editing === a.id}>
                Edit
              </button>
              <button className="danger" onClick={() => confirm(`Delete the automation ${a.name}?`) && run(() => api.deleteAutomation(a.id))}>
                Delete
              </button>
            </div>
            {open === a.id && <Runs id={a.id} />}
            {editing === a.id && (
              <Editor
                automation={a}
                onSave={(body) =>
                  run(async () => {
                    await api.patchAutomation(a.id, body);
                    setEditing(undefined);
                  })
                }
              />
            )}
          </li>
        ))}
      </ul>
      {items.length === 0 && <p className="empty">No automations. A program's request or a schedule can start conversations for you.</p>}
    </section>
  );
}

function describe(a: Automation): string {
  const t = a.trigger;
  const on = a.repository ? ` on ${a.repository.full_name}` : "";
  if (t.kind === "schedule") return `schedule ${t.cron} (${t.timezone ?? "UTC"})${on}`;
  if (t.kind === "github") return `GitHub: label ${t.label}, mention ${t.mention}, via ${t.provider}${on}`;
  if (t.kind === "forgejo") return `Forgejo: label ${t.label}, mention ${t.mention}, via ${t.provider}${on}`;
  if (t.kind === "bitbucket") return `Bitbucket: mention ${t.mention}, via ${t.provider}${on}`;
  if (t.kind === "azure_devops") return `Azure DevOps: mention ${t.mention}, via ${t.provider}${on}`;
  if (t.kind === "gitlab") return `GitLab: label ${t.label}, mention ${t.mention}, via ${t.provider}${on}`;
  if (t.kind === "slack") {
    const linked = Object.entries(t.users ?? {}).map(([slack, user]) => `${slack} → ${user}`);
    return `Slack: channels ${Object.keys(t.channels ?? {}).join(", ")}${linked.length ? `; linked ${linked.join(", ")}` : ""}`;
  }
  if (t.kind === "linear") return `Linear: teams ${Object.keys(t.teams).join(", ")}, label ${t.label}, mention ${t.mention}`;
  if (t.kind === "jira") return `Jira: projects ${Object.keys(t.projects).join(", ")}, label ${t.label}, mention ${t.mention}`;
  return `webhook${on}`;
}

/** What can be changed of an automation in place: its name, its prompt, and its schedule's or
 * forge trigger's settings (another kind, or a chat's or tracker's credentials, is a new one). */
function Editor({ automation, onSave }: { automation: Automation; onSave: (body: { name: string; prompt: string | null; trigger?: AutomationTrigger }) => void }) {
  const t = automation.trigger;
  const [name, setName] = useState(automation.name);
  const [prompt, setPrompt] = useState(automation.prompt ?? "");
  const [cron, setCron] = useState(t.kind === "schedule" ? t.cron : "");
  const [timezone, setTimezone] = useState(t.kind === "schedule" ? (t.timezone ?? "UTC") : "");
  const [label, setLabel] = useState("label" in t ? (t.label ?? "") : "");
  const [mention, setMention] = useState("mention" in t ? (t.mention ?? "") : "");
  const save = (e: FormEvent) => {
    e.preventDefault();
    let trigger: AutomationTrigger | undefined;
    if (t.kind === "schedule") trigger = { kind: "schedule", cron: cron.trim(), timezone: timezone.trim() || undefined };
    else if (t.kind === "github" || t.kind === "gitlab" || t.kind === "forgejo") trigger = { ...t, label: label.trim() || undefined, mention: mention.trim() || undefined };
    else if (t.kind === "bitbucket" || t.kind === "azure_devops") trigger = { ...t, mention: mention.trim() || undefined };
    onSave({ name: name.trim(), prompt: prompt.trim() || null, trigger });
  };
  return (
    <form onSubmit={save} className="stack-form" aria-label={`Edit ${automation.name}`}>
      <input aria-label="New name" value={name} onChange={(e) => setName(e.target.value)} required />
      {t.kind === "schedule" && (
        <div className="inline-form">
          <input aria-label="New cron" value={cron} onChange={(e) => setCron(e.target.value)} required />
          <input aria-label="New time zone" value={timezone} onChange={(e) => setTimezone(e.target.value)} />
        </div>
      )}
      {FORGES.includes(t.kind) && "mention" in t && (
        <div className="inline-form">
          {"label" in t && <input aria-label="New label" value={label} onChange={(e) => setLabel(e.target.value)} />}
          <input aria-label="New mention" value={mention} onChange={(e) => setMention(e.target.value)} />
        </div>
      )}
      <textarea aria-label="New prompt" value={prompt} onChange={(e) => setPrompt(e.target.value)} rows={3} />
      <button type="submit">Save</button>
    </form>
  );
}

/** The hook URL and secret, shown once, and what to set on the sender's side. */
function HookSetup({ automation, onDone }: { automation: Automation; onDone: () => void }) {
  return (
    <div className="card secret" role="status" aria-label="Hook setup">
      {automation.trigger.kind === "azure_devops" ? (
        <p>
          In the project's Project settings → Service hooks → Web Hooks, for "Pull request commented on" and "Work item commented on":
          paste this URL, basic authentication with the user name <code>halyard</code> and the secret below as the password. The
          secret is shown this once.
        </p>
      ) : automation.trigger.kind === "bitbucket" ? (
        <p>
          In the repository's Repository settings → Webhooks → Add webhook: paste this URL and the secret below; trigger Pull request →
          Comment created. The secret is shown this once.
        </p>
      ) : automation.trigger.kind === "jira" ? (
        <p>
          In Jira's Settings → System → WebHooks → Create a WebHook: paste this URL and the secret below; events Issue updated and
          Comment created. The secret is shown this once.
        </p>
      ) : automation.trigger.kind === "linear" ? (
        <p>In Linear's Settings → API → Webhooks → New webhook: paste this URL; data change events Issues and Comments.</p>
      ) : automation.trigger.kind === "slack" ? (
        <p>
          In the Slack app's settings: Event Subscriptions → Request URL: this URL; subscribe to the bot event <code>app_mention</code>;
          OAuth scopes <code>app_mentions:read</code>, <code>chat:write</code>, <code>reactions:write</code>.
        </p>
      ) : automation.trigger.kind === "gitlab" ? (
        <p>
          In the project's Settings → Webhooks → Add new webhook: paste this URL, paste the secret below as the Secret token, and pick
          Issues events, Comments and Merge request events. The secret is shown this once.
        </p>
      ) : automation.trigger.kind === "github" || automation.trigger.kind === "forgejo" ? (
        <p>
          In the repository's Settings → Webhooks → Add webhook: paste this URL as the Payload URL, choose{" "}
          <code>application/json</code>, paste the secret below as the Secret, and pick the events Issues, Issue comments, Pull
          requests, Pull request reviews and Pull request review comments. The secret is shown this once.
        </p>
      ) : (
        <p>
          Post JSON to this URL, signed as <a href="https://www.standardwebhooks.com/">Standard Webhooks</a> with the secret below
          (headers <code>webhook-id</code>, <code>webhook-timestamp</code>, <code>webhook-signature</code>; any Standard Webhooks
          library signs them). The secret is shown this once.
        </p>
      )}
      <code data-testid="hook-url">{automation.hook_url}</code>
      {automation.secret && (
        <>
          <code data-testid="automation-secret">{automation.secret}</code>
          <button className="ghost" onClick={() => navigator.clipboard?.writeText(automation.secret ?? "")}>
            Copy secret
          </button>
        </>
      )}
      <button className="ghost" onClick={onDone}>
        Done
      </button>
    </div>
  );
}

function Runs({ id }: { id: string }) {
  const { data: items, error, loading } = useItems(() => api.automationRuns(id), [id]);
  if (error) return <p className="error">{error}</p>;
  if (loading && items.length === 0) return <p className="muted">Loading…</p>;
  if (items.length === 0) return <p className="muted">No runs yet.</p>;
  return (
    <table className="deliveries" aria-label="Runs">
      <thead>
        <tr>
          <th>Time</th>
          <th>Trigger</th>
          <th>Outcome</th>
          <th />
        </tr>
      </thead>
      <tbody>
        {items.map((r) => (
          <tr key={r.id}>
            <td>{new Date(r.time).toLocaleString()}</td>
            <td>{r.trigger}</td>
            <td>{r.outcome}</td>
            <td>{r.conversation_id ? <Link href={`/c/${r.conversation_id}`}>Conversation</Link> : <span className="muted small">{r.reason}</span>}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}
