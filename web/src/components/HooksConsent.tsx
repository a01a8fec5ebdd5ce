// The owner's answer to a workspace's `.openhands/hooks.json` nobody allowed yet: its commands
// would run with the conversation's secrets, so the agent waits, and this bar shows the file
// and asks (POST /conversations/{id}/hooks-consent).
import { useState } from "react";
import { api, errorText } from "../api";
import type { HalyardEvent } from "../types";

type Asked = Extract<HalyardEvent, { kind: "hooks_consent_required" }>;

/** The hooks file the agent waits for an answer about: the last asked with no answer after it. */
export function pendingHooks(events: HalyardEvent[]): Asked | undefined {
  for (let i = events.length - 1; i >= 0; i--) {
    const e = events[i];
    if (e.kind === "hooks_consent") return undefined;
    if (e.kind === "hooks_consent_required") return e;
  }
  return undefined;
}

export function HooksBar({ id, asked }: { id: string; asked: Asked }) {
  const [error, setError] = useState<string>();
  const [sent, setSent] = useState(false);
  const answer = (allow: boolean) => {
    setSent(true);
    api.hooksConsent(id, asked.sha256, allow).then(
      () => setError(undefined),
      (e) => (setSent(false), setError(errorText(e))),
    );
  };
  return (
    <div className="confirm-bar hooks-bar" role="region" aria-label="Repository hooks waiting for your consent">
      <p>
        <strong>{asked.file}</strong>
        {asked.repository ? ` in ${asked.repository}` : ""} runs these commands in the sandbox, with this conversation's secrets in
        their environment. Allow it only if you trust whoever wrote it (the repository, or the agent in an earlier run). Allowing it
        covers your other conversations on this repository until the file changes.
      </p>
      <pre aria-label="The hooks file">{asked.content}</pre>
      <button disabled={sent} onClick={() => answer(true)}>
        Allow these hooks
      </button>
      <button className="ghost" disabled={sent} onClick={() => answer(false)}>
        Go on without them
      </button>
      {error && <span className="error">{error}</span>}
    </div>
  );
}
