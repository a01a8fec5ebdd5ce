// What the agent changed (`GET /conversations/{id}/changes`: git's view in a repository, the
// editor's record elsewhere) as diffs, read from the running sandbox, so they refresh when the
// agent acts and say so when it is not running. The workspace's whole tree is the Files tab's
// (FilesView).

import { useCallback, useEffect, useState } from "react";
import { api, errorText } from "../api";
import type { Changes } from "../types";
import { Diff, parseUnified } from "./Diff";
import { ErrorText } from "./Status";

/** With `shareToken`, the changes as a share link shows them: read through the link, no files. */
export function ChangesView({ id, version, shareToken }: { id: string; version: number; shareToken?: string }) {
  const [changes, setChanges] = useState<Changes>();
  const [error, setError] = useState<string>();

  const load = useCallback(() => {
    (shareToken ? api.sharedChanges(shareToken) : api.changes(id)).then(
      (c) => {
        setChanges(c);
        setError(undefined);
      },
      (e) => setError(errorText(e)),
    );
  }, [id, shareToken]);

  // `version` moves when an observation arrives: the workspace may have changed.
  useEffect(() => {
    const t = window.setTimeout(load, 200);
    return () => window.clearTimeout(t);
  }, [load, version]);

  return (
    <div className="changes">
      <section aria-label="Changed files">
        <div className="section-head">
          <h2>Changes</h2>
          <button className="ghost" onClick={load}>
            Refresh
          </button>
        </div>
        <ErrorText error={error} />
        {changes && changes.files.length === 0 && <p className="empty">No changes yet.</p>}
        {changes?.files.map((f) => (
          <details key={f.path} open className="file-diff" data-testid="file-diff">
            <summary>
              <span className={`fstatus f-${f.status}`}>{f.status}</span> <code>{f.path}</code>
              {f.truncated && <span className="muted"> (diff cut at 64 KiB)</span>}
            </summary>
            <Diff lines={parseUnified(f.diff)} label={`changes to ${f.path}`} />
          </details>
        ))}
      </section>
    </div>
  );
}
