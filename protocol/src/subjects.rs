//! Every subject, stream, consumer and bucket name, in one place. Subjects go from broad to
//! narrow so wildcards select whole families: `halyard.events.>` is every conversation event,
//! `halyard.events.<conversation id>.*` one conversation's log, `halyard.events.*.<kind>` every
//! event of one kind. The kind is in the subject so that a consumer that wants one kind (the
//! title setter wants user messages) is sent only those by the server, instead of receiving,
//! decoding and acknowledging every event to throw most of them away.
//!
//! The streams and consumers are declared as data in `nats/` at the repository root; a test
//! checks that those files and these constants agree.

use crate::ids::{ConversationId, SandboxId, TaskId};

/// Conversation event logs.
pub const EVENTS_STREAM: &str = "HALYARD_EVENTS";
/// Lifecycle records (start tasks, sandboxes, conversations).
pub const SYSTEM_STREAM: &str = "HALYARD_SYSTEM";
/// Durable commands (work queue).
pub const COMMANDS_STREAM: &str = "HALYARD_COMMANDS";
/// Webhook delivery jobs, one subject per (subscription, conversation).
pub const DELIVERIES_STREAM: &str = "HALYARD_DELIVERIES";
/// Messages a service could not process, parked for inspection.
pub const DEAD_LETTER_STREAM: &str = "HALYARD_DEAD_LETTERS";

/// All conversation events.
pub const ALL_EVENTS: &str = "halyard.events.>";

/// A subject in the events stream that no event is ever appended to (no conversation is named
/// `none`): the callback fan-out's filter while no webhook subscription is enabled, so that the
/// server delivers it nothing.
pub const NO_EVENTS: &str = "halyard.events.none.none";
/// Every conversation's user messages (what the title setter reads).
pub const ALL_USER_MESSAGES: &str = "halyard.events.*.user_message";
/// All lifecycle records.
pub const ALL_SYSTEM: &str = "halyard.sys.>";
/// All sandbox records.
pub const ALL_SANDBOX_RECORDS: &str = "halyard.sys.sandbox.>";

/// Commands for the conversation manager.
pub const CONVERSATION_COMMANDS: &str = "halyard.cmd.conversation.>";
/// Commands for the sandbox supervisor.
pub const SANDBOX_COMMANDS: &str = "halyard.cmd.sandbox.>";
/// Commands for the agent runner.
pub const AGENT_COMMANDS: &str = "halyard.cmd.agent.>";
/// Commands for the title setter.
pub const TITLE_COMMANDS: &str = "halyard.cmd.title.>";
/// Commands for the automation service.
pub const AUTOMATION_COMMANDS: &str = "halyard.cmd.automation.>";
/// All delivery jobs.
pub const ALL_DELIVERIES: &str = "halyard.dlv.>";
/// All webhook delivery records.
pub const ALL_DELIVERY_RECORDS: &str = "halyard.sys.delivery.>";

/// Durable consumer of the conversation manager.
pub const CONVERSATION_CONSUMER: &str = "conversation-manager";
/// Durable consumer of the sandbox supervisor.
pub const SANDBOX_CONSUMER: &str = "sandbox-supervisor";
/// Durable consumer of the agent runner.
pub const AGENT_CONSUMER: &str = "agent-runner";

/// Durable consumer of the automation service's commands.
pub const AUTOMATION_CONSUMER: &str = "automations";
/// Durable consumer of the automation service on the event log: runs that end, whose summary goes
/// back to the forge thread that asked.
pub const AUTOMATION_SUMMARY_CONSUMER: &str = "automation-summaries";
/// Durable consumer of the automation service on the system stream: start tasks that failed,
/// whose thread hears why.
pub const AUTOMATION_START_FAILURE_CONSUMER: &str = "automation-start-failures";
/// Every conversation's run status changes (what the automation service reads).
pub const ALL_EXECUTION_STATUSES: &str = "halyard.events.*.execution_status";
/// Durable consumer of the title setter's commands.
pub const TITLE_COMMAND_CONSUMER: &str = "title-setter-commands";
/// Durable consumer of the title setter on the event log.
pub const TITLE_EVENT_CONSUMER: &str = "title-setter";
/// Durable consumer of the callback dispatcher on the event log (fan-out to jobs).
pub const CALLBACK_FANOUT_CONSUMER: &str = "callback-fanout";

