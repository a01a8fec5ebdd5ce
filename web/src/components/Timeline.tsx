// The conversation as a person reads it: messages, and each action with its observation as one
// card (a command and its output, an edit as a diff, a thought folded). The list is
// virtualized: only the rows on screen are in the DOM, so 10,000 events scroll smoothly.

import { createContext, memo, useContext, useEffect, useMemo, useRef } from "react";
import { useVirtualizer } from "@tanstack/react-virtual";
import type { ActionEvent, HalyardEvent, ImageData, ObservationEvent } from "../types";
import { Markdown } from "./Markdown";
import { Diff, editLines } from "./Diff";
import { Link } from "../router";
import { StatusBadge } from "./Status";

export type Item =
  | { type: "message"; seq: number; who: "user" | "agent"; text: string; images?: ImageData[] }
  | {
      type: "action";
      seq: number;
      action: ActionEvent;
      observation?: ObservationEvent;
      rejected?: string;
      /** Without a result: why it is not running (`waiting` for consent, `paused`, or the run `ended`). */
      stalled?: "waiting" | "paused" | "ended";
    }
  | { type: "error"; seq: number; code: string; message: string }
  /** A `delegate` call's helpers, each a link to its conversation, with how it ended once it has. */
  | { type: "helpers"; seq: number; helpers: { id: string; title: string; ended?: string; said?: string }[] }
  | { type: "note"; seq: number; text: string }
  /** The answer the model is still writing, as its pieces arrive (not an event: `seq` -1). */
  | { type: "writing"; seq: number; text: string }
  /** The model's reasoning before its answer, folded (redacted blocks are only counted). */
  | { type: "thinking"; seq: number; text: string; redacted: number }
  | { type: "warning"; seq: number; text: string };

