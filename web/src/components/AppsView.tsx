// The apps the agent serves in its sandbox (`WORKER_1`, `WORKER_2`) and the ports its environment
// forwards (`PORT_<n>`, a dev container's `forwardPorts`), opened in a tab through the
// gateway's app proxy. Each app lives on an origin of its own, never the workspace's: the page
// asks the API for a short-lived link, and the proxy turns it into a cookie for that origin only.

import { useEffect, useState } from "react";
import { api, errorText } from "../api";
import type { Sandbox } from "../types";
import { ErrorText } from "./Status";

export function AppsView({ id, sandboxId }: { id: string; sandboxId?: string }) {
  const [sandbox, setSandbox] = useState<Sandbox>();
  const [error, setError] = useState<string>();

  useEffect(() => {
    if (!sandboxId) return;
    api.sandbox(sandboxId).then(setSandbox, (e) => setError(errorText(e)));
  }, [sandboxId]);

  const open = async (name: string) => {
    // Open the tab now, in the click, so no popup blocker stops it; point it at the app after.
    const tab = window.open("about:blank", "_blank");
    try {
      const { url } = await api.openApp(id, name);
      if (tab) {
        tab.opener = null;
        tab.location.href = url;
      } else {
        location.href = url;
      }
      setError(undefined);
    } catch (e) {
      tab?.close();
      setError(errorText(e));
    }
  };

  const apps = sandbox?.exposed_urls.filter((u) => u.name !== "AGENT_SERVER") ?? [];
  return (
    <div className="apps">
      <p className="muted">
        Ports the agent can serve on: <code>$WORKER_1_PORT</code> and <code>$WORKER_2_PORT</code> inside the sandbox, and the ports its environment forwards (<code>PORT_&lt;n&gt;</code>).
      </p>
      <ErrorText error={error} />
      {sandbox?.status === "HIBERNATED" && (
        <p className="muted">The sandbox is hibernating (stopped while idle, its files kept); a message, the terminal or the files start it again. The agent starts its apps again when asked.</p>
      )}
      {sandbox && sandbox.status !== "RUNNING" && sandbox.status !== "HIBERNATED" && (
        <p className="muted">The sandbox is {sandbox.status.toLowerCase()}; resume the conversation to reach its apps.</p>
      )}
      <ul className="app-list">
        {apps.map((a) => (
          <li key={a.name}>
            <span>{a.name}</span>
            <button onClick={() => open(a.name)} disabled={sandbox?.status !== "RUNNING"}>
              Open {a.name}
            </button>
          </li>
        ))}
      </ul>
      {sandbox && apps.length === 0 && <p className="empty">This sandbox serves no apps.</p>}
    </div>
  );
}
