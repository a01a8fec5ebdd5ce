// Settings: everything a user sets up, in sections — LLM profiles (with a Test that makes one
// real call, a picker of the models the server lists, fallbacks and the tool set), secrets
// (write-only: a value is sent, never shown), git providers (with the repositories their token
// reaches), MCP servers, defaults for new conversations, subscription logins handed to agents
// that take one (../components/AgentLogins), and the user's own API keys (a new key is shown
// once). Each section creates, edits and deletes through the same API a script would use. A
// change that needs a recent sign-in asks for the API key again (`POST /session/step-up`) and is
// then made.

import { useState, type FormEvent } from "react";
import { api, errorText } from "../api";
import { useResource } from "../resource";
import { AgentLogins } from "../components/AgentLogins";
import { DeleteButton, Field, Section, str, useChange, useList, type Row } from "../components/SettingsParts";
import { ErrorText } from "../components/Status";

/// Where each wire's provider is, as the base URL's placeholder.
const BASE_URLS: Record<string, string> = {
  openai: "https://api.openai.com/v1",
  anthropic: "https://api.anthropic.com/v1",
  "openai-responses": "https://api.openai.com/v1",
  gemini: "https://generativelanguage.googleapis.com/v1beta",
};
/// The wires that ask for more thinking with a budget of tokens (the others with an effort).
const budgeted = (provider: string) => provider === "anthropic" || provider === "gemini";

