// What an organization offers its members' conversations, under its settings on the
// Organizations page: LLM profiles (keys never shown), secrets (values never shown), MCP
// servers and ACP agents of its own (`@org/name`: a command line, an environment whose values are
// never shown, the LLM wire it speaks). Everyone in it sees the lists; owners and admins add and remove (the API refuses
// anyone else, and says why).

import { useEffect, useState, type ReactNode } from "react";
import { call, errorText } from "../api";
import type { Org } from "../types";
import { AgentFields, Fields } from "../components/InlineForm";
import { ErrorText } from "../components/Status";

const enc = encodeURIComponent;

interface Named {
  name: string;
  description?: string | null;
  model?: string;
  transport?: string;
  url?: string;
  command?: string;
  title?: string;
  wire?: string;
  env?: string[];
}

/** One list of the organization's (`kind`: `llm-profiles`, `secrets`, `mcp-servers`, `agents`). */
function Section({
  org,
  kind,
  title,
  describe,
  form,
}: {
  org: Org;
  kind: string;
  title: string;
  describe: (n: Named) => string;
  form: (save: (name: string, body: unknown) => Promise<void>) => ReactNode;
}) {
  // (An agent is listed by what conversations name it, `@org/name`; its route has the name.)
  const key = (name: string) => name.replace(`@${org.name}/`, "");
  const base = `/orgs/${enc(org.name)}/${kind}`;
  const manages = org.role === "owner" || org.role === "admin";
  const [items, setItems] = useState<Named[]>([]);
  const [error, setError] = useState<string>();
  const load = () => call<{ items: Named[] }>("GET", base).then((r) => setItems(r.items), (e) => setError(errorText(e)));
  useEffect(() => {
    load();
  }, [base]);
  const run = async (f: () => Promise<unknown>) => {
    try {
      await f();
      setError(undefined);
      await load();
    } catch (e) {
      setError(errorText(e));
      throw e;
    }
  };
  const save = (name: string, body: unknown) => run(() => call("PUT", `${base}/${enc(name)}`, body));
  return (
    <section aria-label={`${title} of ${org.name}`}>
      <h3>{title}</h3>
      <ErrorText error={error} />
      {items.length === 0 ? (
        <p className="empty">None yet.</p>
      ) : (
        <ul className="settings-list">
          {items.map((i) => (
            <li key={i.name}>
              <strong>{i.name}</strong> <span className="muted">{describe(i)}</span>{" "}
              {manages && (
                <button className="ghost" onClick={() => run(() => call("DELETE", `${base}/${enc(key(i.name))}`)).catch(() => {})}>
                  Remove {i.name}
                </button>
              )}
            </li>
          ))}
        </ul>
      )}
      {manages && form(save)}
    </section>
  );
}

export function OrgResources({ org }: { org: Org }) {
  return (
    <div className="card" role="region" aria-label={`What ${org.name} offers`}>
      <h2>What {org.name} offers its conversations</h2>
      <Section
        org={org}
        kind="llm-profiles"
        title="LLM profiles"
        describe={(p) => p.model ?? ""}
        form={(save) => (
          <Fields
            label="Add an LLM profile"
            fields={[
              { key: "name", label: "Profile name" },
              { key: "base_url", label: "Base URL" },
              { key: "model", label: "Model" },
              { key: "api_key", label: "Profile API key", secret: true, optional: true },
            ]}
            onSave={({ name, api_key, ...rest }) => save(name, { ...rest, api_key: api_key || undefined })}
          />
        )}
      />
      <Section
        org={org}
        kind="secrets"
        title="Secrets"
        describe={(s) => s.description ?? "never shown"}
        form={(save) => (
          <Fields
            label="Store a secret"
            fields={[
              { key: "name", label: "Secret name" },
              { key: "value", label: "Secret value", secret: true },
              { key: "description", label: "Description", optional: true },
            ]}
            onSave={({ name, value, description }) => save(name, { value, description: description || undefined })}
          />
        )}
      />
      <Section
        org={org}
        kind="mcp-servers"
        title="MCP servers"
        describe={(s) => s.url ?? s.command ?? s.transport ?? ""}
        form={(save) => (
          <Fields
            label="Add an MCP server"
            fields={[
              { key: "name", label: "Server name" },
              { key: "url", label: "Server URL" },
            ]}
            onSave={({ name, url }) => save(name, { transport: "http", url })}
          />
        )}
      />
      <Section
        org={org}
        kind="agents"
        title="Agents"
        describe={(a) => `${a.title} · speaks ${a.wire} · ${a.command}${a.env?.length ? ` · env ${a.env.join(", ")}` : ""}`}
        form={(save) => <AgentFields onSave={save} />}
      />
    </div>
  );
}
