// The user's own terminal in the sandbox: xterm.js on `GET /conversations/{id}/terminal/ws`
// (a login shell in a pseudo-terminal, apart from the agent's shell). Keystrokes go up as
// binary frames, the screen comes down the same way, and the window's size follows the box
// (`{"type": "resize"}`). xterm's DOM renderer keeps the screen as text in the page, for
// screen readers and tests.

import { useEffect, useRef, useState } from "react";
import { Terminal } from "@xterm/xterm";
import { FitAddon } from "@xterm/addon-fit";
import "@xterm/xterm/css/xterm.css";
import { api } from "../api";

export function UserTerminal({ id, dark }: { id: string; dark: boolean }) {
  const host = useRef<HTMLDivElement>(null);
  const [state, setState] = useState<"connecting" | "open" | "closed">("connecting");
  const [size, setSize] = useState<{ cols: number; rows: number }>();

  useEffect(() => {
    const t = new Terminal({
      fontSize: 13,
      scrollback: 5000,
      cursorBlink: true,
      fontFamily: "ui-monospace, SFMono-Regular, Menlo, Consolas, monospace",
      theme: dark ? { background: "#0d1117", foreground: "#e6edf3" } : { background: "#ffffff", foreground: "#1f2328", cursor: "#1f2328" },
    });
    t.open(host.current!);
    const fitter = new FitAddon();
    t.loadAddon(fitter);
    const ws = new WebSocket(api.terminalSocketUrl(id));
    ws.binaryType = "arraybuffer";
    const sendSize = () => {
      setSize({ cols: t.cols, rows: t.rows });
      if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "resize", cols: t.cols, rows: t.rows }));
    };
    const fit = () => {
      if (host.current && host.current.clientWidth > 0) fitter.fit();
    };
    ws.onopen = () => {
      setState("open");
      fit();
      sendSize();
    };
    ws.onmessage = (m) => t.write(typeof m.data === "string" ? m.data : new Uint8Array(m.data as ArrayBuffer));
    ws.onclose = () => {
      setState("closed");
      t.write("\r\n\x1b[2m[the terminal closed; open the tab again for a new one]\x1b[0m\r\n");
    };
    const encoder = new TextEncoder();
    const typed = t.onData((d) => ws.readyState === WebSocket.OPEN && ws.send(encoder.encode(d)));
    const resized = t.onResize(sendSize);
    const ro = new ResizeObserver(fit);
    ro.observe(host.current!);
    return () => {
      ro.disconnect();
      typed.dispose();
      resized.dispose();
      ws.close();
      t.dispose();
    };
  }, [id, dark]);

  return (
    <div className="user-terminal">
      <p className="muted small" role="status">
        {state === "connecting" ? "Connecting to the sandbox…" : state === "open" ? "Your own shell in the sandbox; the agent has another." : "Closed."}
      </p>
      <div
        className="terminal"
        ref={host}
        data-testid="user-terminal"
        data-cols={size?.cols}
        data-rows={size?.rows}
        aria-label="Your terminal"
      />
    </div>
  );
}
