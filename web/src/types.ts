// The gateway's JSON, as its OpenAPI document (`GET /api/v1/openapi.json`, generated from the handlers' types) and `protocol/README.md` describe it.

export type ExecutionStatus = "idle" | "running" | "paused" | "finished" | "error" | "stuck" | "waiting_for_confirmation";
export type ConversationStatus = "STARTING" | "READY" | "ERROR";
/** The one status a person reads (`status` and `execution_status` are what it is made of). */
export type ConversationState = "starting" | "start_failed" | ExecutionStatus | "sandbox_deleted";

export interface Repository {
  url: string;
  branch?: string;
}

/** One task of the agent's plan. */
export interface TaskItem {
  title: string;
  notes: string;
  status: "todo" | "in_progress" | "done";
}

export interface Conversation {
  id: string;
  /** The agent that works in it: `halyard`, or a third-party agent (`claude-code`...). */
  agent?: string;
  /** Who started it: yourself, unless an organization you are in reads it. */
  owner: string;
  /** `org`: the members of its organization read it too (read-only, live). */
  visibility: "private" | "org";
  /** The organization it was started in. */
  org?: string;
  title?: string;
  /** The message it was started with. */
  message?: string;
  state: ConversationState;
  /** Why, when the state is an error (or says more). */
  state_detail?: string;
  status: ConversationStatus;
  start_task_id?: string;
  start_task_status?: string;
  error_detail?: string;
  execution_status?: ExecutionStatus;
  sandbox_id?: string;
  sandbox_status?: string;
  repository?: Repository;
  created_at: string;
  updated_at: string;
  last_event_seq?: number;
  metrics?: { llm_calls?: number; prompt_tokens?: number; completion_tokens?: number; cost_usd?: number };
  /** A fork: the conversation and event it was forked from. */
  forked_from?: { conversation_id: string; at_seq: number };
  /** Labels the owner finds it by. */
  tags?: Record<string, string>;
  /** Pull requests the agent opened with Halyard's own tool. */
  pull_requests?: { number: number; url: string; title?: string }[];
  /** Where the agent's browser is, and its latest screenshot (absent: it has not browsed). */
  browser?: BrowserPage;
  /** A helper: the conversation whose agent started it (with `delegate`); they share a workspace. */
  parent_conversation_id?: string;
  /** The helpers its agent started, in order. */
  sub_conversation_ids?: string[];
}

export interface ConversationPage {
  items: Conversation[];
  next_cursor?: string;
  count: number;
}

export interface StartTask {
  id: string;
  conversation_id?: string;
  status: string;
  detail?: string;
  sandbox_id?: string;
  created_at: string;
  updated_at: string;
}

export interface ExposedUrl {
  name: string;
  url: string;
}

export interface Sandbox {
  id: string;
  conversation_id: string | null;
  kind: string;
  spec: string | null;
  status: string;
  detail: string | null;
  exposed_urls: ExposedUrl[];
  workspace: string;
  created_at: string;
  updated_at: string;
}

export interface SandboxSpecs {
  kind: string;
  items: { name: string }[];
}

export interface Webhook {
  id: string;
  url: string;
  event_kinds?: string[];
  conversation_id?: string;
  description?: string;
  enabled: boolean;
  disabled_reason?: string;
  created_at: string;
  updated_at: string;
  /** Only in the answer that created or rotated it. */
  secret?: string;
}

export type AutomationTrigger =
  | { kind: "webhook" }
  | { kind: "schedule"; cron: string; timezone?: string }
  | { kind: "github" | "gitlab" | "forgejo"; provider: string; label?: string; mention?: string }
  | { kind: "bitbucket" | "azure_devops"; provider: string; mention?: string }
  | {
      kind: "jira";
      api_url: string;
      email: string;
      /** Write-only. */
      api_token?: string;
      projects: Record<string, string | null>;
      provider?: string;
      label?: string;
      mention?: string;
    }
  | {
      kind: "linear";
      /** Write-only. */
      signing_secret?: string;
      /** Write-only. */
      api_key?: string;
      teams: Record<string, string | null>;
      provider?: string;
      api_url?: string;
      label?: string;
      mention?: string;
    }
  | {
      kind: "slack";
      /** Write-only. */
      signing_secret?: string;
      /** Write-only. */
      bot_token?: string;
      channels: Record<string, string | null>;
      users: Record<string, string>;
      provider?: string;
      api_url?: string;
    };

export interface AutomationRun {
  id: string;
  time: string;
  source: string;
  trigger: string;
  outcome: "started" | "continued" | "ignored" | "failed";
  conversation_id?: string;
  reason?: string;
}

export interface Automation {
  id: string;
  name: string;
  trigger: AutomationTrigger;
  repository?: { provider: string; full_name: string; branch?: string };
  prompt?: string;
  llm_profile?: string;
  agent?: string;
  enabled: boolean;
  /** Where senders post, for kinds that receive requests. */
  hook_url?: string;
  /** Only in the answer that created it. */
  secret?: string;
  next_run_at?: string;
  last_run?: AutomationRun;
  created_at: string;
  updated_at: string;
}

/** What a Slack sign-in link links (GET and POST /slack-links/{code}). */
export interface SlackLinkInfo {
  automation: string;
  owner: string;
  slack_user: string;
  expires_at: string;
  /** The Slack user in words and their workspace, as the automation's Slack app named them. */
  slack_name?: string | null;
  workspace?: string | null;
  linked_to?: string;
  /** Whether the linked user lets the automation run agents as them. */
  runs_as_linked_user: boolean;
  /** Whether the deployment proves Slack users with Sign in with Slack (then anyone but the owner links through it). */
  slack_sign_in: boolean;
}

