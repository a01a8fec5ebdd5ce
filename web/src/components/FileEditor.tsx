// A workspace file in CodeMirror 6, saved back with `PUT /conversations/{id}/files?path=` (the
// raw text; Ctrl/Cmd-S or the Save button). Loaded only when a file is edited: CodeMirror is
// most of what this view weighs.

import { useEffect, useRef, useState } from "react";
import { EditorView, basicSetup } from "codemirror";
import { keymap } from "@codemirror/view";
import { api, errorText } from "../api";

export function FileEditor({ id, path, content, onSaved, onClose }: { id: string; path: string; content: string; onSaved: () => void; onClose: () => void }) {
  const host = useRef<HTMLDivElement>(null);
  const view = useRef<EditorView | undefined>(undefined);
  const [dirty, setDirty] = useState(false);
  const [saving, setSaving] = useState(false);
  const [said, setSaid] = useState<string>();

  const save = async () => {
    const text = view.current?.state.doc.toString();
    if (text === undefined) return;
    setSaving(true);
    try {
      await api.upload(id, path, new Blob([text], { type: "text/plain" }));
      setDirty(false);
      setSaid("Saved");
      onSaved();
    } catch (e) {
      setSaid(errorText(e));
    } finally {
      setSaving(false);
    }
  };
  const saveRef = useRef(save);
  saveRef.current = save;

  useEffect(() => {
    if (!host.current) return;
    const v = new EditorView({
      doc: content,
      parent: host.current,
      extensions: [
        basicSetup,
        keymap.of([{ key: "Mod-s", preventDefault: true, run: () => (void saveRef.current(), true) }]),
        EditorView.updateListener.of((u) => u.docChanged && (setDirty(true), setSaid(undefined))),
        EditorView.contentAttributes.of({ "aria-label": `Contents of ${path}` }),
      ],
    });
    view.current = v;
    return () => v.destroy();
    // The editor is made once per file; `content` is what it opens with.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [path]);

  return (
    <div className="file-editor" data-testid="file-editor" data-path={path}>
      <div className="editor-bar">
        <button onClick={save} disabled={!dirty || saving}>
          {saving ? "Saving…" : "Save"}
        </button>
        <button className="ghost" onClick={onClose}>
          Close
        </button>
        {dirty && <span className="muted small">unsaved changes</span>}
        {said && (
          <span className={said === "Saved" ? "muted small" : "error small"} role="status">
            {said}
          </span>
        )}
      </div>
      <div ref={host} className="editor-host" />
    </div>
  );
}
