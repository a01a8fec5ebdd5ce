// A conversation's events, live: one WebSocket that replays what the page has not seen
// (`after_seq` = the last seq it holds) and then streams. When the socket drops (network gone,
// laptop asleep, gateway restarted) the page says "reconnecting" and reconnects with the seq it
// has, so it gets exactly what it missed: no gap, and a frame it already holds (seq <= last) is
// dropped, so no duplicate either.
//
// Frames are gathered and handed to React once per animation frame: a replay of 10,000 events
// is a few renders, not 10,000.

import { useEffect, useRef, useState } from "react";
import type { HalyardEvent } from "./types";

export type Connection = "connecting" | "live" | "reconnecting";

export function useEventStream(conversationId: string | undefined, enabled: boolean) {
  const [events, setEvents] = useState<HalyardEvent[]>([]);
  const [connection, setConnection] = useState<Connection>("connecting");
  const last = useRef(0);

  useEffect(() => {
    setEvents([]);
    last.current = 0;
    setConnection("connecting");
  }, [conversationId]);

  useEffect(() => {
    if (!conversationId || !enabled) return;
    let socket: WebSocket | undefined;
    let closed = false;
    let retry: number | undefined;
    let delay = 250;
    let pending: HalyardEvent[] = [];
    let frame: number | undefined;

    const flush = () => {
      frame = undefined;
      if (pending.length === 0) return;
      const batch = pending;
      pending = [];
      setEvents((prev) => prev.concat(batch));
    };

    const connect = () => {
      if (closed) return;
      window.clearTimeout(retry);
      const scheme = location.protocol === "https:" ? "wss" : "ws";
      const url = `${scheme}://${location.host}/api/v1/conversations/${conversationId}/events/ws?after_seq=${last.current}`;
      const ws = new WebSocket(url);
      socket = ws;
      ws.onopen = () => {
        delay = 250;
        setConnection("live");
      };
      ws.onmessage = (m) => {
        let e: HalyardEvent;
        try {
          e = JSON.parse(m.data as string) as HalyardEvent;
        } catch {
          return;
        }
        // The one place that keeps the log exact: contiguous seqs only, each once.
        if (typeof e.seq !== "number" || e.seq <= last.current) return;
        last.current = e.seq;
        pending.push(e);
        if (frame === undefined) frame = requestAnimationFrame(flush);
      };
      ws.onclose = () => {
        if (socket !== ws || closed) return;
        socket = undefined;
        setConnection("reconnecting");
        retry = window.setTimeout(connect, delay);
        delay = Math.min(delay * 2, 5000);
      };
    };

    // Coming back online or to the tab: try at once rather than wait out the backoff.
    const wake = () => {
      if (!socket || socket.readyState === WebSocket.CLOSED) connect();
    };
    window.addEventListener("online", wake);
    document.addEventListener("visibilitychange", wake);
    connect();
    return () => {
      closed = true;
      window.clearTimeout(retry);
      if (frame !== undefined) cancelAnimationFrame(frame);
      window.removeEventListener("online", wake);
      document.removeEventListener("visibilitychange", wake);
      socket?.close();
    };
  }, [conversationId, enabled]);

  return { events, connection };
}