/// Key-value bucket of the title setter: conversations it has named (or found named).
pub const TITLE_BUCKET: &str = "halyard_titles";

/// Key-value bucket of automations: `def.<id>` (the definition, its hook secret sealed) and
/// `tick.<id>` (the last schedule tick claimed, written with an expected revision so that one
/// automation service of many runs it).
pub const AUTOMATION_BUCKET: &str = "halyard_automations";

/// Key-value bucket of the hook requests already taken (`<automation id>.<hash of the delivery
/// id>`): a forge's retry of one is answered and starts nothing for as long as the bucket keeps
/// keys ([`HOOK_DELIVERY_DAYS`]).
pub const HOOK_DELIVERY_BUCKET: &str = "halyard_hook_deliveries";

/// How long a hook delivery id is remembered: longer than any forge retries.
pub const HOOK_DELIVERY_DAYS: u64 = 14;

/// The key of automation `id`'s definition in [`AUTOMATION_BUCKET`].
pub fn automation_key(id: &str) -> String {
    format!("def.{id}")
}

/// The key of automation `id`'s last claimed tick in [`AUTOMATION_BUCKET`].
pub fn automation_tick_key(id: &str) -> String {
    format!("tick.{id}")
}

/// The key of the conversation answering on one forge thread (`repository#number`) of automation
/// `id` in [`AUTOMATION_BUCKET`] (a digest: any repository name makes a valid key).
pub fn automation_thread_key(id: &str, thread_digest: &str) -> String {
    format!("thread.{id}.{thread_digest}")
}

/// The key of a Slack sign-in link's code (a random hex string), in [`AUTOMATION_BUCKET`].
pub fn automation_slack_link_key(code: &str) -> String {
    format!("slacklink.{code}")
}

/// The key of the forge thread conversation `conversation` answers on, in [`AUTOMATION_BUCKET`].
pub fn automation_conversation_key(conversation: crate::ConversationId) -> String {
    format!("conv.{conversation}")
}

/// A command for the automation service about automation `id`.
pub fn automation_command(id: &str) -> String {
    format!("halyard.cmd.automation.{id}")
}

/// Automation `id`'s run records.
pub fn automation_record(id: &str) -> String {
    format!("halyard.sys.automation.{id}")
}

/// Key-value bucket of webhook subscriptions (with their signing secrets).
pub const WEBHOOK_BUCKET: &str = "halyard_webhooks";

/// Key-value bucket of users and API keys (`user.<name>`, `key.<key id>`), which every gateway
/// watches: a revoked key is refused everywhere as soon as the change reaches it.
pub const AUTH_BUCKET: &str = "halyard_auth";

/// Where the record of an administrative action on a `target_kind` (`user`, `key`) goes.
pub fn audit_record(target_kind: &str) -> String {
    format!("halyard.sys.audit.{target_kind}")
}

/// Key-value bucket of each user's own configuration ([`crate::user`]): `settings.<user>`,
/// `llm.<user>`, `secrets.<user>`. Written by the gateways, read by the agent runner.
pub const USER_BUCKET: &str = "halyard_user";

/// The key of organization `org`'s LLM profiles ([`crate::user::UserLlmProfiles`]) in
/// [`USER_BUCKET`]; conversations name them [`crate::user::org_profile`].
pub fn org_llm_key(org: &str) -> String {
    format!("orgllm.{org}")
}

/// The key of organization `org`'s secrets ([`crate::user::UserSecrets`], sealed for the
/// organization) in [`USER_BUCKET`]: its members' conversations in it get them, masked.
pub fn org_secrets_key(org: &str) -> String {
    format!("orgsecrets.{org}")
}

/// The key of organization `org`'s git providers ([`crate::user::UserGitProviders`], tokens
/// sealed for the organization) in [`USER_BUCKET`]: a team's bot account, used where a member
/// has no provider of their own for the host.
pub fn org_git_key(org: &str) -> String {
    format!("orggit.{org}")
}

/// The key of organization `org`'s skills ([`crate::org::OrgSkills`]) in [`USER_BUCKET`]: loaded
/// into its members' conversations in it, after the deployment's and before the repository's.
pub fn org_skills_key(org: &str) -> String {
    format!("orgskills.{org}")
}

