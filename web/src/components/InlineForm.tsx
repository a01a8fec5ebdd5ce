// A row of named text fields that saves once all are filled, then empties (what an
// organization's and the deployment's registrations are added with), and the one form an ACP
// agent is registered with, its environment written as `NAME=value` lines.

import { useState, type FormEvent } from "react";

/** A form of named text fields that saves once all are filled, then empties. */
export function Fields({
  label,
  fields,
  onSave,
}: {
  label: string;
  fields: { key: string; label: string; secret?: boolean; optional?: boolean; lines?: boolean }[];
  onSave: (v: Record<string, string>) => Promise<void>;
}) {
  const empty = Object.fromEntries(fields.map((f) => [f.key, ""]));
  const [v, setV] = useState<Record<string, string>>(empty);
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    try {
      await onSave(v);
      setV(empty);
    } catch {
      // Said above the form.
    }
  };
  return (
    <form onSubmit={submit} className="inline-form" aria-label={label}>
      {fields.map((f) =>
        f.lines ? (
          <textarea
            key={f.key}
            aria-label={f.label}
            placeholder={f.label}
            value={v[f.key]}
            required={!f.optional}
            rows={2}
            onChange={(e) => setV({ ...v, [f.key]: e.target.value })}
          />
        ) : (
        <input
          key={f.key}
          aria-label={f.label}
          placeholder={f.label}
          type={f.secret ? "password" : "text"}
          autoComplete="off"
          value={v[f.key]}
          required={!f.optional}
          onChange={(e) => setV({ ...v, [f.key]: e.target.value })}
        />
        ),
      )}
      <button type="submit">{label}</button>
    </form>
  );
}

/** `NAME=value` lines as an environment (the first `=` splits; blank lines are skipped). */
function environment(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of text.split("\n").map((l) => l.trim()).filter(Boolean)) {
    const at = line.indexOf("=");
    if (at > 0) out[line.slice(0, at).trim()] = line.slice(at + 1);
  }
  return out;
}

/** Registers an ACP agent: its name, title, command line, LLM wire and environment. */
export function AgentFields({ onSave }: { onSave: (name: string, body: unknown) => Promise<void> }) {
  return (
    <Fields
      label="Register an agent"
      fields={[
        { key: "name", label: "Agent name" },
        { key: "title", label: "Title" },
        { key: "command", label: "Command line" },
        { key: "wire", label: "LLM wire (openai, anthropic, openai-responses, gemini)" },
        { key: "env", label: "Environment, a NAME=value a line (${HALYARD_LLM_BASE}, ${HALYARD_LLM_TOKEN}, ${HALYARD_LLM_MODEL})", optional: true, lines: true },
      ]}
      onSave={({ name, env, ...rest }) => onSave(name, { ...rest, env: environment(env) })}
    />
  );
}
