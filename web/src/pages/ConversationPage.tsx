// One conversation: its start (the start task's phases, live, until READY), its title (editable
// in place), its execution status with pause, resume and interrupt, and its tabs: the chat, the
// plan, the user's own terminal, the agent's commands, what changed, the workspace's files, the
// agent's browser, VS Code, the served apps and what the sandbox reached on the network.

import { Suspense, lazy, useEffect, useMemo, useRef, useState, type FormEvent, type KeyboardEvent } from "react";
import { api, errorText } from "../api";
import { Link, navigate } from "../router";
import { useEventStream } from "../events";
import { takePrefetched } from "../prefetch";
import type { Conversation, ExecutionStatus, HalyardEvent, ImageData, StartTask } from "../types";
import { PictureLinks, Timeline, type AtActions } from "../components/Timeline";
import { ChangesView } from "../components/ChangesView";
import { NetworkView } from "../components/NetworkView";
import { FilesView } from "../components/FilesView";
import { StatusBadge, ErrorText, ordinal } from "../components/Status";
import { AppsView } from "../components/AppsView";
import { PlanView } from "../components/PlanView";
import { BrowserView } from "../components/BrowserView";
import { VsCodeView } from "../components/VsCodeView";
import { HooksBar, pendingHooks } from "../components/HooksConsent";

const PHASES = [
  ["WORKING", "Accepted"],
  ["QUEUED", "Waiting for a free sandbox"],
  ["WAITING_FOR_SANDBOX", "Starting the sandbox"],
  ["RESTORING_SNAPSHOT", "Starting from the environment's snapshot"],
  ["PREPARING_REPOSITORY", "Cloning the repository"],
  ["BUILDING_IMAGE", "Building the dev container's image"],
  ["RUNNING_SETUP_SCRIPT", "Running the setup script"],
  ["SAVING_SNAPSHOT", "Keeping the set-up sandbox as a snapshot"],
  ["SETTING_UP_GIT_HOOKS", "Setting up git hooks"],
  ["SETTING_UP_SKILLS", "Loading skills"],
  ["STARTING_CONVERSATION", "Starting the agent"],
  ["READY", "Ready"],
] as const;

/** Phases only some starts go through: shown while they are the current one (or failed). */
const OCCASIONAL = new Set<string>(["RESTORING_SNAPSHOT", "BUILDING_IMAGE", "SAVING_SNAPSHOT"]);

// xterm is most of the bundle and only the Terminal tab needs it: it loads when that tab opens.
const TerminalView = lazy(() => import("../components/TerminalView").then((m) => ({ default: m.TerminalView })));
const UserTerminal = lazy(() => import("../components/UserTerminal").then((m) => ({ default: m.UserTerminal })));

const TABS = ["Chat", "Plan", "Terminal", "Commands", "Changes", "Files", "Browser", "VS Code", "Apps", "Network"] as const;
type Tab = (typeof TABS)[number];
/** A tab's name as an element id ("VS Code" has a space). */
const slug = (t: Tab) => t.replace(/ /g, "-");

