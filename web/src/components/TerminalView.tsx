// Every command the agent ran and its output, in order, in an xterm. The terminal is written
// incrementally: only events it has not yet written go in.

import { useEffect, useRef } from "react";
import { Terminal } from "@xterm/xterm";
import { FitAddon } from "@xterm/addon-fit";
import "@xterm/xterm/css/xterm.css";
import type { HalyardEvent } from "../types";

const crlf = (s: string) => s.replace(/\r?\n/g, "\r\n");

export function TerminalView({ events, dark }: { events: HalyardEvent[]; dark: boolean }) {
  const host = useRef<HTMLDivElement>(null);
  const term = useRef<Terminal | null>(null);
  const written = useRef(0);
  const commands = useRef(new Set<string>());

  useEffect(() => {
    const t = new Terminal({
      convertEol: false,
      disableStdin: true,
      fontSize: 13,
      scrollback: 20000,
      fontFamily: "ui-monospace, SFMono-Regular, Menlo, Consolas, monospace",
    });
    t.open(host.current!);
    term.current = t;
    written.current = 0;
    commands.current = new Set();
    // Fit to the box: xterm sizes in cells.
    const fitter = new FitAddon();
    t.loadAddon(fitter);
    const fit = () => {
      if (host.current && host.current.clientWidth > 0) fitter.fit();
    };
    const ro = new ResizeObserver(fit);
    ro.observe(host.current!);
    fit();
    return () => {
      ro.disconnect();
      t.dispose();
      term.current = null;
    };
  }, []);

  useEffect(() => {
    const t = term.current;
    if (!t) return;
    t.options.theme = dark
      ? { background: "#0d1117", foreground: "#e6edf3", cursor: "#0d1117" }
      : { background: "#ffffff", foreground: "#1f2328", cursor: "#ffffff", selectionBackground: "#b6d4fe" };
  }, [dark]);

  useEffect(() => {
    const t = term.current;
    if (!t) return;
    for (let i = written.current; i < events.length; i++) {
      const e = events[i];
      if (e.kind === "action" && e.tool === "terminal" && typeof e.arguments === "object") {
        commands.current.add(e.tool_call_id);
        t.write(`\x1b[1;32m$\x1b[0m ${crlf(String(e.arguments.command ?? ""))}\r\n`);
      } else if (e.kind === "observation" && commands.current.has(e.tool_call_id)) {
        const body = e.content.endsWith("\n") || e.content === "" ? e.content : e.content + "\n";
        t.write(crlf(body));
        if (e.exit_code !== undefined && e.exit_code !== 0) t.write(`\x1b[31m[exit ${e.exit_code}]\x1b[0m\r\n`);
      }
    }
    written.current = events.length;
  }, [events]);

  return <div className="terminal" ref={host} data-testid="terminal" aria-label="Terminal output" />;
}
