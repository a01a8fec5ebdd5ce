// The gateway's JSON. The API's types are generated from its OpenAPI document (`api-schema.ts`,
// written from `openapi.json` by every build: a type the handlers changed fails `tsc` where the
// app uses it); here they get the names the app uses, and the string fields the document
// describes in words get their values as types ([`Narrow`]). The event log's types follow
// `protocol/README.md`.

import type * as S from "./api-schema";

/** `A` with some of its fields' types narrowed to `B`'s; `B` may only name fields `A` has, so a
 * field the API dropped fails here. */
type Narrow<A, B extends { [K in keyof B]: K extends keyof A ? unknown : never }> = Omit<A, keyof B> & B;

export type ExecutionStatus = "idle" | "running" | "paused" | "finished" | "error" | "stuck" | "waiting_for_confirmation";
export type ConversationStatus = "STARTING" | "READY" | "ERROR";
/** The one status a person reads (`status` and `execution_status` are what it is made of). */
export type ConversationState = "starting" | "start_failed" | ExecutionStatus | "sandbox_deleted";

/** A conversation's repository: where it was cloned from. */
export interface Repository {
  url: string;
  branch?: string | null;
}

/** One task of the agent's plan (its status is always sent). */
export type TaskItem = Narrow<S.TaskItem, { status: S.TaskStatus }>;

export type Conversation = Narrow<
  S.Conversation,
  {
    state: ConversationState;
    status: ConversationStatus;
    execution_status?: ExecutionStatus | null;
    repository?: Repository | null;
  }
>;

export type ConversationPage = Narrow<S.ConversationPage, { items: Conversation[] }>;
export type StartTask = S.StartTask;
/** A URL a sandbox serves (`exposed_urls`: the executor, VS Code, an app). */
export interface ExposedUrl {
  name: string;
  url: string;
}

export type Sandbox = Narrow<S.Sandbox, { exposed_urls: ExposedUrl[] }>;
export type SandboxSpecs = S.SandboxSpecs;
export type Webhook = S.Webhook;
export type AutomationTrigger = S.AutomationTrigger;
export type AutomationRun = Narrow<S.AutomationRun, { outcome: "started" | "continued" | "ignored" | "failed" }>;
export type Automation = Narrow<S.Automation, { last_run?: AutomationRun | null }>;
/** What a Slack sign-in link links (GET and POST /slack-links/{code}). */
export type SlackLinkInfo = S.SlackLinkView;
export type NewAutomation = S.AutomationCreate;
/** One of `GET /agents`: what a conversation's agent can be, and why one cannot run. */
export type AgentView = S.AgentView;
export type DeliveryAttempt = S.DeliveryAttempt;
export type ChangedFile = Narrow<S.ChangedFile, { status: "added" | "modified" | "deleted" | "renamed" | "untracked" }>;
export type Changes = Narrow<S.Changes, { files: ChangedFile[] }>;
export type NetworkSummary = S.NetworkSummary;
export type FileEntry = Narrow<S.FileEntry, { kind: "file" | "directory" | "symlink" }>;
export type Files = Narrow<S.Files, { kind: "directory" | "file"; entries?: FileEntry[] | null }>;
export type Me = S.Me;

interface EventBase {
  seq: number;
  id: string;
  conversation_id: string;
  source: "user" | "agent" | "environment" | "system";
  timestamp: string;
}

export type ToolArguments = Record<string, unknown> | string;