export function ConversationPage({ id }: { id: string }) {
  const [conv, setConv] = useState<Conversation>();
  const [loadError, setLoadError] = useState<string>();
  const [task, setTask] = useState<StartTask>();
  const [tab, setTab] = useState<Tab>("Chat");
  // VS Code stays loaded once opened (hidden on other tabs): its unsaved edits and open editors
  // live in the page, and a reload would lose them.
  const [vscodeOpened, setVscodeOpened] = useState(false);
  useEffect(() => {
    if (tab === "VS Code") setVscodeOpened(true);
  }, [tab]);
  // Another conversation's page has not opened its VS Code yet (unless its tab is showing).
  // eslint-disable-next-line react-hooks/exhaustive-deps -- on a new conversation only
  useEffect(() => setVscodeOpened(tab === "VS Code"), [id]);
  const [actionError, setActionError] = useState<string>();
  const taskId = new URLSearchParams(location.search).get("task") ?? conv?.start_task_id;
  const starting = !conv || conv.status === "STARTING";
  const { events, connection, writing, inLine } = useEventStream(id, !!conv && conv.status !== "STARTING", conv?.last_event_seq);

  // The conversation record: at once (the request the page made while it loaded, if any),
  // then now and then (status, sandbox).
  useEffect(() => {
    let stop = false;
    let early = takePrefetched(id);
    const load = () =>
      (early ?? api.conversation(id)).then(
        (c) => !stop && (setConv(c), setLoadError(undefined)),
        (e) => !stop && setLoadError(errorText(e)),
      );
    load();
    early = undefined;
    const t = window.setInterval(load, starting ? 500 : 5000);
    return () => {
      stop = true;
      window.clearInterval(t);
    };
  }, [id, starting]);

  // The start task's phases, live, while it runs (a conversation that started, or failed with
  // its reason on its record, needs no look at its task).
  useEffect(() => {
    if (!taskId || !conv || (conv.status === "READY" && !task) || (conv.status !== "STARTING" && task)) return;
    let stop = false;
    let t: number | undefined;
    const poll = () =>
      api.task(taskId).then(
        (k) => {
          if (stop) return;
          setTask(k);
          if (k.status !== "READY" && k.status !== "ERROR" && k.status !== "CANCELLED") t = window.setTimeout(poll, k.status === "QUEUED" ? 500 : 150);
          else api.conversation(id).then((c) => !stop && setConv(c), () => {});
        },
        () => !stop && (t = window.setTimeout(poll, 1000)),
      );
    poll();
    return () => {
      stop = true;
      window.clearTimeout(t);
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [taskId, id, conv?.status]);

  const lastSeq = events.length ? events[events.length - 1].seq : 0;
  const status: ExecutionStatus | undefined = useMemo(() => {
    for (let i = events.length - 1; i >= 0; i--) {
      const e = events[i];
      if (e.kind === "execution_status") return e.status;
    }
    return conv?.execution_status ?? undefined;
  }, [events, conv]);
  // The newest title event, unless it is a fork's copy of its source's (the fork's own title is
  // on its record).
  const title = useMemo(() => {
    const copied = conv?.forked_from?.at_seq ?? 0;
    for (let i = events.length - 1; i >= 0 && events[i].seq > copied; i--) {
      const e = events[i];
      if (e.kind === "title") return e.title;
    }
    return conv?.title ?? undefined;
  }, [events, conv]);
  const observations = useMemo(() => events.filter((e) => e.kind === "observation").length, [events]);
  const hooksAsked = useMemo(() => pendingHooks(events), [events]);
  const dark = document.documentElement.dataset.theme === "dark";

  const act = async (f: () => Promise<unknown>) => {
    setActionError(undefined);
    try {
      await f();
    } catch (e) {
      setActionError(errorText(e));
    }
  };

  if (loadError && !conv) {
    return (
      <section className="page">
        <p role="alert" className="error">
          {loadError}
        </p>
      </section>
    );
  }

  const failed = conv?.status === "ERROR" || task?.status === "ERROR";
  // The same request again, in a new sandbox; the page follows the new start task.
  const retry = () =>
    act(async () => {
      const k = await api.retry(id);
      history.replaceState(null, "", `/c/${id}?task=${k.id}`);
      setTask(k);
      setConv(await api.conversation(id));
    });
  // At any event of the timeline: a fork (the page goes to it, following its start), or the
  // files put back (recorded in the log; another restore undoes it).
  const at: AtActions = {
    fork: (seq) =>
      act(async () => {
        const k = await api.fork(id, seq);
        navigate(`/c/${k.conversation_id}?task=${k.id}`);
      }),
    restore: (seq) => act(() => api.restore(id, seq)),
  };
  const onTabKey = (e: KeyboardEvent) => {
    const i = TABS.indexOf(tab);
    if (e.key === "ArrowRight" || e.key === "ArrowLeft") {
      const next = TABS[(i + (e.key === "ArrowRight" ? 1 : TABS.length - 1)) % TABS.length];
      setTab(next);
      document.getElementById(`tab-${slug(next)}`)?.focus();
    }
  };

  return (
    <section className="conversation">
      <div className="conv-head">
        <EditableTitle id={id} title={title} />
        <div className="conv-controls">
          {connection === "reconnecting" && (
            <span className="badge s-reconnecting" role="status">
              reconnecting…
            </span>
          )}
          <span role="status" aria-label="Execution status">
            <StatusBadge status={failed ? "ERROR" : (status ?? conv?.status ?? "STARTING")} />
          </span>
          {status === "running" && (
            <button className="ghost" onClick={() => act(() => api.interrupt(id))}>
              Interrupt
            </button>
          )}
          {status === "paused" ? (
            <button onClick={() => act(() => api.resume(id))}>Resume</button>
          ) : (
            // A finished, failed or stuck conversation has nothing running to pause.
            conv?.status === "READY" &&
            (status === "running" || status === "idle" || status === "waiting_for_confirmation") && (
              <button className="ghost" onClick={() => act(() => api.pause(id))}>
                Pause
              </button>
            )
          )}
          <span className="muted small" data-testid="seq" data-count={events.length} data-last={lastSeq}>
            {events.length} events
          </span>
          {conv?.metrics && <Usage metrics={conv.metrics} />}
          <a className="button ghost" href={api.exportUrl(id, "md")} download>
            Export transcript
          </a>
          <a className="button ghost" href={api.exportUrl(id, "jsonl")} download>
            Export JSON lines
          </a>
          <ShareControl id={id} />
          {conv?.org && <OrgShareControl conv={conv} onChange={setConv} />}
        </div>
      </div>
      {conv?.tags?.batch && (
        <p className="small muted" data-testid="batch-of">
          <Link href={`/batches/${conv.tags.batch}`}>
            {conv.tags.batch_attempt === undefined ? "Part of a batch" : `Attempt ${Number(conv.tags.batch_attempt) + 1} of a group`}
          </Link>
        </p>
      )}
      {conv?.verdict && (
        <p className={`small verdict ${conv.verdict.passed ? "passed" : "failed"}`} data-testid="verdict">
          Checks {conv.verdict.passed ? "passed" : "failed"} (score {conv.verdict.score.toFixed(2)}, attempt {conv.verdict.attempt})
        </p>
      )}
      {conv?.result !== undefined && conv?.result !== null && (
        <pre className="small result" data-testid="result">
          {JSON.stringify(conv.result, null, 2)}
        </pre>
      )}
      {conv?.pull_requests && conv.pull_requests.length > 0 && (
        <p className="muted small pull-requests">
          Pull request{conv.pull_requests.length > 1 ? "s" : ""}:{" "}
          {conv.pull_requests.map((p) => (
            <a key={p.url} href={p.url} target="_blank" rel="noopener noreferrer" className="pr-link" title={p.title ?? undefined}>
              #{p.number}
            </a>
          ))}
        </p>
      )}
      {conv?.parent_conversation_id && (
        <p className="muted small helper-of">
          A helper of <Link href={`/c/${conv.parent_conversation_id}`}>its parent conversation</Link>, working in the same workspace.
        </p>
      )}
      {conv?.sub_conversation_ids && conv.sub_conversation_ids.length > 0 && (
        <p className="muted small helpers-line">
          Helpers:{" "}
          {conv.sub_conversation_ids.map((h, i) => (
            <Link key={h} href={`/c/${h}`} className="helper-link">
              {i + 1}
            </Link>
          ))}
        </p>
      )}
      {conv?.forked_from && (
        <p className="muted small forked-from">
          Forked from <Link href={`/c/${conv.forked_from.conversation_id}`}>a conversation</Link> at event {conv.forked_from.at_seq}.
        </p>
      )}
      <ErrorText error={actionError} />

      {(starting || failed) && <Phases task={task} conv={conv} onRetry={retry} />}

      {!starting && !failed && (
        <>
          <div role="tablist" aria-label="Views" className="tabs" onKeyDown={onTabKey}>
            {TABS.map((t) => (
              <button
                key={t}
                id={`tab-${slug(t)}`}
                role="tab"
                aria-selected={tab === t}
                aria-controls={`panel-${slug(t)}`}
                tabIndex={tab === t ? 0 : -1}
                onClick={() => setTab(t)}
              >
                {t}
              </button>
            ))}
          </div>
          <div role="tabpanel" id={`panel-${slug(tab)}`} aria-labelledby={`tab-${slug(tab)}`} className="panel">
            {tab === "Chat" && (
              <>
                <EventFilter id={id} events={events} writing={writing} lastSeq={lastSeq} at={conv?.status === "READY" ? at : undefined} />
                {inLine?.position != null && (
                  <p className="queue-place" role="status">
                    All sandboxes are busy: waking this one is {ordinal(inLine.position)} in line
                    {inLine.estimate_secs != null && <> (about {Math.max(1, Math.round(inLine.estimate_secs))} s)</>}. Your message is kept and
                    answered once it wakes.
                  </p>
                )}
                {status === "waiting_for_confirmation" && <ConfirmBar id={id} />}
                {hooksAsked && conv?.status === "READY" && <HooksBar key={hooksAsked.sha256} id={id} asked={hooksAsked} />}
                <Composer id={id} />
              </>
            )}
            {tab === "Plan" && <PlanView events={events} />}
            {tab === "Terminal" && (
              <Suspense fallback={<p className="muted">Loading the terminal…</p>}>
                <UserTerminal id={id} dark={dark} />
              </Suspense>
            )}
            {tab === "Commands" && (
              <Suspense fallback={<p className="muted">Loading the terminal…</p>}>
                <TerminalView events={events} dark={dark} />
              </Suspense>
            )}
            {tab === "Changes" && <ChangesView id={id} version={observations} />}
            {tab === "Files" && <FilesView id={id} version={observations} />}
            {tab === "Browser" && <BrowserView id={id} events={events} known={conv?.browser ?? undefined} />}
            {vscodeOpened && (
              <div hidden={tab !== "VS Code"}>
                <VsCodeView id={id} />
              </div>
            )}
            {tab === "Apps" && <AppsView id={id} sandboxId={conv?.sandbox_id ?? undefined} />}
            {tab === "Network" && <NetworkView id={id} version={observations} />}
          </div>
        </>
      )}
    </section>
  );
}

function Phases({ task, conv, onRetry }: { task?: StartTask; conv?: Conversation; onRetry: () => void }) {
  // A start that ended is told by the conversation's record, which may have heard of the end
  // before the task's last poll did.
  const ended = conv && conv.status !== "STARTING";
  const current = (ended ? conv.start_task_status : task?.status) ?? conv?.start_task_status ?? "WORKING";
  const failed = current === "ERROR" || current === "CANCELLED" || conv?.status === "ERROR";
  const [cancelError, setCancelError] = useState<string>();
  const cancel = () => task && api.cancelStart(task.id).then(() => setCancelError(undefined), (e) => setCancelError(String(e)));
  const detail = task?.detail ?? conv?.error_detail ?? "";
  // A failed start names its phase first (`PREPARING_REPOSITORY failed: ...`).
  const at = failed ? PHASES.findIndex(([p]) => detail.startsWith(p)) : PHASES.findIndex(([p]) => p === current);
  return (
    <div className="phases card" aria-live="polite">
      <h2>{current === "CANCELLED" ? "The start was cancelled" : failed ? "The conversation could not start" : "Starting…"}</h2>
      <ol>
        {PHASES.map(([p, label], i) =>
          OCCASIONAL.has(p) && i !== at ? null : (
          <li
            key={p}
            className={i < at || current === "READY" ? "done" : i === at ? (failed ? "failed" : "current") : "todo"}
            data-phase={p}
          >
            {label}
          </li>
          ),
        )}
      </ol>
      {current === "QUEUED" && task?.position != null && (
        <p className="queue-place" role="status">
          All sandboxes are busy: {ordinal(task.position)} in line
          {task.estimate_secs != null && <> (about {Math.max(1, Math.round(task.estimate_secs))} s)</>}. It starts by itself.{" "}
          <button onClick={cancel}>Cancel</button>
          {cancelError && (
            <span role="alert" className="error">
              {" "}
              {cancelError}
            </span>
          )}
        </p>
      )}
      {conv?.message && (
        <blockquote className="first-message" aria-label="Your message">
          {conv.message}
        </blockquote>
      )}
      {failed && (
        <>
          <p role="alert" className="error">
            {detail || "The start failed."}
          </p>
          <button onClick={onRetry}>Retry</button>
        </>
      )}
    </div>
  );
}

function EditableTitle({ id, title }: { id: string; title?: string }) {
  const [editing, setEditing] = useState(false);
  const [value, setValue] = useState(title ?? "");
  const [error, setError] = useState<string>();
  const input = useRef<HTMLInputElement>(null);
  useEffect(() => {
    if (!editing) setValue(title ?? "");
  }, [title, editing]);
  useEffect(() => {
    if (editing) input.current?.select();
  }, [editing]);

  const save = async (e?: FormEvent) => {
    e?.preventDefault();
    const v = value.trim();
    if (!v || v === title) return setEditing(false);
    try {
      await api.rename(id, v);
      setEditing(false);
      setError(undefined);
    } catch (err) {
      setError(errorText(err));
    }
  };

  if (!editing) {
    return (
      <h1 className="conv-title">
        <button className="title-button" onClick={() => setEditing(true)} title="Rename">
          {title || "Untitled"}
        </button>
      </h1>
    );
  }
  return (
    <form onSubmit={save} className="title-form">
      <input
        ref={input}
        aria-label="Title"
        value={value}
        maxLength={200}
        onChange={(e) => setValue(e.target.value)}
        onKeyDown={(e) => e.key === "Escape" && setEditing(false)}
        onBlur={() => save()}
      />
      {error && <span className="error small">{error}</span>}
    </form>
  );
}

/** The images a message may carry (the gateway holds it to the same). */
const MAX_IMAGES = 4;
const IMAGE_KINDS = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/** A file as `{media_type, data}` with its bytes in base64. */
function readImage(file: File): Promise<ImageData> {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve({ media_type: file.type, data: String(reader.result).replace(/^data:[^,]*,/, "") });
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

function Composer({ id }: { id: string }) {
  const [text, setText] = useState("");
  const [images, setImages] = useState<ImageData[]>([]);
  const [error, setError] = useState<string>();
  const attach = async (files: File[]) => {
    const wanted = files.filter((f) => IMAGE_KINDS.includes(f.type));
    if (wanted.length < files.length) setError("Only PNG, JPEG, GIF and WebP images can be attached.");
    const read = await Promise.all(wanted.map(readImage));
    setImages((prev) => {
      const all = prev.concat(read);
      if (all.length > MAX_IMAGES) setError(`A message carries ${MAX_IMAGES} images at most.`);
      return all.slice(0, MAX_IMAGES);
    });
  };
  const send = async (e?: FormEvent) => {
    e?.preventDefault();
    const t = text.trim();
    if (!t) return;
    try {
      await api.send(id, t, images);
      setText("");
      setImages([]);
      setError(undefined);
    } catch (err) {
      setError(errorText(err));
    }
  };
  return (
    <form className="composer" onSubmit={send}>
      <textarea
        aria-label="Message"
        placeholder="Message the agent (Enter sends, Shift+Enter for a new line; paste an image to attach it)"
        rows={2}
        value={text}
        onChange={(e) => setText(e.target.value)}
        onPaste={(e) => {
          const files = Array.from(e.clipboardData.files);
          if (files.length) {
            e.preventDefault();
            attach(files);
          }
        }}
        onKeyDown={(e) => {
          if (e.key === "Enter" && !e.shiftKey) {
            e.preventDefault();
            send();
          }
        }}
      />
      <label className="button ghost">
        Image
        <input type="file" accept={IMAGE_KINDS.join(",")} multiple hidden aria-label="Attach images" onChange={(e) => (attach(Array.from(e.target.files ?? [])), (e.target.value = ""))} />
      </label>
      <button type="submit" disabled={!text.trim()}>
        Send
      </button>
      {images.length > 0 && (
        <div className="attached" aria-label="Images to send">
          {images.map((img, i) => (
            <span key={i} className="thumb">
              <img src={`data:${img.media_type};base64,${img.data}`} alt={`Image ${i + 1} to send`} />
              <button type="button" className="ghost" aria-label={`Remove image ${i + 1}`} onClick={() => setImages((prev) => prev.filter((_, j) => j !== i))}>
                ×
              </button>
            </span>
          ))}
        </div>
      )}
      <ErrorText error={error} />
    </form>
  );
}

function ConfirmBar({ id }: { id: string }) {
  const [reason, setReason] = useState("");
  const [error, setError] = useState<string>();
  const run = (f: () => Promise<unknown>) => f().then(() => setError(undefined), (e) => setError(errorText(e)));
  return (
    <div className="confirm-bar" role="region" aria-label="Actions waiting for your confirmation">
      <span>The agent waits for your confirmation.</span>
      <button onClick={() => run(() => api.confirm(id))}>Run them</button>
      <input aria-label="Reason to refuse" placeholder="Reason (optional)" value={reason} onChange={(e) => setReason(e.target.value)} />
      <button className="danger" onClick={() => run(() => api.reject(id, reason || "refused by the user"))}>
        Refuse
      </button>
      {error && <span className="error">{error}</span>}
    </div>
  );
}

const KINDS = [
  ["", "Every kind"],
  ["user_message", "Your messages"],
  ["agent_message", "Agent messages"],
  ["action", "Actions"],
  ["observation", "Results"],
  ["agent_error", "Errors"],
] as const;

/** The timeline, or, while a filter is set, the events the server finds for it
 * (`GET .../events?q=&kind=` and `.../events/count`), searched again as new events arrive. */
function EventFilter({
  id,
  events,
  writing,
  lastSeq,
  at,
}: {
  id: string;
  events: HalyardEvent[];
  writing?: string;
  lastSeq: number;
  at?: AtActions;
}) {
  const [text, setText] = useState("");
  const [words, setWords] = useState("");
  const [kind, setKind] = useState("");
  const [found, setFound] = useState<{ items: HalyardEvent[]; count: number }>();
  const [error, setError] = useState<string>();
  const pictures = useMemo(
    () => (kind: "screenshot" | "image", pic: string) => (kind === "screenshot" ? api.screenshotUrl(id, pic) : api.imageUrl(id, pic)),
    [id],
  );
  useEffect(() => {
    const t = window.setTimeout(() => setWords(text.trim()), 250);
    return () => window.clearTimeout(t);
  }, [text]);
  const filtering = words !== "" || kind !== "";
  useEffect(() => {
    if (!filtering) return setFound(undefined);
    let stop = false;
    const p = { q: words, kind };
    Promise.all([api.findEvents(id, { ...p, limit: 1000 }), api.countEvents(id, p)]).then(
      ([page, n]) => !stop && (setFound({ items: page.items, count: n.count }), setError(undefined)),
      (e) => !stop && setError(errorText(e)),
    );
    return () => {
      stop = true;
    };
  }, [id, words, kind, filtering, lastSeq]);
  return (
    <>
      <div className="filters event-filter" role="search">
        <input type="search" aria-label="Filter events" placeholder="Filter events" value={text} onChange={(e) => setText(e.target.value)} />
        <select aria-label="Event kind" value={kind} onChange={(e) => setKind(e.target.value)}>
          {KINDS.map(([k, label]) => (
            <option key={k} value={k}>
              {label}
            </option>
          ))}
        </select>
        {filtering && found && (
          <span className="muted" data-testid="event-count">
            {found.count} event{found.count === 1 ? "" : "s"} match
          </span>
        )}
      </div>
      <ErrorText error={error} />
      <PictureLinks.Provider value={pictures}>
        <Timeline events={filtering ? (found?.items ?? []) : events} at={at} writing={filtering ? undefined : writing} />
      </PictureLinks.Provider>
    </>
  );
}

/** What the conversation's LLM calls used: tokens, and the cost where the model has a price. */
function Usage({ metrics }: { metrics: NonNullable<Conversation["metrics"]> }) {
  const tokens = (metrics.prompt_tokens ?? 0) + (metrics.completion_tokens ?? 0);
  const cost = metrics.cost_usd ?? 0;
  const detail = `${metrics.llm_calls ?? 0} LLM calls: ${metrics.prompt_tokens ?? 0} tokens in, ${metrics.completion_tokens ?? 0} out`;
  return (
    <span className="muted small" data-testid="usage" title={detail}>
      {tokens.toLocaleString("en")} tokens{cost > 0 ? ` · $${cost.toFixed(cost < 0.01 ? 4 : 2)}` : ""}
    </span>
  );
}

/** A read-only link to the conversation for people without an account: made (shown this once),
 * copied, replaced or revoked here. */
/** Whether the members of the conversation's organization follow it (read-only). */
function OrgShareControl({ conv, onChange }: { conv: Conversation; onChange: (c: Conversation) => void }) {
  const [error, setError] = useState<string>();
  // Shown as asked at once; put back if the gateway refuses.
  const [shared, setShared] = useState(conv.visibility === "org");
  useEffect(() => setShared(conv.visibility === "org"), [conv.visibility]);
  const toggle = async (on: boolean) => {
    setError(undefined);
    setShared(on);
    try {
      await api.setVisibility(conv.id, on ? "org" : "private");
      onChange({ ...conv, visibility: on ? "org" : "private" });
    } catch (e) {
      setShared(!on);
      setError(errorText(e));
    }
  };
  return (
    <label className="small check">
      <input type="checkbox" checked={shared} onChange={(e) => toggle(e.target.checked)} />
      Shared with {conv.org}
      {error && <span className="error small"> {error}</span>}
    </label>
  );
}

function ShareControl({ id }: { id: string }) {
  const [shared, setShared] = useState<boolean>();
  const [url, setUrl] = useState<string>();
  const [error, setError] = useState<string>();
  useEffect(() => {
    api.shareState(id).then(
      (s) => setShared(s.shared),
      () => setShared(false),
    );
  }, [id]);
  const run = async (f: () => Promise<void>) => {
    setError(undefined);
    try {
      await f();
    } catch (e) {
      setError(errorText(e));
    }
  };
  const make = () =>
    run(async () => {
      const link = await api.share(id);
      setUrl(link.url);
      setShared(true);
    });
  const stop = () =>
    run(async () => {
      await api.unshare(id);
      setUrl(undefined);
      setShared(false);
    });
  if (shared === undefined) return null;
  return (
    <span className="share" aria-label="Sharing">
      {!shared && (
        <button className="ghost" onClick={make}>
          Share
        </button>
      )}
      {shared && url && (
        <>
          <label className="small">
            Share link{" "}
            <input readOnly value={url} size={30} onFocus={(e) => e.currentTarget.select()} data-testid="share-url" />
          </label>
          <button className="ghost" onClick={() => run(() => navigator.clipboard.writeText(url))}>
            Copy
          </button>
        </>
      )}
      {shared && !url && (
        <button className="ghost" onClick={make} title="The link is shown once; this makes a new one and ends the old">
          New share link
        </button>
      )}
      {shared && (
        <button className="ghost" onClick={stop}>
          Stop sharing
        </button>
      )}
      {error && <span className="error small">{error}</span>}
    </span>
  );
}