export interface NewAutomation {
  name: string;
  trigger: AutomationTrigger;
  repository?: { provider: string; full_name: string; branch?: string };
  prompt?: string;
  llm_profile?: string;
  agent?: string;
  enabled?: boolean;
}

/** One of `GET /agents`: what a conversation's agent can be, and why one cannot run. */
export type AgentView = { name: string; title: string; wires: string[]; available: boolean; why?: string; default: boolean };

export interface DeliveryAttempt {
  delivery_id: string;
  event_id: string;
  conversation_id: string;
  seq: number;
  attempt: number;
  status_code?: number;
  error?: string;
  duration_ms: number;
  outcome: string;
  time: string;
}

export interface ChangedFile {
  path: string;
  status: "added" | "modified" | "deleted" | "renamed" | "untracked";
  diff: string;
  truncated: boolean;
}

export interface Changes {
  repository: boolean;
  files: ChangedFile[];
}

export interface FileEntry {
  name: string;
  kind: "file" | "directory" | "symlink";
  size: number;
}

export interface Files {
  path: string;
  kind: "directory" | "file";
  entries?: FileEntry[];
  size?: number;
  content?: string;
  truncated: boolean;
  binary: boolean;
}

export interface Me {
  user: string;
  admin: boolean;
}

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
    | { kind: "budget_alert"; org: string; user?: string; percent: number; spent_usd: number; budget_usd: number; month: string }
    | { kind: "workspace_restored"; at_seq: number; checkpoint_seq: number }
    | { kind: "task_list"; items: TaskItem[] }
    | { kind: "thinking"; blocks: { text: string; signature?: string; redacted?: string }[] }
    | { kind: "pull_request_opened"; number: number; url: string; title?: string }
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
export interface McpServerStatus {
  name: string;
  transport: "stdio" | "http";
  tools: string[];
  error?: string;
}

/** An image attached to a message: its media type and bytes in base64. */
export interface ImageData {
  media_type: string;
  data: string;
}

/** A share link, as its owner gets it once (`POST /conversations/{id}/share`). */
export interface ShareLink {
  url: string;
  token: string;
  created_at: string;
}

/** What a share link shows of its conversation (`GET /shared/{token}`). */
export interface SharedConversation {
  id: string;
  title: string | null;
  state: string;
  created_at: string;
  last_event_seq: number;
}

/** A piece of the answer the model is still writing: a WebSocket frame of its own, never an
 * event (no seq). See `AnswerDelta` in protocol/README.md for how pieces fold. */
export interface AnswerDelta {
  kind: "answer_delta";
  after_seq: number;
  from: number;
  to: number;
  text: string;
}

/** The page the agent's browser is on, and the latest screenshot of it. */
export interface BrowserPage {
  url: string;
  screenshot_id?: string | null;
}

/** One record of the audit trail (GET /admin/audit). */
export interface AuditRecord {
  time: string;
  actor: string;
  action: string;
  target: string;
  org?: string | null;
  detail: Record<string, unknown>;
  client?: string | null;
}

export interface AuditPage {
  items: AuditRecord[];
  next_cursor?: string;
}

/** An organization you are in (GET /orgs). */
export interface Org {
  name: string;
  role: "owner" | "admin" | "member";
  members: number;
  created_at: string;
}

export interface Member {
  user: string;
  role: "owner" | "admin" | "member";
}

/** `GET /orgs/{org}/members`: the members, and those invited who have not answered yet. */
export interface MemberList {
  items: Member[];
  invited: Member[];
}

/** An invitation waiting for your answer (`GET /me/invitations`). */
export interface Invitation {
  org: string;
  role: Member["role"];
  invited_by: string;
  invited_at: string;
}

/** An organization's settings (GET/PUT /orgs/{org}/settings). */
export interface OrgSettings {
  default_llm_profile?: string | null;
  enforce_llm_profile: boolean;
  require_sso: boolean;
  sso_domains: string[];
  sso_groups: string[];
  monthly_budget_usd?: number | null;
  member_monthly_budget_usd?: number | null;
  key_issuers: "everyone" | "admins";
}

/** A model's price in an organization (GET /orgs/{org}/prices). */
export interface PriceRow {
  model: string;
  input_per_million: number;
  output_per_million: number;
  cached_per_million?: number | null;
  source: "org" | "operator" | "builtin";
}

/** This month's spending against one budget. */
export interface BudgetUse {
  budget_usd?: number | null;
  spent_usd: number;
  percent?: number | null;
  exhausted: boolean;
}

/** GET /orgs/{org}/budget. */
export interface BudgetStatus {
  org: string;
  month: string;
  org_budget: BudgetUse;
  you: BudgetUse;
  members: (BudgetUse & { user: string })[];
}

/** One group of a usage report (GET /me/usage, /admin/usage). */
export interface UsageLine {
  user?: string;
  model?: string;
  day?: string;
  tokens_in: number;
  tokens_out: number;
  cached_tokens: number;
  cost_usd: number;
  conversations: number;
  llm_calls: number;
  sandbox_seconds: number;
}

export interface UsageReport {
  from: string;
  to: string;
  group_by: string;
  rows: UsageLine[];
  total: UsageLine;
}
