// The gateway's HTTP API, called with the session cookie: every call the app makes is a named
// function of `api` here, and no path is written anywhere else. Every change carries the CSRF
// header the gateway demands of cookie requests (a cross-site form cannot set it); an error
// answer is thrown as an `ApiError` carrying the gateway's stable code and its message in words.

import type * as S from "./api-schema";
import type {
  AuditPage,
  Automation,
  AutomationRun,
  AutomationTrigger,
  Changes,
  NetworkSummary,
  Conversation,
  ConversationPage,
  DeliveryAttempt,
  Files,
  HalyardEvent,
  ImageData,
  Invitation,
  Me,
  MemberList,
  NewAutomation,
  Org,
  OrgSettings,
  PriceRow,
  Sandbox,
  SandboxSpecs,
  ShareLink,
  SharedConversation,
  SlackLinkInfo,
  StartTask,
  UsageReport,
  Webhook,
} from "./types";

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** Called when the session has ended (401), so the app can show the sign-in page. */
let onSignedOut: () => void = () => {};
export function setSignedOutHandler(f: () => void) {
  onSignedOut = f;
}

/** One API call: `body` goes as JSON, `raw` (a file) as it is. */
async function call<T>(method: string, path: string, body?: unknown, raw?: Blob): Promise<T> {
  const headers: Record<string, string> = { accept: "application/json" };
  if (method !== "GET") headers["x-halyard-csrf"] = "1";
  if (body !== undefined) headers["content-type"] = "application/json";
  if (raw !== undefined) headers["content-type"] = "application/octet-stream";
  let res: Response;
  try {
    res = await fetch(`/api/v1${path}`, {
      method,
      headers,
      body: raw ?? (body === undefined ? undefined : JSON.stringify(body)),
      credentials: "same-origin",
    });
  } catch {
    throw new ApiError(0, "network", "The gateway cannot be reached. Check your connection; the page retries by itself.");
  }
  if (res.status === 204) return undefined as T;
  const text = await res.text();
  let json: unknown = undefined;
  try {
    json = text ? JSON.parse(text) : undefined;
  } catch {
    // Not JSON: a proxy's error page, say.
  }
  if (!res.ok) {
    const err = (json as { error?: { code?: string; message?: string } } | undefined)?.error;
    if (res.status === 401 && path !== "/session" && !path.startsWith("/shared/")) onSignedOut();
    throw new ApiError(res.status, err?.code ?? "http_" + res.status, err?.message ?? `The gateway answered ${res.status}.`);
  }
  return json as T;
}

const enc = encodeURIComponent;

const q = (params: Record<string, string | number | undefined>) => {
  const s = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== "") s.set(k, String(v));
  const str = s.toString();
  return str ? `?${str}` : "";
};

/** A list the API keeps by name under `path`: read whole, a member written whole or removed. */
function named<T, Body = unknown>(path: string) {
  return {
    list: () => call<{ items: T[] }>("GET", path),
    put: (name: string, body: Body) => call<T>("PUT", `${path}/${enc(name)}`, body),
    remove: (name: string) => call<void>("DELETE", `${path}/${enc(name)}`),
  };
}

/** Everything of organization `org`'s. */
function org(name: string) {
  const base = `/orgs/${enc(name)}`;
  const members = `${base}/members`;
  return {
    settings: () => call<OrgSettings>("GET", `${base}/settings`),
    putSettings: (body: Partial<OrgSettings>) => call<OrgSettings>("PUT", `${base}/settings`, body),
    budget: () => call<S.BudgetStatus>("GET", `${base}/budget`),
    llmProfiles: named<S.LlmProfile>(`${base}/llm-profiles`),
    secrets: named<S.Secret>(`${base}/secrets`),
    mcpServers: named<S.McpServer>(`${base}/mcp-servers`),
    /** Where the browser goes to sign in to the organization's http server for everyone. */
    mcpSignInUrl: (server: string) => `/api/v1${base}/mcp-servers/${enc(server)}/sign-in`,
    agents: named<S.AgentView>(`${base}/agents`),
    prices: named<PriceRow>(`${base}/prices`),
    members: () => call<MemberList>("GET", members),
    addMember: (user: string, role: string) => call<unknown>("POST", members, { user, role }),
    setRole: (user: string, role: string) => call<unknown>("PATCH", `${members}/${enc(user)}`, { role }),
    removeMember: (user: string) => call<void>("DELETE", `${members}/${enc(user)}`),
    conversations: () => call<{ items: Conversation[] }>("GET", `${base}/conversations`),
    auditPath: `${base}/audit`,
  };
}