/** Events to items; an observation joins its action's card. */
export function toItems(events: HalyardEvent[]): Item[] {
  const items: Item[] = [];
  const byCall = new Map<string, number>();
  for (const e of events) {
    switch (e.kind) {
      case "user_message":
        items.push({ type: "message", seq: e.seq, who: "user", text: e.text, images: e.images });
        break;
      case "agent_message":
        items.push({ type: "message", seq: e.seq, who: "agent", text: e.text });
        break;
      case "action":
        // `finish` is followed by the agent's message saying the same: one is enough.
        if (e.tool === "finish") break;
        byCall.set(e.tool_call_id, items.length);
        items.push({ type: "action", seq: e.seq, action: e });
        break;
      case "observation":
      case "action_rejected": {
        const i = byCall.get(e.tool_call_id);
        const it = i === undefined ? undefined : items[i];
        if (it?.type === "action")
          items[i!] = e.kind === "observation" ? { ...it, observation: e } : { ...it, rejected: e.reason };
        break;
      }
      case "agent_error":
        items.push({ type: "error", seq: e.seq, code: e.code, message: e.message });
        break;
      case "condensation":
        items.push({ type: "note", seq: e.seq, text: `Earlier steps (${e.from_seq}–${e.upto_seq}) summarized for the model.` });
        break;
      case "terminal_opened":
        items.push({ type: "note", seq: e.seq, text: `${e.by} opened a terminal in the sandbox.` });
        break;
      case "network_blocked":
        items.push({ type: "warning", seq: e.seq, text: e.message });
        break;
      case "budget_alert": {
        const whose = e.user ? `${e.user}'s budget in ${e.org}` : `${e.org}'s budget`;
        const text = `${whose} for ${e.month} is ${e.percent} % spent ($${e.spent_usd.toFixed(2)} of $${e.budget_usd.toFixed(2)})${
          e.percent >= 100 ? ": no further LLM call this month" : ""
        }.`;
        items.push({ type: "warning", seq: e.seq, text });
        break;
      }
      case "hook": {
        // A hook that blocked, or failed, is worth a look; one that let things be is a note.
        const how = e.exit_code === undefined ? "did not finish" : `exited ${e.exit_code}`;
        const said = e.stderr.trim() ? `: ${e.stderr.trim()}` : "";
        const text = `Hook ${e.event}${e.tool ? ` (${e.tool})` : ""} \`${e.command}\` ${e.blocked ? "blocked it" : how}${said}`;
        items.push({ type: e.blocked || e.exit_code !== 0 ? "warning" : "note", seq: e.seq, text });
        break;
      }
      case "hooks_consent_required":
        items.push({ type: "warning", seq: e.seq, text: `${e.file} asks to run commands with this conversation's secrets; the agent waits for your answer.` });
        break;
      case "hooks_consent":
        items.push({ type: "note", seq: e.seq, text: e.allowed ? "You allowed the repository's hooks." : "You declined the repository's hooks: this conversation goes on without them." });
        break;
      case "sub_conversations_started":
        byCall.set(`helpers:${e.tool_call_id}`, items.length);
        items.push({ type: "helpers", seq: e.seq, helpers: e.children.map((c) => ({ id: c.conversation_id, title: c.title })) });
        break;
      case "sub_conversation_ended": {
        const i = byCall.get(`helpers:${e.tool_call_id}`);
        const it = i === undefined ? undefined : items[i];
        if (it?.type === "helpers")
          items[i!] = {
            ...it,
            helpers: it.helpers.map((h) => (h.id === e.conversation_id ? { ...h, ended: e.status, said: e.message } : h)),
          };
        break;
      }
      case "verification": {
        const what = e.check === "judge" ? "The reviewer" : `\`${e.subject}\``;
        const verdict = e.passed ? "passed" : "did not pass";
        const back = e.sent_back ? " The agent was sent back to work." : "";
        const said = e.output.trim() ? `\n${e.output.trim()}` : "";
        items.push({ type: e.passed ? "note" : "warning", seq: e.seq, text: `Check ${e.attempt}: ${what} ${verdict} (score ${e.score.toFixed(2)}).${back}${said}` });
        break;
      }
      case "result":
        items.push({ type: "note", seq: e.seq, text: `Result: ${JSON.stringify(e.result)}` });
        break;
      case "pull_request_opened":
        items.push({ type: "note", seq: e.seq, text: `Pull request #${e.number} opened${e.title ? `: ${e.title}` : ""} (${e.url}).` });
        break;
      case "thinking":
        items.push({
          type: "thinking",
          seq: e.seq,
          text: e.blocks.map((b) => b.text).filter((t) => t.trim()).join("\n\n"),
          redacted: e.blocks.filter((b) => b.redacted).length,
        });
        break;
      case "task_list": {
        const done = e.items.filter((t) => t.status === "done").length;
        items.push({ type: "note", seq: e.seq, text: `Plan updated: ${done} of ${e.items.length} tasks done.` });
        break;
      }
      case "workspace_restored":
        items.push({ type: "note", seq: e.seq, text: `The workspace was put back as it was at event ${e.at_seq}.` });
        break;
      case "agent_session": {
        const who = e.agent_info?.title ?? e.agent;
        const version = e.agent_info?.version ? ` ${e.agent_info.version}` : "";
        items.push({ type: "note", seq: e.seq, text: `${who}${version} works in this conversation (session ${e.session_id}).` });
        break;
      }
      case "skill_activated":
        items.push({ type: "note", seq: e.seq, text: `Skill ${e.name} activated by “${e.trigger}”.` });
        break;
      case "llm_profile":
        items.push({ type: "note", seq: e.seq, text: `The agent now uses ${e.model} (${e.profile ? `profile ${e.profile}` : "the default LLM"}).` });
        break;
      case "mcp_servers": {
        // One line for all of them: a server that cannot be reached is a warning (the
        // conversation goes on without it), not an error per server.
        const up = e.servers.filter((s) => !s.error).map((s) => `${s.name} (${(s.tools ?? []).length} tools)`);
        const down = e.servers.filter((s) => s.error).map((s) => `${s.name}: ${s.error}`);
        if (down.length)
          items.push({
            type: "warning",
            seq: e.seq,
            text: `Unavailable MCP server${down.length > 1 ? "s" : ""}: ${down.join("; ")}.${up.length ? ` In use: ${up.join(", ")}.` : ""}`,
          });
        else if (up.length) items.push({ type: "note", seq: e.seq, text: `MCP servers in use: ${up.join(", ")}.` });
        break;
      }
      case "execution_status":
        // An action still without a result is not running once the run waits or ends.
        if (e.status !== "running")
          for (const i of byCall.values()) {
            const it = items[i];
            if (it.type === "action" && !it.observation && !it.rejected)
              items[i] = {
                ...it,
                stalled: e.status === "waiting_for_confirmation" ? "waiting" : e.status === "paused" ? "paused" : "ended",
              };
          }
        else
          for (const i of byCall.values()) {
            const it = items[i];
            if (it.type === "action" && (it.stalled === "waiting" || it.stalled === "paused")) items[i] = { ...it, stalled: undefined };
          }
        if (e.status === "paused" || e.status === "finished" || e.status === "stuck" || e.status === "waiting_for_confirmation")
        {
          // A reason that already says the status is said once.
          const label = e.status.replace(/_/g, " ");
          const text = !e.reason ? label : e.reason.startsWith(label) ? e.reason : `${label}: ${e.reason}`;
          items.push({ type: "note", seq: e.seq, text });
        }
        break;
      default:
        break;
    }
  }
  return items;
}

/** Where the timeline's pictures load from: given on the owner's page only (a shared view may
 * not fetch them). */
export const PictureLinks = createContext<((kind: "screenshot" | "image", id: string) => string) | undefined>(undefined);

