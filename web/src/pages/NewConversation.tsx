// Start a conversation: a message, optionally a repository and a sandbox spec. The start task
// itself is followed on the conversation's page.

import { useEffect, useState, type FormEvent } from "react";
import { api, errorText } from "../api";
import { navigate } from "../router";
import { ErrorText } from "../components/Status";

export function NewConversation() {
  const [message, setMessage] = useState("");
  const [repo, setRepo] = useState("");
  const [branch, setBranch] = useState("");
  const [spec, setSpec] = useState("");
  const [specs, setSpecs] = useState<string[]>([]);
  const [error, setError] = useState<string>();
  const [busy, setBusy] = useState(false);

  useEffect(() => {
    api.specs().then(
      (s) => setSpecs(s.items.map((i) => i.name)),
      () => setSpecs([]),
    );
  }, []);

  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setBusy(true);
    setError(undefined);
    try {
      const task = await api.start({
        message: message.trim(),
        repository: repo.trim() ? { url: repo.trim(), branch: branch.trim() || undefined } : undefined,
        sandbox_spec: spec || undefined,
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
          <input id="repo" value={repo} onChange={(e) => setRepo(e.target.value)} placeholder="https://github.com/you/project" />
          <label htmlFor="branch">Branch</label>
          <input id="branch" value={branch} onChange={(e) => setBranch(e.target.value)} placeholder="main" />
        </fieldset>
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