export const api = {
  me: () => call<Me>("GET", "/me"),
  signIn: (apiKey: string) => call<unknown>("POST", "/session", { api_key: apiKey }),
  signOut: () => call<void>("DELETE", "/session"),
  /** Where the browser goes to sign in with the deployment's identity provider. */
  ssoStartUrl: (returnTo: string) => `/api/v1/auth/sso/start${q({ return_to: returnTo })}`,
  /** Where the browser goes to link a Slack account (Slack's sign-in, then back). */
  slackStartUrl: (code: string, runAsMe: boolean) => `/api/v1/auth/slack/start${q({ link: code, run_as_me: String(runAsMe) })}`,
  /** A recent sign-in, for a change that asks for one. */
  stepUp: (apiKey: string) => call<unknown>("POST", "/session/step-up", { api_key: apiKey }),
  sso: () => call<S.SsoStatus>("GET", "/auth/sso"),

  // A user's own configuration.
  llmProfiles: {
    ...named<S.LlmProfile>("/llm-profiles"),
    models: (name: string) => call<S.LlmModelList>("GET", `/llm-profiles/${enc(name)}/models`),
    test: (name: string) => call<S.ProfileTest>("POST", `/llm-profiles/${enc(name)}/test`),
  },
  secrets: named<S.Secret>("/secrets"),
  gitProviders: named<S.GitProvider>("/git-providers"),
  mcpServers: {
    ...named<S.McpServer>("/mcp-servers"),
    test: (name: string) => call<S.McpServerTest>("POST", `/mcp-servers/${enc(name)}/test`),
    /** Where the browser goes to sign in to an http server with OAuth (it comes back to Settings). */
    signInUrl: (name: string) => `/api/v1/mcp-servers/${enc(name)}/sign-in`,
    signOut: (name: string) => call<void>("DELETE", `/mcp-servers/${enc(name)}/sign-in`),
  },
  /** The agents conversations may name; administrators register and remove the deployment's. */
  agents: named<S.AgentView>("/agents"),
  agentLogins: named<S.AgentLoginView, { credential: string }>("/me/agent-logins"),
  settings: () => call<Record<string, unknown>>("GET", "/settings"),
  putSettings: (body: Record<string, unknown>) => call<unknown>("PUT", "/settings", body),
  keys: () => call<{ items: S.ApiKey[] }>("GET", "/me/keys"),
  createKey: (name: string, scope: string) => call<S.ApiKey>("POST", "/me/keys", { name, scope }),
  revokeKey: (id: string) => call<void>("DELETE", `/me/keys/${enc(id)}`),
  /** What the user's git providers reach (`provider`: one of them only). */
  repositories: (p: { q?: string; provider?: string }) => call<S.RepositoryList>("GET", `/repositories${q(p)}`),
  branches: (provider: string, repository: string) => call<S.Branches>("GET", `/repositories/branches${q({ provider, repository })}`),
  usage: (groupBy: "day" | "model", from?: string) => call<UsageReport>("GET", `/me/usage${q({ group_by: groupBy, from })}`),
  usageCsvUrl: (from?: string) => `/api/v1/me/usage${q({ format: "csv", from })}`,

  // Organizations.
  orgs: () => call<{ items: Org[] }>("GET", "/orgs"),
  createOrg: (name: string) => call<Org>("POST", "/orgs", { name }),
  org,
  invitations: () => call<{ items: Invitation[] }>("GET", "/me/invitations"),
  answerInvitation: (orgName: string, how: "accept" | "decline") => call<unknown>("POST", `/me/invitations/${enc(orgName)}/${how}`, {}),

  // Administration.
  users: () => call<{ items: S.User[] }>("GET", "/admin/users"),
  createUser: (name: string, admin: boolean) => call<S.User>("POST", "/admin/users", { name, admin }),
  patchUser: (name: string, body: { admin?: boolean; disabled?: boolean }) => call<S.User>("PATCH", `/admin/users/${enc(name)}`, body),
  userKeys: (name: string) => call<{ items: S.ApiKey[] }>("GET", `/admin/users/${enc(name)}/keys`),
  createUserKey: (name: string, label: string) => call<S.ApiKey>("POST", `/admin/users/${enc(name)}/keys`, { name: label }),
  revokeAnyKey: (id: string) => call<void>("DELETE", `/admin/keys/${enc(id)}`),
  usageByUser: (from?: string) => call<UsageReport>("GET", `/admin/usage${q({ group_by: "user", from })}`),
  /** Who waits for a sandbox, in the order they will be placed, and each host's room. */
  queue: () => call<S.QueueView>("GET", "/admin/queue"),
  putShare: (org: string, body: { weight?: number; priority?: number; max_running?: number }) => call<S.OrgShare>("PUT", `/admin/queue/shares/${enc(org)}`, body),
  resetShare: (org: string) => call<void>("DELETE", `/admin/queue/shares/${enc(org)}`),
  /** The audit trail at `path` (`/admin/audit` or an organization's), a page of it. */
  audit: (path: string, p: { actor?: string; action?: string; cursor?: string }) => call<AuditPage>("GET", `${path}${q({ ...p, limit: 50 })}`),
  auditJsonlUrl: (path: string, p: { actor?: string; action?: string }) => `/api/v1${path}${q({ ...p, format: "jsonl" })}`,

  conversations: (p: { q?: string; state?: string; cursor?: string; limit?: number }) =>
    call<ConversationPage>("GET", `/conversations${q(p)}`),
  conversation: (id: string) => call<Conversation>("GET", `/conversations/${id}`),
  start: (body: S.StartConversation & { attempts?: undefined }) => call<StartTask>("POST", "/conversations", body),
  /** A start run `attempts` (2 to 8) times side by side: the group, a batch of one item. */
  startAttempts: (body: S.StartConversation & { attempts: number }) => call<S.BatchView>("POST", "/conversations", body),
  /** Your stored starts with `{{parameters}}`. */
  templates: () => call<S.TemplateList>("GET", "/templates"),
  task: (id: string) => call<StartTask>("GET", `/start-tasks/${id}`),
  cancelStart: (id: string) => call<StartTask>("DELETE", `/start-tasks/${id}`),
  retry: (id: string) => call<StartTask>("POST", `/conversations/${id}/retry`),
  fork: (id: string, atSeq: number) => call<StartTask>("POST", `/conversations/${id}/fork`, { at_seq: atSeq }),
  restore: (id: string, atSeq: number) => call<unknown>("POST", `/conversations/${id}/restore`, { at_seq: atSeq }),
  rename: (id: string, title: string) => call<Conversation>("PATCH", `/conversations/${id}`, { title }),
  setVisibility: (id: string, visibility: "private" | "org") => call<Conversation>("PATCH", `/conversations/${id}`, { visibility }),
  remove: (id: string) => call<void>("DELETE", `/conversations/${id}`),
  send: (id: string, text: string, images: ImageData[] = []) =>
    call<unknown>("POST", `/conversations/${id}/messages`, images.length ? { text, images } : { text }),
  pause: (id: string) => call<unknown>("POST", `/conversations/${id}/pause`),
  resume: (id: string) => call<unknown>("POST", `/conversations/${id}/resume`),
  interrupt: (id: string) => call<unknown>("POST", `/conversations/${id}/interrupt`),
  confirm: (id: string) => call<unknown>("POST", `/conversations/${id}/confirm`),
  reject: (id: string, reason: string) => call<unknown>("POST", `/conversations/${id}/reject`, { reason }),
  hooksConsent: (id: string, sha256: string, allow: boolean) => call<unknown>("POST", `/conversations/${id}/hooks-consent`, { sha256, allow }),
  /** The WebSocket of a conversation's events (or a share link's), from after `afterSeq`. */
  eventsSocketUrl: (where: { conversation?: string; shareToken?: string }, afterSeq: number) => {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const root = where.shareToken ? `/api/v1/shared/${where.shareToken}` : `/api/v1/conversations/${where.conversation}`;
    return `${scheme}://${location.host}${root}/events/ws${q({ after_seq: afterSeq })}`;
  },
  /** The WebSocket of the user's own terminal in the sandbox. */
  terminalSocketUrl: (id: string) => `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/api/v1/conversations/${id}/terminal/ws`,
  events: (id: string, afterSeq: number, limit = 1000) =>
    call<{ items: HalyardEvent[]; has_more: boolean }>("GET", `/conversations/${id}/events${q({ after_seq: afterSeq, limit })}`),
  findEvents: (id: string, p: { q?: string; kind?: string; source?: string; after_seq?: number; limit?: number }) =>
    call<{ items: HalyardEvent[]; has_more: boolean; next_after_seq: number | null }>("GET", `/conversations/${id}/events${q(p)}`),
  countEvents: (id: string, p: { q?: string; kind?: string; source?: string }) =>
    call<{ count: number }>("GET", `/conversations/${id}/events/count${q(p)}`),
  /** Where the browser downloads the conversation (the session cookie goes with it). */
  exportUrl: (id: string, format: "jsonl" | "md") => `/api/v1/conversations/${id}/export?format=${format}`,
  changes: (id: string) => call<Changes>("GET", `/conversations/${id}/changes`),
  network: (id: string) => call<NetworkSummary>("GET", `/conversations/${id}/network`),
  upload: (id: string, path: string, file: Blob) =>
    call<{ path: string; size: number }>("PUT", `/conversations/${id}/files${q({ path })}`, undefined, file),
  /** Where the browser downloads one file, or the whole workspace (with the session cookie). */
  rawUrl: (id: string, path: string) => `/api/v1/conversations/${id}/files/raw${q({ path })}`,
  archiveUrl: (id: string) => `/api/v1/conversations/${id}/archive`,
  /** A screenshot of the agent's browser (an image the browser loads with the session cookie). */
  screenshotUrl: (id: string, screenshotId: string) => `/api/v1/conversations/${id}/screenshots/${screenshotId}`,
  /** A plot a Python cell displayed. */
  imageUrl: (id: string, imageId: string) => `/api/v1/conversations/${id}/images/${imageId}`,
  files: (id: string, path: string) => call<Files>("GET", `/conversations/${id}/files${q({ path })}`),
  openApp: (id: string, name: string) => call<{ url: string }>("POST", `/conversations/${id}/apps/${name}`),
  /** A single-use link to the sandbox's VS Code, on the apps proxy's origin (it starts it). */
  vscode: (id: string) => call<{ url: string }>("GET", `/conversations/${id}/vscode`),
  share: (id: string) => call<ShareLink>("POST", `/conversations/${id}/share`),
  shareState: (id: string) => call<{ shared: boolean; created_at: string | null }>("GET", `/conversations/${id}/share`),
  unshare: (id: string) => call<void>("DELETE", `/conversations/${id}/share`),

  // What a share link opens: no account, read only.
  shared: (token: string) => call<SharedConversation>("GET", `/shared/${token}`),
  sharedEvents: (token: string, afterSeq: number, limit = 1000) =>
    call<{ items: HalyardEvent[]; has_more: boolean }>("GET", `/shared/${token}/events${q({ after_seq: afterSeq, limit })}`),
  sharedChanges: (token: string) => call<Changes>("GET", `/shared/${token}/changes`),

  /** Your batches, newest first, each with its results table. */
  batches: () => call<S.BatchList>("GET", "/batches"),
  /** With `diff`: how much each item's and attempt's work changed, from its sandbox. */
  batch: (id: string, diff = false) => call<S.BatchView>("GET", `/batches/${enc(id)}${diff ? "?diff=true" : ""}`),
  /** `pause`, `resume`, `cancel` or `rerun` (its failed items run again). */
  batchAction: (id: string, action: string) => call<S.BatchView>("POST", `/batches/${enc(id)}/${enc(action)}`),
  batchCsvUrl: (id: string) => `/api/v1/batches/${enc(id)}?format=csv`,
  sandboxes: () => call<{ items: Sandbox[] }>("GET", "/sandboxes?limit=100"),
  /** Your environments and the deployment's; yours are set and removed here. */
  environments: () => call<S.EnvironmentList>("GET", "/environments"),
  putEnvironment: (name: string, body: S.EnvironmentUpdate) => call<S.EnvironmentView>("PUT", `/environments/${enc(name)}`, body),
  deleteEnvironment: (name: string) => call<void>("DELETE", `/environments/${enc(name)}`),
  /** Your snapshots, with what they take against your quota; deleting one makes the next start set up again. */
  snapshots: () => call<S.SnapshotList>("GET", "/environments/snapshots"),
  deleteSnapshot: (id: string) => call<void>("DELETE", `/environments/snapshots/${enc(id)}`),
  /** One scope's plugins (`me`, `deployment` or `@<org>`); for `me`, what a conversation gets now (in `org`). */
  plugins: (scope: string, org?: string) => call<S.ScopeView>("GET", `/plugins/${enc(scope)}${q({ org })}`),
  addMarketplace: (scope: string, body: S.AddMarketplace) => call<S.MarketplaceView>("POST", `/plugins/${enc(scope)}/marketplaces`, body),
  refreshMarketplace: (scope: string, name: string) =>
    call<S.MarketplaceView>("POST", `/plugins/${enc(scope)}/marketplaces/${enc(name)}/refresh`, {}),
  removeMarketplace: (scope: string, name: string) => call<void>("DELETE", `/plugins/${enc(scope)}/marketplaces/${enc(name)}`),
  installPlugin: (scope: string, body: S.Install) => call<S.InstalledView>("POST", `/plugins/${enc(scope)}/installed`, body),
  changePlugin: (scope: string, id: string, body: S.Change) => call<S.PluginState>("PATCH", `/plugins/${enc(scope)}/installed/${enc(id)}`, body),
  upgradePlugin: (scope: string, id: string) => call<S.InstalledView>("POST", `/plugins/${enc(scope)}/installed/${enc(id)}/upgrade`, {}),
  uninstallPlugin: (scope: string, id: string) => call<void>("DELETE", `/plugins/${enc(scope)}/installed/${enc(id)}`),
  sandbox: (id: string) => call<Sandbox>("GET", `/sandboxes/${id}`),
  specs: () => call<SandboxSpecs>("GET", "/sandbox-specs"),
  pauseSandbox: (id: string) => call<unknown>("POST", `/sandboxes/${id}/pause`),
  resumeSandbox: (id: string) => call<unknown>("POST", `/sandboxes/${id}/resume`),
  deleteSandbox: (id: string) => call<void>("DELETE", `/sandboxes/${id}`),

  webhooks: () => call<{ items: Webhook[] }>("GET", "/webhooks"),
  createWebhook: (body: { url: string; description?: string; event_kinds?: string[] }) => call<Webhook>("POST", "/webhooks", body),
  patchWebhook: (id: string, body: { enabled?: boolean }) => call<Webhook>("PATCH", `/webhooks/${id}`, body),
  rotateWebhook: (id: string) => call<Webhook>("POST", `/webhooks/${id}/rotate-secret`),
  deleteWebhook: (id: string) => call<void>("DELETE", `/webhooks/${id}`),
  automations: () => call<{ items: Automation[] }>("GET", "/automations"),
  createAutomation: (body: NewAutomation) => call<Automation>("POST", "/automations", body),
  patchAutomation: (id: string, body: { enabled?: boolean; name?: string; prompt?: string | null; trigger?: AutomationTrigger }) =>
    call<Automation>("PATCH", `/automations/${id}`, body),
  deleteAutomation: (id: string) => call<void>("DELETE", `/automations/${id}`),
  slackLink: (code: string) => call<SlackLinkInfo>("GET", `/slack-links/${code}`),
  linkSlack: (code: string, runAsMe: boolean) => call<SlackLinkInfo>("POST", `/slack-links/${code}`, { run_as_me: runAsMe }),
  automationRuns: (id: string) => call<{ items: AutomationRun[] }>("GET", `/automations/${id}/runs?limit=50`),
  deliveries: (id: string) => call<{ items: DeliveryAttempt[] }>("GET", `/webhooks/${id}/deliveries?limit=50`),
  retryDelivery: (id: string, delivery: string) => call<unknown>("POST", `/webhooks/${id}/deliveries/${delivery}/retry`),
};

/** The message of any error, in words. */
export function errorText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