/** A browser step's screenshot and a Python cell's plots, small, each a link to itself. */
function Pictures({ observation }: { observation?: ObservationEvent }) {
  const link = useContext(PictureLinks);
  if (!link || !observation) return null;
  const srcs = [
    ...(observation.screenshot_id ? [link("screenshot", observation.screenshot_id)] : []),
    ...(observation.image_ids ?? []).map((id) => link("image", id)),
  ];
  if (srcs.length === 0) return null;
  return (
    <div className="pictures">
      {srcs.map((src, i) => (
        <a key={src} href={src} target="_blank" rel="noreferrer">
          <img className="thumb" src={src} alt={`Picture ${i + 1} of ${observation.tool}`} loading="lazy" data-testid="picture" />
        </a>
      ))}
    </div>
  );
}

const str = (v: unknown) => (typeof v === "string" ? v : v === undefined ? "" : JSON.stringify(v));

function ActionCard({ item }: { item: Extract<Item, { type: "action" }> }) {
  const { action, observation, rejected } = item;
  const args = typeof action.arguments === "string" ? { raw: action.arguments } : action.arguments;
  // A model that gave no risk is not taken to have said "medium": the user is told so.
  const risk = action.security_risk ? (
    action.security_risk !== "low" && <span className={`risk r-${action.security_risk}`}>{action.security_risk} risk</span>
  ) : item.stalled === "waiting" ? (
    <span className="risk r-unknown">risk not stated</span>
  ) : null;
  const output = observation && (
    <pre className={`output${observation.is_error ? " failed" : ""}`} data-testid="observation">
      {observation.content}
      {observation.exit_code !== undefined && observation.exit_code !== 0 && <span className="exit">exit {observation.exit_code}</span>}
    </pre>
  );
  const pending =
    !observation &&
    !rejected && (
      <div className="muted small">
        {item.stalled === "waiting"
          ? "waiting for your confirmation"
          : item.stalled === "paused"
            ? "paused; it goes on when the conversation is resumed"
            : item.stalled === "ended"
              ? "no result (the run ended before it)"
              : "running…"}
      </div>
    );
  const refused = rejected && <div className="error small">Refused: {rejected}</div>;

  if (action.tool === "think") {
    return (
      <details className="card think">
        <summary>Thought</summary>
        <Markdown text={str(args.thought)} />
      </details>
    );
  }
  // A third-party agent's tool call (its own tool's name; `kind`, `title` and `input` as the
  // Agent Client Protocol describes it): a command like Halyard's own, anything else by its title.
  const acp = typeof args.kind === "string" && "input" in args;
  const acpInput = (acp ? (args.input ?? {}) : {}) as Record<string, unknown>;
  if (action.tool === "terminal" || (acp && args.kind === "execute")) {
    const command = acp ? (acpInput.command ?? args.title) : args.command;
    return (
      <div className="card cmd" data-testid="command-card">
        {action.thought && <div className="thought">{action.thought}</div>}
        <pre className="command">
          <span className="prompt">$ </span>
          {str(command)}
          {risk}
        </pre>
        {output}
        {pending}
        {refused}
      </div>
    );
  }
  if (acp) {
    return (
      <div className="card" data-testid="agent-tool-card">
        <div className="edit-head">
          <span className="tool">{action.tool}</span> <code>{str(args.title)}</code>
          {risk}
        </div>
        {output}
        {pending}
        {refused}
      </div>
    );
  }
  if (action.tool === "execute_ipython_cell") {
    return (
      <div className="card cmd" data-testid="cell-card">
        {action.thought && <div className="thought">{action.thought}</div>}
        <pre className="command">
          <span className="prompt">In: </span>
          {str(args.code)}
          {risk}
        </pre>
        {output}
        <Pictures observation={observation} />
        {pending}
        {refused}
      </div>
    );
  }
  if (action.tool === "file_editor") {
    const command = str(args.command);
    const path = str(args.path);
    const lines =
      command === "create"
        ? editLines("", str(args.file_text))
        : command === "str_replace"
          ? editLines(str(args.old_str), str(args.new_str))
          : command === "insert"
            ? editLines("", str(args.new_str))
            : null;
    return (
      <div className="card edit" data-testid="edit-card">
        {action.thought && <div className="thought">{action.thought}</div>}
        <div className="edit-head">
          <span className="tool">{command}</span> <code>{path}</code>
          {risk}
        </div>
        {lines ? <Diff lines={lines} label={`edit of ${path}`} /> : output}
        {lines && observation?.is_error && output}
        {pending}
        {refused}
      </div>
    );
  }
  return (
    <div className="card">
      <div className="edit-head">
        <span className="tool">{action.tool}</span> <code>{JSON.stringify(args)}</code>
      </div>
      {output}
      <Pictures observation={observation} />
      {pending}
      {refused}
    </div>
  );
}

