// The workspace's files, the whole tree (`GET /conversations/{id}/files?path=`): browse
// folders, open a file, edit it (CodeMirror), download it; upload by picking files or dropping
// files and folders on the list (a dropped folder keeps its shape: missing folders are made in
// the sandbox); download the whole workspace as an archive. Read from the running sandbox, so
// it refreshes when the agent acts.

import { Suspense, lazy, useEffect, useState } from "react";
import { api, errorText } from "../api";
import type { Files } from "../types";
import { ErrorText } from "./Status";

const FileEditor = lazy(() => import("./FileEditor").then((m) => ({ default: m.FileEditor })));

/** A file to upload and where it goes, relative to the folder on show. */
type Picked = { path: string; file: File };

/** What was dropped: files as they are, folders walked (their files under their paths). */
async function dropped(data: DataTransfer): Promise<Picked[]> {
  const entries = Array.from(data.items)
    .map((i) => i.webkitGetAsEntry?.())
    .filter((e): e is FileSystemEntry => !!e);
  if (entries.length === 0) return Array.from(data.files).map((file) => ({ path: file.name, file }));
  const out: Picked[] = [];
  const walk = async (entry: FileSystemEntry, at: string): Promise<void> => {
    const path = at ? `${at}/${entry.name}` : entry.name;
    if (entry.isFile) {
      const file = await new Promise<File>((ok, fail) => (entry as FileSystemFileEntry).file(ok, fail));
      out.push({ path, file });
    } else if (entry.isDirectory) {
      const reader = (entry as FileSystemDirectoryEntry).createReader();
      // readEntries answers in batches until an empty one.
      for (;;) {
        const batch = await new Promise<FileSystemEntry[]>((ok, fail) => reader.readEntries(ok, fail));
        if (batch.length === 0) break;
        for (const child of batch) await walk(child, path);
      }
    }
  };
  for (const e of entries) await walk(e, "");
  return out;
}

/** `onChanged` is told when the user changed the workspace here (an upload, a save). */
export function FilesView({ id, version, onChanged }: { id: string; version: number; onChanged?: () => void }) {
  const [path, setPath] = useState("");
  const [files, setFiles] = useState<Files>();
  const [error, setError] = useState<string>();
  const [uploaded, setUploaded] = useState(0);
  const [note, setNote] = useState<string>();
  const [dragging, setDragging] = useState(false);
  const [editing, setEditing] = useState(false);

  // Into the directory on show (a file's own directory when a file is open).
  const upload = async (list: Picked[]) => {
    if (list.length === 0) return;
    const dir = files?.kind === "file" ? (path.includes("/") ? path.slice(0, path.lastIndexOf("/")) : "") : path;
    const done: string[] = [];
    for (const f of list) {
      try {
        const stored = await api.upload(id, dir ? `${dir}/${f.path}` : f.path, f.file);
        done.push(stored.path);
        setError(undefined);
      } catch (e) {
        setError(`${f.path}: ${errorText(e)}`);
      }
    }
    if (done.length) setNote(`Uploaded ${done.join(", ")}`);
    setUploaded((n) => n + 1);
    onChanged?.();
  };
  const picked = (list: FileList | null) => upload(Array.from(list ?? []).map((file) => ({ path: file.name, file })));

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
        dropped(e.dataTransfer).then(upload, (err) => setError(`cannot read what was dropped: ${errorText(err)}`));
      }}
    >
      <div className="section-head">
        <h2>Files</h2>
        <code className="path">/{path}</code>
        <label className="button ghost">
          Upload
          <input type="file" multiple hidden aria-label="Upload files" onChange={(e) => (picked(e.target.files), (e.target.value = ""))} />
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
          <FileEditor id={id} path={path} content={files.content ?? ""} onSaved={() => (setUploaded((n) => n + 1), onChanged?.())} onClose={() => setEditing(false)} />
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