export type HalyardEvent = EventBase &
  (
    | { kind: "conversation_started"; model?: string; workspace?: string; llm_profile?: string; agent?: string }
    | { kind: "agent_session"; agent: string; session_id: string; agent_info?: { name?: string; title?: string; version?: string } }
    | { kind: "agent_update"; update_kind: string; update: Record<string, unknown> }
    | { kind: "user_message"; text: string; images?: ImageData[] }
    | { kind: "agent_message"; text: string }
    | { kind: "action"; tool_call_id: string; tool: string; arguments: ToolArguments; thought?: string; security_risk?: string }
    | { kind: "action_rejected"; tool_call_id: string; tool: string; reason: string }
    | {
        kind: "observation";
        tool_call_id: string;
        tool: string;
        content: string;
        exit_code?: number;
        is_error: boolean;
        /** A browser tool's page afterwards, and its screenshot's id. */
        url?: string;
        screenshot_id?: string;
        /** The plots a Python cell displayed. */
        image_ids?: string[];
      }
    | { kind: "agent_error"; code: string; message: string }
    | { kind: "execution_status"; status: ExecutionStatus; reason?: string }
    | { kind: "title"; title: string; set_by: string }
    | { kind: "llm_call"; model: string; profile?: string; prompt_tokens: number; completion_tokens: number; latency_ms: number }
    | { kind: "condensation"; from_seq: number; upto_seq: number; summary: string }
    | { kind: "skill_activated"; name: string; trigger: string }
    | { kind: "confirmation_policy"; policy: string }
    | { kind: "llm_profile"; profile?: string; model: string }
    | { kind: "mcp_servers"; servers: McpServerStatus[] }
    | { kind: "terminal_opened"; by: string }
    | { kind: "network_blocked"; host: string; port: number; rule: string; message: string }
    | { kind: "network_used"; destinations: { host: string; port: number; connections: number; bytes_sent: number; bytes_received: number }[] }
    | { kind: "budget_alert"; org: string; user?: string; percent: number; spent_usd: number; budget_usd: number; month: string }
    | { kind: "workspace_restored"; at_seq: number; checkpoint_seq: number }
    | { kind: "task_list"; items: TaskItem[] }
    | { kind: "thinking"; blocks: { text: string; signature?: string; redacted?: string }[] }
    | { kind: "pull_request_opened"; number: number; url: string; title?: string }
    | { kind: "result"; result: unknown }
    | { kind: "verification"; attempt: number; check: string; subject: string; passed: boolean; score: number; output: string; sent_back?: boolean }
    | { kind: "sub_conversations_started"; tool_call_id: string; children: { conversation_id: string; title: string }[] }
    | {
        kind: "sub_conversation_ended";
        tool_call_id: string;
        conversation_id: string;
        status: string;
        message: string;
        used_tokens: number;
        used_usd: number;
      }
    | { kind: "hooks_consent_required"; file: string; sha256: string; content: string; repository?: string }
    | { kind: "hooks_consent"; sha256: string; allowed: boolean }
    | {
        kind: "hook";
        event: string;
        command: string;
        tool?: string;
        exit_code?: number;
        stdout: string;
        stderr: string;
        blocked: boolean;
      }
  );

export type ActionEvent = Extract<HalyardEvent, { kind: "action" }>;
export type ObservationEvent = Extract<HalyardEvent, { kind: "observation" }>;

/** One MCP server as a run found it: the tools it offers, or why it offers none. */
export type McpServerStatus = Narrow<S.McpServerStatus, { transport: "stdio" | "http" }>;
/** An image attached to a message: its media type and bytes in base64. */
export type ImageData = S.Image;
/** A share link, as its owner gets it once (`POST /conversations/{id}/share`). */
export type ShareLink = S.ShareLink;
/** What a share link shows of its conversation (`GET /shared/{token}`). */
export type SharedConversation = S.SharedConversation;

/** A piece of the answer the model is still writing: a WebSocket frame of its own, never an
 * event (no seq). See `AnswerDelta` in protocol/README.md for how pieces fold. */
export interface AnswerDelta {
  kind: "answer_delta";
  after_seq: number;
  from: number;
  to: number;
  text: string;
}

/** The conversation's sandbox's place in the start queue while it waits for room (its start, or
 * a wake for a message): a WebSocket frame of its own, never an event. `position` is null once
 * it leaves the line. */
export interface QueuePosition {
  kind: "queue_position";
  position: number | null;
  estimate_secs: number | null;
}

/** The page the agent's browser is on, and the latest screenshot of it. */
export type BrowserPage = S.BrowserView;
/** One record of the audit trail (GET /admin/audit). */
export type AuditRecord = S.AuditView;
export type AuditPage = S.AuditPage;
export type Role = "owner" | "admin" | "member";
/** An organization you are in (GET /orgs). */
export type Org = Narrow<S.OrgView, { role: Role }>;
export type Member = Narrow<S.MemberView, { role: Role }>;
/** `GET /orgs/{org}/members`: the members, and those invited who have not answered yet. */
export type MemberList = Narrow<S.MemberList, { items: Member[]; invited: Member[] }>;
/** An invitation waiting for your answer (`GET /me/invitations`). */
export type Invitation = Narrow<S.InvitationView, { role: Role }>;
/** An organization's settings (GET/PUT /orgs/{org}/settings). */
export type OrgSettings = Narrow<S.OrgSettingsBody, { key_issuers: "everyone" | "admins" }>;
/** A model's price in an organization (GET /orgs/{org}/prices). */
export type PriceRow = Narrow<S.PriceView, { source: "org" | "operator" | "builtin" }>;
/** This month's spending against one budget. */
export type BudgetUse = S.BudgetUse;
/** GET /orgs/{org}/budget. */
export type BudgetStatus = S.BudgetStatus;
/** One group of a usage report (GET /me/usage, /admin/usage). */
export type UsageLine = S.UsageLine;
export type UsageReport = S.UsageReport;