/** Who the user's messages are shown as: "You", or the owner's name where another reads them. */
export const UserLabel = createContext("You");

const Row = memo(function Row({ item }: { item: Item }) {
  const you = useContext(UserLabel);
  switch (item.type) {
    case "message":
      return (
        <div className={`msg ${item.who}`}>
          <div className="who">{item.who === "user" ? you : "Agent"}</div>
          <Markdown text={item.text} />
          {item.images && item.images.length > 0 && (
            <div className="attached">
              {item.images.map((img, i) => (
                <img key={i} src={`data:${img.media_type};base64,${img.data}`} alt={`Attached image ${i + 1}`} />
              ))}
            </div>
          )}
        </div>
      );
    case "action":
      return <ActionCard item={item} />;
    case "helpers":
      return (
        <div className="card helpers" data-testid="helpers">
          <div className="edit-head">
            <span className="tool">helpers</span> working in this workspace
          </div>
          <ul>
            {item.helpers.map((h) => (
              <li key={h.id}>
                <Link href={`/c/${h.id}`}>{h.title}</Link>{" "}
                <StatusBadge status={h.ended ?? "running"} />
                {h.said && <div className="muted small helper-said">{h.said}</div>}
              </li>
            ))}
          </ul>
        </div>
      );
    case "error":
      return (
        <div className="card error-card" role="alert">
          <strong>{item.code.replace(/_/g, " ")}</strong>: {item.message}
        </div>
      );
    case "note":
      return <div className="note">{item.text}</div>;
    case "writing":
      return (
        <div className="msg agent writing" data-testid="writing" aria-live="polite">
          <div className="who">Agent, writing…</div>
          <Markdown text={item.text} />
        </div>
      );
    case "thinking":
      return (
        <details className="card think" data-testid="thinking">
          <summary>Thinking</summary>
          <Markdown text={item.text} />
          {item.redacted > 0 && <p className="muted small">{item.redacted} block(s) redacted by the provider.</p>}
        </details>
      );
    case "warning":
      return (
        <div className="note warning" role="status">
          {item.text}
        </div>
      );
  }
});

/** What a reader can do at one event of their own conversation (absent: a read-only view). */
export interface AtActions {
  /** A new conversation with the log up to `seq` and the workspace as it was then. */
  fork: (seq: number) => void;
  /** The workspace put back as it was at `seq`. */
  restore: (seq: number) => void;
}

/** The event an item's workspace state follows: an action's result, else the item itself. */
const atSeq = (item: Item) => (item.type === "action" && item.observation ? item.observation.seq : item.seq);

function AtMenu({ seq, at }: { seq: number; at: AtActions }) {
  return (
    <div className="at-actions">
      <button className="link small" onClick={() => at.fork(seq)} title={`A new conversation as this one was at event ${seq}`}>
        Fork from here
      </button>
      <button className="link small" onClick={() => at.restore(seq)} title={`Put the workspace's files back as they were at event ${seq}`}>
        Restore files to here
      </button>
    </div>
  );
}

/** `writing`: the text of the answer the model is still writing, shown after the events. */
export function Timeline({ events, at, writing }: { events: HalyardEvent[]; at?: AtActions; writing?: string }) {
  const logged = useMemo(() => toItems(events), [events]);
  const items = useMemo(() => (writing ? [...logged, { type: "writing" as const, seq: -1, text: writing }] : logged), [logged, writing]);
  const parent = useRef<HTMLDivElement>(null);
  const stick = useRef(true);
  const virtualizer = useVirtualizer({
    count: items.length,
    getScrollElement: () => parent.current,
    estimateSize: () => 90,
    overscan: 8,
    getItemKey: (i) => items[i].seq,
  });

  // Follow the end while the reader is at the end; leave them be once they scroll up.
  useEffect(() => {
    if (stick.current && items.length > 0) virtualizer.scrollToIndex(items.length - 1, { align: "end" });
  }, [items.length, writing, virtualizer]);

  return (
    <div
      className="timeline"
      ref={parent}
      tabIndex={0}
      aria-label="Conversation"
      onScroll={(e) => {
        const el = e.currentTarget;
        stick.current = el.scrollHeight - el.scrollTop - el.clientHeight < 80;
      }}
    >
      <div style={{ height: virtualizer.getTotalSize(), position: "relative" }}>
        {virtualizer.getVirtualItems().map((v) => (
          <div
            key={v.key}
            data-index={v.index}
            data-seq={items[v.index].seq}
            ref={virtualizer.measureElement}
            className="row"
            style={{ position: "absolute", top: 0, left: 0, width: "100%", transform: `translateY(${v.start}px)` }}
          >
            <Row item={items[v.index]} />
            {at && items[v.index].type !== "writing" && <AtMenu seq={atSeq(items[v.index])} at={at} />}
          </div>
        ))}
      </div>
    </div>
  );
}