function Profiles() {
  const { items, loadError, reload } = useList(api.llmProfiles.list);
  const { error, run, prompt } = useChange(reload);
  const empty = { name: "", provider: "openai", base_url: "", model: "", api_key: "", fallbacks: "", tools: "default", reasoning_effort: "", thinking_budget_tokens: "" };
  const [form, setForm] = useState(empty);
  const [editing, setEditing] = useState<Row>();
  const [tested, setTested] = useState<Record<string, string>>({});
  // What the edited profile's server offers (`GET /llm-profiles/{name}/models`), for the picker.
  const [models, setModels] = useState<{ id: string; display_name?: string | null }[]>();
  const [modelsNote, setModelsNote] = useState<string>();
  const set = (k: keyof typeof empty) => (e: { target: { value: string } }) => setForm({ ...form, [k]: e.target.value });
  const done = () => (setForm(empty), setEditing(undefined), setModels(undefined), setModelsNote(undefined));
  const save = async (e: FormEvent) => {
    e.preventDefault();
    // A PUT replaces the profile whole: what this form does not show is sent back as it was.
    const kept = editing ? { temperature: editing.temperature, max_output_tokens: editing.max_output_tokens, context_window: editing.context_window } : {};
    const fallbacks = form.fallbacks.split(",").map((f) => f.trim()).filter(Boolean);
    const body: Record<string, unknown> = {
      ...kept,
      provider: form.provider,
      base_url: form.base_url.trim(),
      model: form.model.trim(),
      fallbacks,
      tools: form.tools,
      // Each wire's own way to ask for more thinking.
      reasoning_effort: !budgeted(form.provider) && form.reasoning_effort ? form.reasoning_effort : null,
      thinking_budget_tokens: budgeted(form.provider) && form.thinking_budget_tokens ? Number(form.thinking_budget_tokens) : null,
    };
    // Write-only: an empty field keeps the stored key.
    if (form.api_key) body.api_key = form.api_key;
    if (await run(() => api.llmProfiles.put(form.name.trim(), body))) done();
  };
  const listModels = async () => {
    setModelsNote("Asking the server…");
    try {
      const r = await api.llmProfiles.models(form.name);
      setModels(r.items);
      setModelsNote(`${r.items.length} model${r.items.length === 1 ? "" : "s"} offered.`);
    } catch (e) {
      setModels(undefined);
      setModelsNote(`Failed: ${errorText(e)}`);
    }
  };
  const test = async (name: string) => {
    setTested({ ...tested, [name]: "Testing…" });
    try {
      const r = await api.llmProfiles.test(name);
      const said = r.ok ? `Answered “${r.answer}” in ${r.latency_ms} ms.` : `Failed: ${r.error}`;
      setTested((t) => ({ ...t, [name]: said }));
    } catch (e) {
      setTested((t) => ({ ...t, [name]: `Failed: ${errorText(e)}` }));
    }
  };
  const edit = (p: Row) => {
    const fallbacks = Array.isArray(p.fallbacks) ? p.fallbacks.join(", ") : "";
    const tools = typeof p.tools === "string" ? p.tools : "default";
    setForm({
      name: p.name,
      provider: str(p.provider),
      base_url: str(p.base_url),
      model: str(p.model),
      api_key: "",
      fallbacks,
      tools,
      reasoning_effort: str(p.reasoning_effort),
      thinking_budget_tokens: str(p.thinking_budget_tokens),
    });
    setEditing(p);
    setModels(undefined);
    setModelsNote(undefined);
  };
  return (
    <Section id="llm-profiles" title="LLM profiles">
      <ul className="settings-list" aria-label="Your LLM profiles">
        {items.map((p) => (
          <li key={p.name}>
            <strong>{p.name}</strong> <span className="muted">{str(p.provider)} · {str(p.model)} · {str(p.base_url)}</span>
            {p.has_api_key ? <span className="badge">key stored</span> : <span className="badge">no key</span>}
            {typeof p.tools === "string" && p.tools !== "default" && <span className="badge">tools: {p.tools}</span>}
            {Array.isArray(p.fallbacks) && p.fallbacks.length > 0 && <span className="muted small"> falls back to {p.fallbacks.join(", ")}</span>}
            <button className="ghost" onClick={() => test(p.name)}>
              Test
            </button>
            <button className="ghost" onClick={() => edit(p)}>
              Edit
            </button>
            <DeleteButton what={`LLM profile ${p.name}`} onDelete={() => run(() => api.llmProfiles.remove(p.name))} />
            {tested[p.name] && (
              <p className="small" role="status" data-testid={`test-${p.name}`}>
                {tested[p.name]}
              </p>
            )}
          </li>
        ))}
        {items.length === 0 && <li className="muted">None yet: conversations use the operator's LLM.</li>}
      </ul>
      <form onSubmit={save} className="settings-form" aria-label={editing ? `Edit LLM profile ${form.name}` : "New LLM profile"}>
        <Field label="Name">
          <input value={form.name} onChange={set("name")} readOnly={!!editing} required pattern="[A-Za-z0-9_\-]+" />
        </Field>
        <Field label="Provider">
          <select value={form.provider} onChange={set("provider")}>
            <option value="openai">OpenAI-compatible</option>
            <option value="anthropic">Anthropic</option>
            <option value="openai-responses">OpenAI Responses API</option>
            <option value="gemini">Google Gemini</option>
          </select>
        </Field>
        <Field label="Base URL">
          <input value={form.base_url} onChange={set("base_url")} placeholder={BASE_URLS[form.provider] ?? BASE_URLS.openai} required />
        </Field>
        <Field label="Model">
          <input value={form.model} onChange={set("model")} placeholder="gpt-4o" required />
        </Field>
        {editing && (
          <div className="model-picker">
            <button type="button" className="ghost" onClick={listModels}>
              List models
            </button>
            {models && models.length > 0 && (
              <select aria-label="Models the server offers" value="" onChange={(e) => setForm({ ...form, model: e.target.value })}>
                <option value="">Pick one…</option>
                {models.map((m) => (
                  <option key={m.id} value={m.id}>
                    {m.display_name ? `${m.display_name} (${m.id})` : m.id}
                  </option>
                ))}
              </select>
            )}
            {modelsNote && (
              <span className="small" role="status" data-testid="models-note">
                {modelsNote}
              </span>
            )}
          </div>
        )}
        <Field label="API key">
          <input type="password" value={form.api_key} onChange={set("api_key")} autoComplete="off" placeholder={editing ? "leave empty to keep the stored key" : ""} />
        </Field>
        <Field label="Fallbacks">
          <input value={form.fallbacks} onChange={set("fallbacks")} placeholder="other profiles, in order: backup, local" />
        </Field>
        {budgeted(form.provider) ? (
          <Field label="Thinking budget (tokens)">
            <input type="number" min={1024} value={form.thinking_budget_tokens} onChange={set("thinking_budget_tokens")} placeholder="off" />
          </Field>
        ) : (
          <Field label="Reasoning effort">
            <select value={form.reasoning_effort} onChange={set("reasoning_effort")}>
              <option value="">Model's default</option>
              <option value="low">Low</option>
              <option value="medium">Medium</option>
              <option value="high">High</option>
            </select>
          </Field>
        )}
        <Field label="Tools">
          <select value={form.tools} onChange={set("tools")}>
            <option value="default">Default (file_editor)</option>
            <option value="gpt5">GPT-5 (apply_patch)</option>
          </select>
        </Field>
        <button type="submit">{editing ? "Save profile" : "Add profile"}</button>
        {editing && (
          <button type="button" className="ghost" onClick={done}>
            Cancel
          </button>
        )}
      </form>
      {prompt}
      <ErrorText error={error ?? loadError} />
    </Section>
  );
}

function Secrets() {
  const { items, loadError, reload } = useList(api.secrets.list);
  const { error, run, prompt } = useChange(reload);
  const [name, setName] = useState("");
  const [value, setValue] = useState("");
  const [description, setDescription] = useState("");
  const save = async (e: FormEvent) => {
    e.preventDefault();
    const ok = await run(() => api.secrets.put(name.trim(), { value, description: description.trim() || undefined }));
    // The value leaves the page as soon as it is stored.
    if (ok) (setName(""), setValue(""), setDescription(""));
  };
  return (
    <Section id="secrets" title="Secrets">
      <p className="muted small">
        Each secret reaches your conversations' shells as an environment variable of its name, and is masked wherever it could
        show. Values are write-only: this page never shows one.
      </p>
      <ul className="settings-list" aria-label="Your secrets">
        {items.map((s) => (
          <li key={s.name}>
            <code>{s.name}</code> <span className="muted">{str(s.description)}</span>
            <button className="ghost" onClick={() => (setName(s.name), setDescription(str(s.description)), setValue(""))}>
              Replace
            </button>
            <DeleteButton what={`secret ${s.name}`} onDelete={() => run(() => api.secrets.remove(s.name))} />
          </li>
        ))}
        {items.length === 0 && <li className="muted">No secrets yet.</li>}
      </ul>
      <form onSubmit={save} className="settings-form" aria-label="Store a secret">
        <Field label="Name">
          <input value={name} onChange={(e) => setName(e.target.value)} placeholder="API_TOKEN" required />
        </Field>
        <Field label="Value">
          <input type="password" value={value} onChange={(e) => setValue(e.target.value)} autoComplete="off" required />
        </Field>
        <Field label="Description">
          <input value={description} onChange={(e) => setDescription(e.target.value)} />
        </Field>
        <button type="submit">Store secret</button>
      </form>
      {prompt}
      <ErrorText error={error ?? loadError} />
    </Section>
  );
}

function GitProviders() {
  const { items, loadError, reload } = useList(api.gitProviders.list);
  const { error, run, prompt } = useChange(reload);
  const empty = { name: "", kind: "github", host: "", api_url: "", username: "", token: "" };
  const [form, setForm] = useState(empty);
  const [repos, setRepos] = useState<Record<string, string>>({});
  const set = (k: keyof typeof empty) => (e: { target: { value: string } }) => setForm({ ...form, [k]: e.target.value });
  const save = async (e: FormEvent) => {
    e.preventDefault();
    const body: Record<string, string> = { kind: form.kind };
    if (form.host.trim()) body.host = form.host.trim();
    if (form.username.trim()) body.username = form.username.trim();
    if (form.api_url.trim()) body.api_url = form.api_url.trim();
    if (form.token) body.token = form.token;
    if (await run(() => api.gitProviders.put(form.name.trim(), body))) setForm(empty);
  };
  const list = async (name: string) => {
    setRepos((r) => ({ ...r, [name]: "Asking the provider…" }));
    try {
      const r = await api.repositories({ provider: name });
      const said = r.errors.length
        ? `Failed: ${r.errors.map((e) => e.message).join("; ")}`
        : r.items.length
          ? r.items.map((i) => i.full_name).join(", ")
          : "The token reaches no repository.";
      setRepos((x) => ({ ...x, [name]: said }));
    } catch (e) {
      setRepos((x) => ({ ...x, [name]: `Failed: ${errorText(e)}` }));
    }
  };
  return (
    <Section id="git-providers" title="Git providers">
      <ul className="settings-list" aria-label="Your git providers">
        {items.map((g) => (
          <li key={g.name}>
            <strong>{g.name}</strong> <span className="muted">{str(g.kind)} · {str(g.host)}</span>
            <button className="ghost" onClick={() => list(g.name)}>
              Repositories
            </button>
            <button
              className="ghost"
              onClick={() => setForm({ name: g.name, kind: str(g.kind), host: str(g.host), api_url: "", username: str(g.username), token: "" })}
            >
              Edit
            </button>
            <DeleteButton what={`git provider ${g.name}`} onDelete={() => run(() => api.gitProviders.remove(g.name))} />
            {repos[g.name] && (
              <p className="small" role="status" data-testid={`repos-${g.name}`}>
                {repos[g.name]}
              </p>
            )}
          </li>
        ))}
        {items.length === 0 && <li className="muted">None yet: conversations clone public repositories only.</li>}
      </ul>
      <form onSubmit={save} className="settings-form" aria-label="Add or change a git provider">
        <Field label="Name">
          <input value={form.name} onChange={set("name")} required />
        </Field>
        <Field label="Kind">
          <select value={form.kind} onChange={set("kind")}>
            <option value="github">GitHub</option>
            <option value="gitlab">GitLab</option>
            <option value="generic">Other git host</option>
          </select>
        </Field>
        <Field label="Host">
          <input value={form.host} onChange={set("host")} placeholder="github.com" />
        </Field>
        <Field label="API URL">
          <input value={form.api_url} onChange={set("api_url")} placeholder="for GitHub Enterprise: https://host/api/v3" />
        </Field>
        <Field label="Username">
          <input value={form.username} onChange={set("username")} />
        </Field>
        <Field label="Token">
          <input type="password" value={form.token} onChange={set("token")} autoComplete="off" placeholder="leave empty to keep the stored token" />
        </Field>
        <button type="submit">Save provider</button>
      </form>
      {prompt}
      <ErrorText error={error ?? loadError} />
    </Section>
  );
}

function McpServers() {
  const { items, loadError, reload } = useList(api.mcpServers.list);
  const { error, run, prompt } = useChange(reload);
  const empty = { name: "", transport: "stdio", command: "", url: "" };
  const [form, setForm] = useState(empty);
  const [tested, setTested] = useState<Record<string, string>>({});
  // How a sign-in went, as its callback sent the browser back (or the run's link that led here).
  const [signIn] = useState(() => {
    const q = new URLSearchParams(window.location.search);
    const server = q.get("mcp_signed_in") ?? q.get("mcp_server") ?? q.get("mcp_sign_in") ?? "";
    const said = q.get("mcp_signed_in")
      ? `Signed in to ${server}.`
      : q.get("mcp_sign_in_error")
        ? `Signing in${server ? ` to ${server}` : ""} failed: ${q.get("mcp_sign_in_error")}`
        : server
          ? `${server} wants you to sign in.`
          : "";
    return { server, said };
  });
  const test = async (name: string) => {
    setTested((t) => ({ ...t, [name]: "Testing…" }));
    try {
      const r = await api.mcpServers.test(name);
      const said = r.ok ? `Answered; its tools: ${r.tools.join(", ") || "none"}.` : `Failed: ${r.error}`;
      setTested((t) => ({ ...t, [name]: said }));
    } catch (e) {
      setTested((t) => ({ ...t, [name]: `Failed: ${errorText(e)}` }));
    }
  };
  const set = (k: keyof typeof empty) => (e: { target: { value: string } }) => setForm({ ...form, [k]: e.target.value });
  const save = async (e: FormEvent) => {
    e.preventDefault();
    const body = form.transport === "stdio" ? { transport: "stdio", command: form.command } : { transport: "http", url: form.url.trim() };
    if (await run(() => api.mcpServers.put(form.name.trim(), body))) setForm(empty);
  };
  return (
    <Section id="mcp-servers" title="MCP servers">
      {signIn.said && (
        <p className="small" role="status" data-testid="mcp-sign-in-status">
          {signIn.said}
        </p>
      )}
      <ul className="settings-list" aria-label="Your MCP servers">
        {items.map((m) => (
          <li key={m.name}>
            <strong>{m.name}</strong> <span className="muted">{str(m.transport)} · {str(m.command ?? m.url)}</span>
            <button className="ghost" onClick={() => test(m.name)}>
              Test
            </button>
            <button className="ghost" onClick={() => setForm({ name: m.name, transport: str(m.transport), command: str(m.command), url: str(m.url) })}>
              Edit
            </button>
            {m.transport === "http" &&
              (m.sign_in ? (
                <>
                  <span className="small" data-testid={`mcp-signed-in-${m.name}`}>
                    Signed in{m.sign_in.issuer ? ` at ${m.sign_in.issuer}` : ""}
                  </span>
                  <button className="ghost" onClick={() => run(() => api.mcpServers.signOut(m.name))}>
                    Sign out
                  </button>
                </>
              ) : (
                <button className="ghost" onClick={() => window.location.assign(api.mcpServers.signInUrl(m.name))}>
                  Sign in
                </button>
              ))}
            <DeleteButton what={`MCP server ${m.name}`} onDelete={() => run(() => api.mcpServers.remove(m.name))} />
            {tested[m.name] && (
              <p className="small" role="status" data-testid={`mcp-test-${m.name}`}>
                {tested[m.name]}
              </p>
            )}
          </li>
        ))}
        {items.length === 0 && <li className="muted">None yet.</li>}
      </ul>
      <form onSubmit={save} className="settings-form" aria-label="Add or change an MCP server">
        <Field label="Name">
          <input value={form.name} onChange={set("name")} required />
        </Field>
        <Field label="Transport">
          <select value={form.transport} onChange={set("transport")}>
            <option value="stdio">A command in the sandbox (stdio)</option>
            <option value="http">A server on the network (HTTP)</option>
          </select>
        </Field>
        {form.transport === "stdio" ? (
          <Field label="Command">
            <input value={form.command} onChange={set("command")} placeholder="/opt/halyard-mcp/bin/mcp-server-time" required />
          </Field>
        ) : (
          <Field label="URL">
            <input value={form.url} onChange={set("url")} placeholder="https://mcp.example.com/mcp" required />
          </Field>
        )}
        <button type="submit">Save server</button>
      </form>
      {prompt}
      <ErrorText error={error ?? loadError} />
    </Section>
  );
}

function Defaults() {
  const profiles = useList(api.llmProfiles.list);
  const agents = useList(api.agents.list);
  const [form, setForm] = useState({ llm_profile: "", confirmation_policy: "never", max_budget_usd: "", max_iterations: "", agent: "" });
  const [saved, setSaved] = useState<string>();
  // What the page does not show is sent back as it was: the API replaces the whole settings.
  const [kept, setKept] = useState<Record<string, unknown>>({});
  const read = useResource(
    async () => {
      const s = await api.settings();
      setKept({ max_tokens: s.max_tokens ?? null, sandbox_spec: s.sandbox_spec ?? null });
      setForm({
        llm_profile: str(s.llm_profile),
        confirmation_policy: str(s.confirmation_policy) || "never",
        max_budget_usd: str(s.max_budget_usd),
        max_iterations: str(s.max_iterations),
        agent: str(s.agent),
      });
    },
    [],
    undefined,
  );
  const { error, run, prompt } = useChange(() => {});
  const set = (k: keyof typeof form) => (e: { target: { value: string } }) => (setForm({ ...form, [k]: e.target.value }), setSaved(undefined));
  const save = async (e: FormEvent) => {
    e.preventDefault();
    const body = {
      ...kept,
      llm_profile: form.llm_profile || null,
      confirmation_policy: form.confirmation_policy,
      max_budget_usd: form.max_budget_usd ? Number(form.max_budget_usd) : null,
      max_iterations: form.max_iterations ? Number(form.max_iterations) : null,
      agent: form.agent || null,
    };
    if (await run(() => api.putSettings(body))) setSaved("Saved.");
  };
  return (
    <Section id="defaults" title="Defaults">
      <form onSubmit={save} className="settings-form" aria-label="Defaults for new conversations">
        <Field label="LLM profile">
          <select value={form.llm_profile} onChange={set("llm_profile")}>
            <option value="">The operator's LLM</option>
            {profiles.items.map((p) => (
              <option key={p.name} value={p.name}>
                {p.name}
              </option>
            ))}
          </select>
        </Field>
        <Field label="Agent">
          <select value={form.agent} onChange={set("agent")}>
            <option value="">Halyard</option>
            {agents.items
              .filter((a) => a.name !== "halyard")
              .map((a) => (
                <option key={a.name} value={a.name} disabled={!a.available} title={str(a.why)}>
                  {str(a.title)}
                  {a.available ? "" : ` (${str(a.why)})`}
                </option>
              ))}
          </select>
        </Field>
        <Field label="Confirmation policy">
          <select value={form.confirmation_policy} onChange={set("confirmation_policy")}>
            <option value="never">Never ask</option>
            <option value="risky">Ask for high-risk actions</option>
            <option value="always">Ask for every action</option>
          </select>
        </Field>
        <Field label="Budget per conversation (USD)">
          <input type="number" min="0" step="0.01" value={form.max_budget_usd} onChange={set("max_budget_usd")} />
        </Field>
        <Field label="Most steps per run">
          <input type="number" min="1" step="1" value={form.max_iterations} onChange={set("max_iterations")} />
        </Field>
        <button type="submit">Save defaults</button>
        {saved && (
          <span className="muted small" role="status">
            {saved}
          </span>
        )}
      </form>
      {prompt}
      <ErrorText error={error ?? read.error} />
    </Section>
  );
}

function ApiKeys() {
  const { items, loadError, reload } = useList(api.keys);
  const { error, run, prompt } = useChange(reload);
  const [name, setName] = useState("");
  const [scope, setScope] = useState("full");
  const [shown, setShown] = useState<string>();
  const create = async (e: FormEvent) => {
    e.preventDefault();
    await run(async () => {
      const made = await api.createKey(name.trim(), scope);
      setShown(made.key ?? undefined);
      setName("");
    });
  };
  const live = items.filter((k) => !k.revoked_at);
  return (
    <Section id="api-keys" title="API keys">
      {shown && (
        <div className="card secret" role="status">
          <p>The new key, shown this once: copy it now.</p>
          <code data-testid="new-key">{shown}</code>
          <button className="ghost" onClick={() => navigator.clipboard?.writeText(shown)}>
            Copy
          </button>
          <button className="ghost" onClick={() => setShown(undefined)}>
            Done
          </button>
        </div>
      )}
      <ul className="settings-list" aria-label="Your API keys">
        {live.map((k) => (
          <li key={str(k.id)}>
            <strong>{k.name || "(unnamed)"}</strong> <span className="muted">{str(k.scope)} · made {str(k.created_at).slice(0, 10)}</span>
            <DeleteButton what={`API key ${k.name || k.id}`} onDelete={() => run(() => api.revokeKey(k.id))} />
          </li>
        ))}
      </ul>
      <form onSubmit={create} className="settings-form" aria-label="New API key">
        <Field label="Key name">
          <input value={name} onChange={(e) => setName(e.target.value)} placeholder="laptop" required />
        </Field>
        <Field label="Scope">
          <select value={scope} onChange={(e) => setScope(e.target.value)}>
            <option value="full">Full</option>
            <option value="read_only">Read only</option>
          </select>
        </Field>
        <button type="submit">Create key</button>
      </form>
      {prompt}
      <ErrorText error={error ?? loadError} />
    </Section>
  );
}

export function Settings() {
  return (
    <section className="page settings">
      <h1>Settings</h1>
      <nav aria-label="Settings sections" className="settings-nav">
        {[
          ["llm-profiles", "LLM profiles"],
          ["secrets", "Secrets"],
          ["git-providers", "Git providers"],
          ["mcp-servers", "MCP servers"],
          ["defaults", "Defaults"],
          ["agent-logins", "Subscription logins"],
          ["api-keys", "API keys"],
        ].map(([id, label]) => (
          <a key={id} href={`#${id}`}>
            {label}
          </a>
        ))}
      </nav>
      <Profiles />
      <Secrets />
      <GitProviders />
      <McpServers />
      <Defaults />
      <AgentLogins />
      <ApiKeys />
    </section>
  );
}