/// The key of a scope's marketplaces and plugins ([`crate::plugin::PluginSet`]) in
/// [`USER_BUCKET`]: `plugins.deployment`, `plugins.org.<org>` or `plugins.user.<user>`.
pub fn plugins_key(scope: &crate::plugin::Scope) -> String {
    use crate::plugin::Scope;
    match scope {
        Scope::Deployment => "plugins.deployment".into(),
        Scope::Org(org) => format!("plugins.org.{org}"),
        Scope::User(user) => format!("plugins.user.{user}"),
    }
}

/// The key of the plugin files whose SHA-256 is `sha256` ([`crate::plugin::PluginBundle`]) in
/// [`USER_BUCKET`]: written once, read by every conversation that recorded it.
pub fn plugin_bundle_key(sha256: &str) -> String {
    format!("plugins.bundle.{sha256}")
}

/// The key of organization `org`'s MCP servers ([`crate::user::UserMcpServers`]) in
/// [`USER_BUCKET`]: offered to its members' conversations in it.
pub fn org_mcp_key(org: &str) -> String {
    format!("orgmcp.{org}")
}

/// The key of organization `org`'s prices ([`crate::org::OrgPrices`]) in [`USER_BUCKET`].
pub fn org_price_key(org: &str) -> String {
    format!("orgprice.{org}")
}

/// The key of organization `org`'s monthly budgets ([`crate::org::OrgBudget`]) in
/// [`USER_BUCKET`]: what its settings say, kept where the agent runner reads.
pub fn org_budget_key(org: &str) -> String {
    format!("orgbudget.{org}")
}

/// The key of organization `org`'s outbound policy ([`crate::egress::EgressPolicy`]) in
/// [`USER_BUCKET`]: what its settings say, kept where the conversation manager reads.
pub fn org_egress_key(org: &str) -> String {
    format!("orgegress.{org}")
}

/// The key of organization `org`'s members ([`crate::org::OrgMembers`]) in [`USER_BUCKET`]:
/// copied from the accounts bucket on every change, where the agent runner and the conversation
/// manager read it to stop giving the organization's things to someone who left.
pub fn org_members_key(org: &str) -> String {
    format!("orgmembers.{org}")
}

/// The key of what organization `org` spent in `month` (`YYYY-MM`, [`crate::org::OrgSpend`]) in
/// [`USER_BUCKET`].
pub fn org_spend_key(org: &str, month: &str) -> String {
    format!("orgspend.{org}.{month}")
}

/// The key of conversation `id`'s share link (a salted hash of its secret) in [`USER_BUCKET`].
pub fn share_key(id: crate::ConversationId) -> String {
    format!("share.{id}")
}

/// The key of conversation `id`'s last checkpoint commit in [`USER_BUCKET`] (written by the
/// agent runner, outside the sandbox whose store the commit is in).
pub fn checkpoint_head_key(id: crate::ConversationId) -> String {
    format!("ckpt.{id}")
}

/// The key of the deployment's custom agents ([`crate::agents::CustomAgents`]) in
/// [`USER_BUCKET`], registered by its administrators.
pub const CUSTOM_AGENTS_KEY: &str = "agents";

/// The key of organization `org`'s custom agents ([`crate::agents::CustomAgents`]) in
/// [`USER_BUCKET`]: its members' conversations in it may have them (as `@<org>/<name>`).
pub fn org_agents_key(org: &str) -> String {
    format!("orgagents.{org}")
}

/// The key of `user`'s settings in [`USER_BUCKET`].
pub fn user_settings_key(user: &crate::UserId) -> String {
    format!("settings.{user}")
}

/// The key of `user`'s LLM profiles in [`USER_BUCKET`].
pub fn user_llm_key(user: &crate::UserId) -> String {
    format!("llm.{user}")
}

/// The key of `user`'s secrets in [`USER_BUCKET`].
pub fn user_secrets_key(user: &crate::UserId) -> String {
    format!("secrets.{user}")
}

/// The key of `user`'s git providers in [`USER_BUCKET`].
pub fn user_git_key(user: &crate::UserId) -> String {
    format!("git.{user}")
}

