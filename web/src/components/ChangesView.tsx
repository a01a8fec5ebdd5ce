// What the agent changed (`GET /conversations/{id}/changes`: git's view in a repository, the
// editor's record elsewhere) as diffs, and the workspace's files to browse (`GET
// /conversations/{id}/files?path=`), where files are downloaded, uploaded (picked or dropped
// on the list) and the whole workspace is downloaded as an archive. All are read from the
// running sandbox, so they refresh when the agent acts and say so when it is not running.

import { Suspense, lazy, useCallback, useEffect, useState } from "react";
import { api, errorText } from "../api";
import type { Changes, Files } from "../types";
import { Diff, parseUnified } from "./Diff";
import { ErrorText } from "./Status";

const FileEditor = lazy(() => import("./FileEditor").then((m) => ({ default: m.FileEditor })));

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
      {!shareToken && <FileBrowser id={id} version={version} onChanged={load} />}
    </div>
  );
}

/** `onChanged` is told when the user changed the workspace here (an upload, a save). */
function FileBrowser({ id, version, onChanged }: { id: string; version: number; onChanged: () => void }) {
  const [path, setPath] = useState("");
  const [files, setFiles] = useState<Files>();
  const [error, setError] = useState<string>();
  const [uploaded, setUploaded] = useState(0);
  const [note, setNote] = useState<string>();
  const [dragging, setDragging] = useState(false);
  const [editing, setEditing] = useState(false);

  // Into the directory on show (a file's own directory when a file is open).
  const upload = async (list: FileList | null) => {
    if (!list || list.length === 0) return;
    const dir = files?.kind === "file" ? (path.includes("/") ? path.slice(0, path.lastIndexOf("/")) : "") : path;
    const done: string[] = [];
    for (const f of Array.from(list)) {
      try {
        const stored = await api.upload(id, dir ? `${dir}/${f.name}` : f.name, f);
        done.push(stored.path);
        setError(undefined);
      } catch (e) {
        setError(`${f.name}: ${errorText(e)}`);
      }
    }
    if (done.length) setNote(`Uploaded ${done.join(", ")}`);
    setUploaded((n) => n + 1);
    onChanged();
  };

  useEffect(() => {
    api.files(id, path).then(
      (f) => {
        setFiles(f);
        setError(undefined);
      },
      (e) => setError(errorText(e)),
    );
  }, [id, path, version, uploaded]);
  useEffect(() => setEditing(false), [path]);
  // A file shown masked (a secret value in it) or cut at the size cap would be saved as shown:
  // it is not edited here.
  const editable = files?.kind === "file" && !files.binary && !files.truncated && !(files.content ?? "").includes("<secret:");

  const parent = path.includes("/") ? path.slice(0, path.lastIndexOf("/")) : "";
  const join = (name: string) => (path ? `${path}/${name}` : name);

  return (
    <section
      aria-label="Files"
      className={`files${dragging ? " dropping" : ""}`}
      onDragOver={(e) => {
        e.preventDefault();
        setDragging(true);
      }}
      onDragLeave={() => setDragging(false)}
      onDrop={(e) => {
        e.preventDefault();
        setDragging(false);
        upload(e.dataTransfer.files);
      }}
    >
      <div className="section-head">
        <h2>Files</h2>
        <code className="path">/{path}</code>
        <label className="button ghost">
          Upload
          <input type="file" multiple hidden aria-label="Upload files" onChange={(e) => (upload(e.target.files), (e.target.value = ""))} />
        </label>
        <a className="button ghost" href={api.archiveUrl(id)} download>
          Download workspace
        </a>
      </div>
      <ErrorText error={error} />
      {note && (
        <p className="muted small" role="status">
          {note}
        </p>
      )}
      {path !== "" && (
        <button className="ghost" onClick={() => setPath(parent)}>
          ↑ Up
        </button>
      )}
      {files?.kind === "directory" && (
        <ul className="entries">
          {files.entries?.map((e) => (
            <li key={e.name}>
              <button className="link" onClick={() => setPath(join(e.name))} disabled={e.kind === "symlink"}>
                <EntryIcon dir={e.kind === "directory"} /> {e.name}
              </button>
              {e.kind === "file" && <span className="muted small">{e.size} B</span>}
            </li>
          ))}
          {files.truncated && <li className="muted">The listing was cut at 5,000 entries.</li>}
        </ul>
      )}
      {files?.kind === "file" && (
        <div className="file-actions">
          <a className="button ghost" href={api.rawUrl(id, path)} download>
            Download
          </a>
          {editable && !editing && (
            <button className="ghost" onClick={() => setEditing(true)}>
              Edit
            </button>
          )}
          {files.kind === "file" && !files.binary && !editable && (
            <span className="muted small">Not editable here: the file is cut at the size cap or shows a masked secret.</span>
          )}
        </div>
      )}
      {files?.kind === "file" && editing && (
        <Suspense fallback={<p className="muted">Loading the editor…</p>}>
          <FileEditor id={id} path={path} content={files.content ?? ""} onSaved={() => (setUploaded((n) => n + 1), onChanged())} onClose={() => setEditing(false)} />
        </Suspense>
      )}
      {files?.kind === "file" &&
        !editing &&
        (files.binary ? (
          <p className="muted">A binary file of {files.size} bytes.</p>
        ) : (
          <pre className="file-content" data-testid="file-content" data-path={path}>
            {files.content}
            {files.truncated && "\n… (cut at 256 KiB)"}
          </pre>
        ))}
    </section>
  );
}

/** A folder or a page, drawn: emoji need a font many machines lack. */
function EntryIcon({ dir }: { dir: boolean }) {
  return (
    <svg className="entry-icon" width="14" height="14" viewBox="0 0 16 16" aria-hidden="true">
      {dir ? (
        <path d="M1.5 3.5h4.5l1.5 1.5h7v8.5h-13z" fill="none" stroke="currentColor" strokeWidth="1.2" />
      ) : (
        <path d="M3.5 1.5h6l3 3v10h-9z M9.5 1.5v3h3" fill="none" stroke="currentColor" strokeWidth="1.2" />
      )}
    </svg>
  );
}
