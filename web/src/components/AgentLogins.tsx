// Subscription logins: the agent kinds that take one (Claude Code: a Claude subscription's OAuth
// token) each get a write-only field. The page says what handing one over means: Halyard keeps
// it sealed and sends it upstream in place of the LLM profile's key for that agent's calls in
// your conversations; it never enters the sandbox, and the calls still count in usage and
// budgets.

import { useState, type FormEvent } from "react";
import { api } from "../api";
import type { AgentView } from "../types";
import type * as S from "../api-schema";
import { DeleteButton, Field, Section, str, useChange, useList } from "./SettingsParts";
import { ErrorText } from "./Status";

function LoginForm({ agent, held, run }: { agent: AgentView; held?: S.AgentLoginView; run: (f: () => Promise<unknown>) => Promise<boolean> }) {
  const [credential, setCredential] = useState("");
  const title = str(agent.title);
  const save = async (e: FormEvent) => {
    e.preventDefault();
    if (await run(() => api.agentLogins.put(agent.name, { credential: credential.trim() }))) setCredential("");
  };
  return (
    <li>
      <strong>{title}</strong>{" "}
      <span className="muted">{held ? `handed over · ends in …${str(held.hint)} · since ${str(held.updated_at).slice(0, 10)}` : "none"}</span>
      <p className="muted small">
        Takes {str(agent.login)}. Halyard keeps it sealed and sends it, in place of your LLM profile's key, with {title}'s calls in your
        conversations only. It never enters the sandbox; the calls still count in usage and budgets.
      </p>
      <form onSubmit={save} className="settings-form" aria-label={`${title} login`}>
        <Field label={`${title} credential`}>
          <input type="password" value={credential} onChange={(e) => setCredential(e.target.value)} autoComplete="off" required />
        </Field>
        <button type="submit">{held ? "Replace login" : "Hand over login"}</button>
      </form>
      {held && <DeleteButton what={`${title} login`} onDelete={() => run(() => api.agentLogins.remove(agent.name))} />}
    </li>
  );
}

export function AgentLogins() {
  const agents = useList(api.agents.list);
  const logins = useList(api.agentLogins.list);
  const { error, run, prompt } = useChange(() => (logins.reload(), agents.reload()));
  const taking = agents.items.filter((a) => a.login);
  return (
    <Section id="agent-logins" title="Subscription logins">
      {taking.length === 0 && <p className="muted">No agent here takes a subscription login.</p>}
      <ul className="settings-list" aria-label="Agents that take a login">
        {taking.map((a) => (
          <LoginForm key={a.name} agent={a} held={logins.items.find((l) => l.agent === a.name)} run={run} />
        ))}
      </ul>
      {prompt}
      <ErrorText error={error ?? logins.loadError ?? agents.loadError} />
    </Section>
  );
}