/// The key of `user`'s consents to repository hooks ([`crate::user::HookConsents`]) in
/// [`USER_BUCKET`].
pub fn user_hooks_key(user: &crate::UserId) -> String {
    format!("hooks.{user}")
}

/// The key of `user`'s subscription logins ([`crate::agents::AgentLogins`]) in [`USER_BUCKET`].
pub fn user_agent_logins_key(user: &crate::UserId) -> String {
    format!("agentlogins.{user}")
}

/// The key of `user`'s MCP servers in [`USER_BUCKET`].
pub fn user_mcp_key(user: &crate::UserId) -> String {
    format!("mcp.{user}")
}

/// The key of `user`'s OAuth sign-in to their MCP server `server`
/// ([`crate::user::McpSignIn`]) in [`USER_BUCKET`]: written by the gateway at sign-in and by
/// agent runners when they refresh its tokens.
pub fn mcp_sign_in_key(user: &crate::UserId, server: &str) -> String {
    format!("mcpoauth.{user}.{server}")
}

/// The key of organization `org`'s OAuth sign-in to its MCP server `server` (made by one of its
/// owners or admins, used in its members' conversations in it) in [`USER_BUCKET`].
pub fn org_mcp_sign_in_key(org: &str, server: &str) -> String {
    format!("orgmcpoauth.{org}.{server}")
}

/// The lease beside a sign-in's key (either of the two above) that one refresh of its tokens at a
/// time holds, across agent runners: the time it lapses, in Unix milliseconds.
pub fn mcp_sign_in_lease_key(sign_in_key: &str) -> String {
    format!("{sign_in_key}.lease")
}

/// Key-value bucket of agent run leases: which runner instance owns a live run.
pub const AGENT_LEASE_BUCKET: &str = "halyard_agent_leases";

/// Sandbox commands passed from the supervisor that pulled them to the supervisor hosting the
/// sandbox (core request/reply, answered like [`agent_node`]).
pub fn sandbox_host(node: &str) -> String {
    format!("halyard.sbx.{node}")
}

/// Agent commands passed from the runner that pulled them to the runner holding the
/// conversation's run lease (core request/reply; the answer is empty when the command was
/// applied, else the reason to try again).
pub fn agent_node(node: &str) -> String {
    format!("halyard.run.{node}")
}

/// Questions about conversations, answered by an agent runner (core request/reply, queue group
/// [`ASK_QUEUE`]): nothing is stored, nothing appended.
pub const ALL_ASKS: &str = "halyard.ask.>";
/// Where a user's MCP server is tested (request/reply), and the agent runners' queue for it.
pub const MCP_TEST: &str = "halyard.mcptest";
pub const MCP_TEST_QUEUE: &str = "agent-mcp-test";
/// The queue group agent runners answer questions in.
pub const ASK_QUEUE: &str = "agent-ask";

/// Where a question about conversation `id` is asked.
pub fn ask(id: ConversationId) -> String {
    format!("halyard.ask.{id}")
}

/// Where the agent runner publishes the pieces of conversation `id`'s answer as the model writes
/// them (core NATS, nothing stored: [`crate::event::AnswerDelta`]).
pub fn answer_deltas(id: ConversationId) -> String {
    format!("halyard.delta.{id}")
}

/// Where the text so far of conversation `id`'s answer is asked for (core request/reply; the
/// runner that holds the run answers, others stay silent; no answer: none is being written).
pub fn answer_so_far(id: ConversationId) -> String {
    format!("halyard.sofar.{id}")
}

/// Every conversation's [`answer_so_far`] subject, which each agent runner listens on.
pub const ALL_ANSWERS_SO_FAR: &str = "halyard.sofar.*";

/// The object store bucket of the browser's screenshots (PNG), outside the event log: an
/// observation carries only a [`image_object`]'s id.
pub const IMAGE_BUCKET: &str = "halyard_images";

/// The name of one screenshot in [`IMAGE_BUCKET`]: under its conversation, which deletes
/// it with itself.
pub fn image_object(conversation: ConversationId, screenshot_id: &str) -> String {
    format!("{conversation}/{screenshot_id}")
}

/// One conversation's event log: the filter for all of its events, whatever their kind.
pub fn conversation_events(id: ConversationId) -> String {
    format!("halyard.events.{id}.*")
}

