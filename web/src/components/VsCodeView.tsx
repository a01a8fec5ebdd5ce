// The sandbox's VS Code (code-server), in an iframe. It is the agent's sandbox's program, so it
// never runs on the workspace's origin: the page asks the API for a single-use link on the apps
// proxy's origin, which the proxy trades for a cookie of that origin alone (partitioned, so the
// iframe keeps it). "Open in a new tab" asks for a link of its own.

import { useEffect, useState } from "react";
import { api, errorText } from "../api";
import { ErrorText } from "./Status";

export function VsCodeView({ id }: { id: string }) {
  const [url, setUrl] = useState<string>();
  const [error, setError] = useState<string>();

  useEffect(() => {
    let live = true;
    setUrl(undefined);
    setError(undefined);
    api.vscode(id).then(
      (link) => live && setUrl(link.url),
      (e) => live && setError(errorText(e)),
    );
    return () => {
      live = false;
    };
  }, [id]);

  const openTab = async () => {
    // Opened in the click, so no popup blocker stops it; pointed at its own link after.
    const tab = window.open("about:blank", "_blank");
    try {
      const link = await api.vscode(id);
      if (tab) {
        tab.opener = null;
        tab.location.href = link.url;
      }
    } catch (e) {
      tab?.close();
      setError(errorText(e));
    }
  };

  return (
    <section className="vscode" aria-label="VS Code">
      <div className="vscode-bar">
        <span className="muted small">VS Code in the sandbox, on the workspace's files.</span>
        <button onClick={openTab} disabled={!url && !error}>
          Open in a new tab
        </button>
      </div>
      <ErrorText error={error} />
      {!url && !error && <p className="muted">Starting VS Code…</p>}
      {url && <iframe className="vscode-frame" data-testid="vscode-frame" title="VS Code" src={url} allow="clipboard-read; clipboard-write" />}
    </section>
  );
}
