// What an organization offers its members' conversations, under its settings on the
// Organizations page: LLM profiles (keys never shown), secrets (values never shown), MCP
// servers (an owner or admin signs in to one that wants OAuth, for everyone) and ACP agents of its
// own (`@org/name`: a command line, an environment whose values are never shown, the LLM wire it
// speaks). Everyone in it sees the lists; owners and admins add and remove (the API refuses
// anyone else, and says why).

import { type ReactNode } from "react";
import { api } from "../api";
import { useItems } from "../resource";
import type { Org } from "../types";
import { AgentFields, Fields } from "../components/InlineForm";
import { ErrorText } from "../components/Status";

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
  /** An http MCP server's OAuth sign-in, for everyone in the organization. */
  sign_in?: { issuer?: string | null } | null;
}

/** One list of the organization's. */
function Section({
  org,
  kind,
  title,
  describe,
  form,
  extra,
}: {
  org: Org;
  kind: "llmProfiles" | "secrets" | "mcpServers" | "agents";
  title: string;
  describe: (n: Named) => string;
  form: (save: (name: string, body: unknown) => Promise<void>) => ReactNode;
  /** More about one item (and what managers can do with it). */
  extra?: (item: Named, manages: boolean) => ReactNode;
}) {
  // (An agent is listed by what conversations name it, `@org/name`; its route has the name.)
  const key = (name: string) => name.replace(`@${org.name}/`, "");
  const list = api.org(org.name)[kind];
  const manages = org.role === "owner" || org.role === "admin";
  // (The four lists differ in their items; the page shows the fields they share.)
  const listed = useItems(list.list as () => Promise<{ items: Named[] }>, [org.name, kind]);
  const { data: items, error } = listed;
  // (The form keeps what was typed when the change fails: the error says why.)
  const run = async (f: () => Promise<unknown>) => {
    if (!(await listed.run(f))) throw new Error("refused");
  };
  const save = (name: string, body: unknown) => run(() => list.put(name, body));
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
              {extra?.(i, manages)}
              {manages && (
                <button className="ghost" onClick={() => run(() => list.remove(key(i.name))).catch(() => {})}>
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
        kind="llmProfiles"
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
        kind="mcpServers"
        title="MCP servers"
        describe={(s) => s.url ?? s.command ?? s.transport ?? ""}
        extra={(s, manages) =>
          s.transport !== "http" ? null : s.sign_in ? (
            <span className="small" data-testid={`org-mcp-signed-in-${s.name}`}>
              Signed in{s.sign_in.issuer ? ` at ${s.sign_in.issuer}` : ""}{" "}
            </span>
          ) : manages ? (
            <button className="ghost" onClick={() => window.location.assign(api.org(org.name).mcpSignInUrl(s.name))}>
              Sign in to {s.name}
            </button>
          ) : (
            <span className="small muted">not signed in</span>
          )
        }
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