/// The subject an event of `kind` (see [`crate::event::EventBody::kind`]) of conversation `id` is
/// published on.
pub fn event_subject(id: ConversationId, kind: &str) -> String {
    format!("halyard.events.{id}.{kind}")
}

/// A start task's records.
pub fn task_record(id: TaskId) -> String {
    format!("halyard.sys.task.{id}")
}

/// A sandbox's records.
pub fn sandbox_record(id: SandboxId) -> String {
    format!("halyard.sys.sandbox.{id}")
}

/// The runtime-image record of a sandbox spec.
pub fn image_record(spec: &str) -> String {
    format!("halyard.sys.image.{spec}")
}

/// The warm-pool record of a sandbox spec.
pub fn pool_record(spec: &str) -> String {
    format!("halyard.sys.pool.{spec}")
}

/// A conversation's existence records (created, deleted).
pub fn conversation_record(id: ConversationId) -> String {
    format!("halyard.sys.conversation.{id}")
}

/// A conversation's tags as their owner last set them (beside its lifecycle records, so that
/// the last of those is still its creation or deletion).
pub fn conversation_tags(id: ConversationId) -> String {
    format!("halyard.sys.conversation.{id}.tags")
}

/// Who may read a conversation besides its owner, as its owner last set it.
pub fn conversation_visibility(id: ConversationId) -> String {
    format!("halyard.sys.conversation.{id}.visibility")
}

/// A command for the conversation manager about one conversation.
pub fn conversation_command(id: ConversationId) -> String {
    format!("halyard.cmd.conversation.{id}")
}

/// A command for the sandbox supervisor about one sandbox.
pub fn sandbox_command(id: SandboxId) -> String {
    format!("halyard.cmd.sandbox.{id}")
}

/// A command for the agent runner about one conversation.
pub fn agent_command(id: ConversationId) -> String {
    format!("halyard.cmd.agent.{id}")
}

/// Where the sandbox supervisor's egress proxy sends a refused connection of conversation `id`
/// (`record_network_blocked`): the sandbox role may publish here and nowhere else among agent
/// commands, and the agent runner takes no other command from here.
pub fn agent_network_command(id: ConversationId) -> String {
    format!("halyard.cmd.agent.{id}.{NETWORK_SUFFIX}")
}

/// The last token of [`agent_network_command`]'s subjects.
pub const NETWORK_SUFFIX: &str = "network";

/// A command for the title setter about one conversation.
pub fn title_command(id: ConversationId) -> String {
    format!("halyard.cmd.title.{id}")
}

/// How many delivery lanes each webhook subscription has. A conversation's jobs always go to
/// the same lane and a lane delivers one job at a time, so order holds per subscription and
/// conversation while one endpoint that receives every conversation gets this many requests
/// at once. Changing it re-maps conversations to lanes, so it is fixed here.
pub const DELIVERY_LANES: u32 = 8;

/// The lane of a conversation's delivery jobs (its id's low bits: v7 ids end in random bits).
pub fn delivery_lane(conversation: ConversationId) -> u32 {
    (conversation.0.as_u128() % u128::from(DELIVERY_LANES)) as u32
}

/// Delivery jobs of one subscription for one conversation.
pub fn delivery_job(webhook: &str, conversation: ConversationId) -> String {
    format!("halyard.dlv.{webhook}.{}.{conversation}", delivery_lane(conversation))
}

/// Delivery jobs of one subscription, every lane.
pub fn delivery_jobs_of(webhook: &str) -> String {
    format!("halyard.dlv.{webhook}.>")
}

/// Delivery jobs of one lane of one subscription.
pub fn delivery_lane_jobs(webhook: &str, lane: u32) -> String {
    format!("halyard.dlv.{webhook}.{lane}.*")
}

/// Delivery attempt records of one subscription.
pub fn delivery_record(webhook: &str) -> String {
    format!("halyard.sys.delivery.{webhook}")
}

/// Records about one subscription (disabled...).
pub fn webhook_record(webhook: &str) -> String {
    format!("halyard.sys.webhook.{webhook}")
}

/// Where a service parks a message it cannot process.
pub fn dead_letter(service: &str) -> String {
    format!("halyard.dlq.{service}")
}
