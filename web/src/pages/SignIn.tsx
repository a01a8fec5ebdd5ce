// Sign-in: the API key goes to `POST /session` once and is forgotten; the gateway answers with
// an HttpOnly cookie the page cannot read. Where the deployment has an identity provider, single
// sign-on goes there and comes back signed in (or with `?sso_error=` saying why not).

import { useEffect, useState, type FormEvent } from "react";
import { api, errorText } from "../api";
import { ErrorText } from "../components/Status";

export function SignIn({ onSignedIn }: { onSignedIn: () => void }) {
  const [key, setKey] = useState("");
  const [error, setError] = useState<string | undefined>(() => new URLSearchParams(location.search).get("sso_error") ?? undefined);
  const [busy, setBusy] = useState(false);
  const [sso, setSso] = useState(false);
  useEffect(() => {
    api.sso().then(
      (s) => setSso(s.enabled),
      () => setSso(false),
    );
  }, []);

  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setBusy(true);
    setError(undefined);
    try {
      await api.signIn(key.trim());
      setKey("");
      onSignedIn();
    } catch (err) {
      setError(errorText(err));
    } finally {
      setBusy(false);
    }
  };

  return (
    <main className="signin">
      <form onSubmit={submit} className="card">
        <h1>Halyard</h1>
        <p className="muted">Sign in with your API key. It is exchanged for a session; the browser does not keep it.</p>
        <label htmlFor="api-key">API key</label>
        <input
          id="api-key"
          type="password"
          autoComplete="off"
          autoFocus
          value={key}
          onChange={(e) => setKey(e.target.value)}
          required
        />
        <ErrorText error={error} />
        <button type="submit" disabled={busy || !key.trim()}>
          {busy ? "Signing in…" : "Sign in"}
        </button>
        {sso && (
          <a className="button" href={api.ssoStartUrl(location.pathname)}>
            Sign in with single sign-on
          </a>
        )}
      </form>
    </main>
  );
}
