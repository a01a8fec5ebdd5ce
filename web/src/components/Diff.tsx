// A diff with line numbers on both sides: from a unified diff (the Changes tab) or from an
// editor action's arguments (the conversation's cards).

import { memo } from "react";

interface Line {
  kind: "add" | "del" | "ctx" | "hunk" | "meta";
  text: string;
  old?: number;
  new?: number;
}

export function parseUnified(diff: string): Line[] {
  const out: Line[] = [];
  let oldNo = 0;
  let newNo = 0;
  let inHunk = false;
  for (const raw of diff.split("\n")) {
    const hunk = raw.match(/^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@(.*)$/);
    if (hunk) {
      // A new file's hunk starts at 0; its first line is 1.
      oldNo = Math.max(1, Number(hunk[1]));
      newNo = Math.max(1, Number(hunk[2]));
      inHunk = true;
      out.push({ kind: "hunk", text: raw });
    } else if (!inHunk || raw.startsWith("diff ")) {
      // The file header (`diff --git`, `new file mode`, `index`, `---`, `+++`).
      inHunk = false;
      if (raw !== "") out.push({ kind: "meta", text: raw });
    } else if (raw.startsWith("+")) {
      out.push({ kind: "add", text: raw.slice(1), new: newNo++ });
    } else if (raw.startsWith("-")) {
      out.push({ kind: "del", text: raw.slice(1), old: oldNo++ });
    } else if (raw.startsWith("\\")) {
      out.push({ kind: "meta", text: raw });
    } else {
      out.push({ kind: "ctx", text: raw.slice(1), old: oldNo++, new: newNo++ });
    }
  }
  // A trailing empty context line is the diff's final newline, not a line of the file.
  while (out.length && out[out.length - 1].kind === "ctx" && out[out.length - 1].text === "") out.pop();
  return out;
}

/** The lines an edit removes and adds, without context (the action does not carry the file). */
export function editLines(removed: string, added: string): Line[] {
  const split = (s: string) => (s === "" ? [] : s.replace(/\n$/, "").split("\n"));
  return [
    ...split(removed).map((text, i) => ({ kind: "del" as const, text, old: i + 1 })),
    ...split(added).map((text, i) => ({ kind: "add" as const, text, new: i + 1 })),
  ];
}

export const Diff = memo(function Diff({ lines, label }: { lines: Line[]; label?: string }) {
  return (
    <table className="diff" aria-label={label ?? "diff"}>
      <colgroup>
        <col className="ln-col" />
        <col className="ln-col" />
        <col />
      </colgroup>
      <tbody>
        {lines.map((l, i) =>
          l.kind === "hunk" || l.kind === "meta" ? (
            <tr key={i} className={l.kind}>
              <td colSpan={3}>{l.text}</td>
            </tr>
          ) : (
            <tr key={i} className={l.kind}>
              <td className="ln">{l.old ?? ""}</td>
              <td className="ln">{l.new ?? ""}</td>
              <td className="code">
                <span className="sign">{l.kind === "add" ? "+" : l.kind === "del" ? "-" : " "}</span>
                {l.text}
              </td>
            </tr>
          ),
        )}
      </tbody>
    </table>
  );
});
