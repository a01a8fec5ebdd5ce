// A conversation's events, live: one WebSocket that replays what the page has not seen
// (`after_seq` = the last seq it holds) and then streams. When the socket drops (network gone,
// laptop asleep, gateway restarted) the page says "reconnecting" and reconnects with the seq it
// has, so it gets exactly what it missed: no gap, and a frame it already holds (seq <= last) is
// dropped, so no duplicate either.
//
// A long conversation shows its end first: the socket starts `TAIL` events before the last seq
// the page was told of, and the earlier events are read over HTTP meanwhile and put in front,
// so the first event is on screen as soon for 10,000 events as for 10.
//
// Frames are gathered and handed to React once per animation frame: a replay of thousands of
// events is a few renders, not thousands.
//
// Beside the events come the pieces of the answer the model is still writing (`answer_delta`
// frames, no seq): they are folded into `writing` (a piece that continues what is held is
// appended, a whole text so far replaces it, anything else is stale), which is dropped when the
// answer's `llm_call` event arrives (the finished message follows it) or the run ends without it
// (an `agent_error`, an `execution_status` other than running).
//
// And while the conversation's sandbox waits in the start queue for room (a wake for a message
// past the deployment's capacity), `queue_position` frames say its place: `inLine`.

import { useEffect, useRef, useState } from "react";
import { api } from "./api";
import type { AnswerDelta, HalyardEvent, QueuePosition } from "./types";

export type Connection = "connecting" | "live" | "reconnecting";

const TAIL = 200;
const PAGE = 1000;

/** `lastSeq`: the conversation's last seq as its record says, if known (a hint, not a promise).
 * `shareToken`: read through a share link instead of as the owner. */
export function useEventStream(conversationId: string | undefined, enabled: boolean, lastSeq?: number, shareToken?: string) {
  const [events, setEvents] = useState<HalyardEvent[]>([]);
  const [connection, setConnection] = useState<Connection>("connecting");
  const [writing, setWriting] = useState<string>();
  const [inLine, setInLine] = useState<QueuePosition>();
  const last = useRef(0);
  const hint = useRef(lastSeq);
  hint.current ??= lastSeq;
  // Seq 1 to `head` come over HTTP; `filled` once they are in.
  const head = useRef<number | undefined>(undefined);
  const filled = useRef(false);

  useEffect(() => {
    setEvents([]);
    last.current = 0;
    head.current = undefined;
    filled.current = false;
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
    // The answer being written: the log's seq when it began, its text and how many pieces.
    let answer: { after: number; text: string; have: number } | undefined;
    let answerChanged = false;
    // The start of the last answer dropped: pieces of it or of one before it are stale.
    let doneAfter = -1;

    const flush = () => {
      frame = undefined;
      if (answerChanged) {
        answerChanged = false;
        setWriting(answer?.text || undefined);
      }
      if (pending.length === 0) return;
      const batch = pending;
      pending = [];
      setEvents((prev) => prev.concat(batch));
    };
    const fold = (d: AnswerDelta) => {
      if (!answer || answer.after !== d.after_seq) answer = { after: d.after_seq, text: "", have: 0 };
      if (d.from === answer.have) answer = { ...answer, text: answer.text + d.text, have: d.to };
      else if (d.from === 0 && d.to > answer.have) answer = { ...answer, text: d.text, have: d.to };
      else return;
      answerChanged = true;
    };

    // Where the socket starts, the first time: the tail of a long log. Everything before it
    // (seq 1 to `head`) is read over HTTP and put in front.
    if (head.current === undefined) {
      head.current = Math.max(0, (hint.current ?? 0) - TAIL);
      last.current = head.current;
    }
    const upto = head.current;
    let filling = false;
    const fillEarlier = () => {
      if (upto === 0 || filled.current || filling) return;
      filling = true;
      (async () => {
        const earlier: HalyardEvent[] = [];
        let after = 0;
        let failures = 0;
        while (!closed && after < upto) {
          let page;
          try {
            const limit = Math.min(PAGE, upto - after);
            page = await (shareToken ? api.sharedEvents(shareToken, after, limit) : api.events(conversationId, after, limit));
          } catch (e) {
            // A busy gateway: a few more tries, then the next connection tries again.
            if (++failures > 4) throw e;
            await new Promise((r) => setTimeout(r, 250 * failures));
            continue;
          }
          if (page.items.length === 0) break;
          earlier.push(...page.items.filter((e) => e.seq <= upto));
          after = page.items[page.items.length - 1].seq;
        }
        if (closed) return;
        filled.current = true;
        setEvents((prev) => earlier.concat(prev));
      })()
        .catch(() => {})
        .finally(() => {
          filling = false;
        });
    };

    const connect = () => {
      if (closed) return;
      window.clearTimeout(retry);
      const ws = new WebSocket(api.eventsSocketUrl({ conversation: conversationId, shareToken }, last.current));
      socket = ws;
      ws.onopen = () => {
        delay = 250;
        setConnection("live");
        fillEarlier();
      };
      ws.onmessage = (m) => {
        let e: HalyardEvent;
        try {
          e = JSON.parse(m.data as string) as HalyardEvent;
        } catch {
          return;
        }
        if ((e as unknown as QueuePosition).kind === "queue_position") {
          const p = e as unknown as QueuePosition;
          setInLine(p.position == null ? undefined : p);
          return;
        }
        if ((e as unknown as AnswerDelta).kind === "answer_delta") {
          const d = e as unknown as AnswerDelta;
          if (d.after_seq > doneAfter) fold(d);
          if (frame === undefined) frame = requestAnimationFrame(flush);
          return;
        }
        // The one place that keeps the log exact: contiguous seqs only, each once.
        if (typeof e.seq !== "number" || e.seq <= last.current) return;
        last.current = e.seq;
        const ends = e.kind === "llm_call" || e.kind === "agent_error" || (e.kind === "execution_status" && e.status !== "running");
        if (answer && ends && e.seq > answer.after) {
          doneAfter = answer.after;
          answer = undefined;
          answerChanged = true;
        }
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
  }, [conversationId, enabled, shareToken]);

  return { events, connection, writing, inLine };
}
