#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Golden fixtures: the exact MessagePack bytes of one message of every kind. A change to the
//! wire format fails here; if it is intended, regenerate with `HALYARD_BLESS=1 cargo test -p
//! halyard-protocol` and say so in the commit (and in `protocol/README.md`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use halyard_protocol::accounts::{ApiKeyRecord, AuditRecord, KeyScope, UserAccount};
use halyard_protocol::automation::{AutomationCommand, AutomationRun, RunOutcome};
use halyard_protocol::command::{AgentCommand, AskAnswer, AskRequest, ConversationCommand, SandboxCommand};
use halyard_protocol::event::{
    Budget, ConfirmationPolicy, ConversationEvent, EventBody, EventSource, ExecutionStatus, Image, McpServerStatus, SecurityRisk, Skill,
    SkillKind, SubConversation, TaskItem, TaskStatus, ThinkingBlock, TitleSource,
};
use halyard_protocol::queue::{QueueTerms, StartClass};
use halyard_protocol::system::{
    ExposedUrl, ForkSource, ImageOutcome, ParentLink, Repository, SandboxImage, SandboxStatus, SandboxUpdate, StartRequest,
    StartTaskStatus, StartTaskUpdate, SystemRecord,
};
use halyard_protocol::{CommandId, ConversationId, Envelope, EventId, SandboxId, TaskId, TraceContext, UserId, decode, encode};
use serde::Serialize;
use serde::de::DeserializeOwned;
use uuid::Uuid;

const T: i64 = 1_795_000_000_000;

fn id(n: u128) -> Uuid {
    Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0000 | n)
}

fn env<P>(n: u128, kind: &str, payload: P) -> Envelope<P> {
    Envelope {
        v: 1,
        id: CommandId(id(n)),
        kind: kind.into(),
        time_ms: T,
        correlation_id: Some(id(900).to_string()),
        causation_id: None,
        trace: Some(TraceContext { traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into() }),
        payload,
    }
}

fn event(seq: u64, body: EventBody) -> ConversationEvent {
    ConversationEvent {
        seq,
        id: EventId(id(100 + seq as u128)),
        conversation_id: ConversationId(id(1)),
        source: EventSource::Agent,
        timestamp_ms: T,
        body,
    }
}

fn check<P: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(name: &str, value: Envelope<P>) {
    let bytes = encode(&value).unwrap();
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(format!("{name}.msgpack"));
    if std::env::var_os("HALYARD_BLESS").is_some() {
        std::fs::write(&path, &bytes).unwrap();
    }
    let golden = std::fs::read(&path).unwrap_or_else(|_| panic!("missing fixture {}; run with HALYARD_BLESS=1", path.display()));
    assert_eq!(bytes, golden, "wire format of {name} changed");
    let back: Envelope<P> = decode(&golden).unwrap();
    assert_eq!(back, value, "{name} does not round-trip");
}

#[test]
fn events_are_stable() {
    let cases: Vec<(&str, ConversationEvent)> = vec![
        ("event_result", event(9, EventBody::Result { result: serde_json::json!({"files_changed": 2, "summary": "fixed the parser"}) })),
        (
            "event_verification",
            event(
                10,
                EventBody::Verification {
                    attempt: 1,
                    check: "command".into(),
                    subject: "cargo test".into(),
                    passed: false,
                    score: 0.0,
                    output: "test parser::empty ... FAILED".into(),
                    sent_back: true,
                },
            ),
        ),
        (
            "event_conversation_started",
            event(
                1,
                EventBody::ConversationStarted {
                    plugins: vec![],
                    agent: None,
                    checks: None,
                    owner: UserId("alice".into()),
                    sandbox_id: SandboxId(id(2)),
                    workspace: "/workspace".into(),
                    model: "gpt-4o".into(),
                    skills: vec![Skill::always("AGENTS.md", "Be brief.")],
                    budget: None,
                    confirmation_policy: ConfirmationPolicy::Never,
                    llm_profile: None,
                    secrets: None,
                    repository: None,
                    forked_from: None,
                    parent: None,
                    org: None,
                },
            ),
        ),
        (
            "event_conversation_started_fork",
            event(
                1,
                EventBody::ConversationStarted {
                    plugins: vec![],
                    agent: None,
                    checks: None,
                    owner: UserId("alice".into()),
                    sandbox_id: SandboxId(id(2)),
                    workspace: "/workspace".into(),
                    model: "gpt-4o".into(),
                    skills: Vec::new(),
                    budget: None,
                    confirmation_policy: ConfirmationPolicy::Never,
                    llm_profile: None,
                    secrets: None,
                    repository: None,
                    forked_from: Some(ForkSource { conversation_id: ConversationId(id(7)), sandbox_id: SandboxId(id(8)), at_seq: 12 }),
                    parent: None,
                    org: None,
                },
            ),
        ),
        (
            "event_conversation_started_budget",
            event(
                1,
                EventBody::ConversationStarted {
                    plugins: vec![],
                    agent: None,
                    checks: None,
                    owner: UserId("alice".into()),
                    sandbox_id: SandboxId(id(2)),
                    workspace: "/workspace".into(),
                    model: "gpt-4o".into(),
                    skills: Vec::new(),
                    budget: Some(Budget { max_budget_usd: Some(2.5), max_tokens: Some(200_000) }),
                    confirmation_policy: ConfirmationPolicy::Never,
                    llm_profile: None,
                    secrets: None,
                    repository: None,
                    forked_from: None,
                    parent: None,
                    org: None,
                },
            ),
        ),
        (
            "event_conversation_started_skills",
            event(
                1,
                EventBody::ConversationStarted {
                    plugins: vec![],
                    agent: None,
                    checks: None,
                    owner: UserId("alice".into()),
                    sandbox_id: SandboxId(id(2)),
                    workspace: "/workspace".into(),
                    model: "claude-sonnet-4-5".into(),
                    skills: vec![
                        Skill {
                            name: "docker".into(),
                            content: "Use `docker compose`.".into(),
                            kind: SkillKind::Knowledge,
                            triggers: vec!["docker".into(), "container".into()],
                            description: None,
                        },
                        Skill {
                            name: "pdf".into(),
                            content: "Use pdftotext.".into(),
                            kind: SkillKind::AgentSkill,
                            triggers: Vec::new(),
                            description: Some("Read and write PDF files.".into()),
                        },
                    ],
                    budget: None,
                    confirmation_policy: ConfirmationPolicy::Risky,
                    llm_profile: None,
                    secrets: None,
                    repository: None,
                    forked_from: None,
                    parent: None,
                    org: None,
                },
            ),
        ),
        (
            "event_action_risky",
            event(
                11,
                EventBody::Action {
                    tool_call_id: "call_2".into(),
                    tool: "terminal".into(),
                    arguments: serde_json::json!({"command": "sudo rm -rf /etc", "security_risk": "low"}),
                    thought: None,
                    security_risk: Some(SecurityRisk::High),
                },
            ),
        ),
        (
            "event_action_rejected",
            event(12, EventBody::ActionRejected { tool_call_id: "call_2".into(), tool: "terminal".into(), reason: "Not /etc.".into() }),
        ),
        ("event_confirmation_policy", event(13, EventBody::ConfirmationPolicy { policy: ConfirmationPolicy::Always })),
        (
            "event_execution_status_waiting",
            event(14, EventBody::ExecutionStatus { status: ExecutionStatus::WaitingForConfirmation, reason: None }),
        ),
        (
            "event_condensation",
            event(
                15,
                EventBody::Condensation {
                    from_seq: 3,
                    upto_seq: 120,
                    summary: "Created hello.py; tests pass.".into(),
                    tokens_before: 90_000,
                    tokens_after: 12_000,
                },
            ),
        ),
        ("event_skill_activated", event(16, EventBody::SkillActivated { name: "docker".into(), trigger: "docker".into() })),
        ("event_llm_profile", event(17, EventBody::LlmProfile { profile: Some("fast".into()), model: "gpt-4o-mini".into() })),
        ("event_terminal_opened", event(19, EventBody::TerminalOpened { by: UserId("alice".into()) })),
        (
            "event_network_blocked",
            event(
                19,
                EventBody::NetworkBlocked {
                    host: "other.test".into(),
                    port: 443,
                    rule: "not in the allow list (environment web)".into(),
                    message: "The sandbox may not reach other.test:443: not in the allow list (environment web).".into(),
                },
            ),
        ),
        (
            "event_network_used",
            event(
                19,
                EventBody::NetworkUsed {
                    destinations: vec![halyard_protocol::egress::NetworkUse {
                        host: "registry.test".into(),
                        port: 443,
                        connections: 3,
                        bytes_sent: 1_840,
                        bytes_received: 524_288,
                    }],
                },
            ),
        ),
        (
            "event_pull_request_opened",
            event(
                22,
                EventBody::PullRequestOpened {
                    number: 7,
                    url: "https://github.com/alice/app/pull/7".into(),
                    title: Some("Fix the typo".into()),
                },
            ),
        ),
        (
            "event_hook",
            event(
                21,
                EventBody::Hook {
                    event: "pre_tool_use".into(),
                    command: "bash .openhands/guard.sh".into(),
                    tool_call_id: Some("call_7".into()),
                    tool: Some("terminal".into()),
                    message_seq: None,
                    exit_code: Some(2),
                    stdout: String::new(),
                    stderr: "rm -rf is not allowed here\n".into(),
                    blocked: true,
                },
            ),
        ),
        (
            "event_task_list",
            event(
                20,
                EventBody::TaskList {
                    items: vec![
                        TaskItem { title: "Read the failing test".into(), notes: String::new(), status: TaskStatus::Done },
                        TaskItem { title: "Fix the parser".into(), notes: "src/parse.rs".into(), status: TaskStatus::InProgress },
                        TaskItem { title: "Run the suite".into(), notes: String::new(), status: TaskStatus::Todo },
                    ],
                },
            ),
        ),
        (
            "event_thinking",
            event(
                21,
                EventBody::Thinking {
                    blocks: vec![
                        ThinkingBlock {
                            text: "The test fails on empty input.".into(),
                            signature: Some("EqQBCgIYAhIM".into()),
                            redacted: None,
                        },
                        ThinkingBlock { text: String::new(), signature: None, redacted: Some("EmwKAhgBEgy3va3p".into()) },
                    ],
                },
            ),
        ),
        (
            "event_sub_conversations_started",
            event(
                23,
                EventBody::SubConversationsStarted {
                    tool_call_id: "call_3".into(),
                    children: vec![
                        SubConversation { conversation_id: ConversationId(id(9)), title: "Tests".into() },
                        SubConversation { conversation_id: ConversationId(id(10)), title: "Docs".into() },
                    ],
                },
            ),
        ),
        (
            "event_sub_conversation_ended",
            event(
                24,
                EventBody::SubConversationEnded {
                    tool_call_id: "call_3".into(),
                    conversation_id: ConversationId(id(9)),
                    status: "finished".into(),
                    message: "Added 4 tests; all pass.".into(),
                    used_tokens: 5400,
                    used_usd: 0.0125,
                },
            ),
        ),
        ("event_workspace_restored", event(20, EventBody::WorkspaceRestored { at_seq: 7, checkpoint_seq: 6 })),
        (
            "event_budget_alert",
            event(
                21,
                EventBody::BudgetAlert {
                    org: "acme".into(),
                    user: Some(UserId("alice".into())),
                    percent: 80,
                    spent_usd: 40.5,
                    budget_usd: 50.0,
                    month: "2026-11".into(),
                },
            ),
        ),
        (
            "event_mcp_servers",
            event(
                18,
                EventBody::McpServers {
                    servers: vec![
                        McpServerStatus {
                            name: "time".into(),
                            transport: "stdio".into(),
                            tools: vec!["time__get_current_time".into(), "time__convert_time".into()],
                            error: None,
                        },
                        McpServerStatus {
                            name: "notes".into(),
                            transport: "http".into(),
                            tools: vec![],
                            error: Some("http://notes.example/mcp: connection refused".into()),
                        },
                    ],
                },
            ),
        ),
        (
            "event_mcp_auth_required",
            event(
                19,
                EventBody::McpAuthRequired {
                    server: "linear".into(),
                    sign_in_url: "https://halyard.example.com/settings?mcp_sign_in=linear".into(),
                },
            ),
        ),
        (
            "event_llm_call",
            event(
                10,
                EventBody::LlmCall {
                    model: "gpt-4o".into(),
                    profile: Some("fast".into()),
                    prompt_tokens: 1200,
                    completion_tokens: 85,
                    cached_tokens: 1024,
                    latency_ms: 830,
                    cost_usd: Some(0.00166),
                },
            ),
        ),
        (
            "event_user_message_command",
            event(
                2,
                EventBody::UserMessage {
                    text: "Review src/lib.rs for mistakes.".into(),
                    images: vec![],
                    command: Some("/review src/lib.rs".into()),
                },
            ),
        ),
        (
            "event_conversation_started_plugins",
            event(
                1,
                EventBody::ConversationStarted {
                    plugins: vec![halyard_protocol::plugin::PluginUse {
                        name: "kit".into(),
                        marketplace: "acme".into(),
                        version: Some("1.2.0".into()),
                        commit: "4b825dc642cb6eb9a060e54bf8d69288fbee4904".into(),
                        bundle: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08".into(),
                        scope: "org".into(),
                        required: true,
                    }],
                    agent: None,
                    checks: None,
                    owner: UserId("alice".into()),
                    sandbox_id: SandboxId(id(2)),
                    workspace: "/workspace".into(),
                    model: "gpt-4o".into(),
                    skills: vec![],
                    budget: None,
                    confirmation_policy: ConfirmationPolicy::Never,
                    llm_profile: None,
                    secrets: None,
                    repository: None,
                    forked_from: None,
                    parent: None,
                    org: Some("acme".into()),
                },
            ),
        ),
        ("event_user_message", event(2, EventBody::UserMessage { text: "Write hello.py".into(), images: vec![], command: None })),
        (
            "event_user_message_with_image",
            event(
                20,
                EventBody::UserMessage {
                    text: "What is wrong on this page?".into(),
                    images: vec![Image { media_type: "image/png".into(), data: "iVBORw0KGgo=".into() }],
                    command: None,
                },
            ),
        ),
        (
            "event_action",
            event(
                3,
                EventBody::Action {
                    tool_call_id: "call_1".into(),
                    tool: "terminal".into(),
                    arguments: serde_json::json!({"command": "ls -la", "timeout": 10}),
                    thought: Some("Look first.".into()),
                    security_risk: None,
                },
            ),
        ),
        (
            "event_observation",
            event(
                4,
                EventBody::Observation {
                    tool_call_id: "call_1".into(),
                    tool: "terminal".into(),
                    content: "total 0".into(),
                    exit_code: Some(0),
                    is_error: false,
                    url: None,
                    screenshot_id: None,
                    image_ids: Vec::new(),
                },
            ),
        ),
        (
            "event_observation_browser",
            event(
                4,
                EventBody::Observation {
                    tool_call_id: "call_2".into(),
                    tool: "browser_navigate".into(),
                    content: "Navigated to http://localhost:8000/ (Sign up)".into(),
                    exit_code: None,
                    is_error: false,
                    url: Some("http://localhost:8000/".into()),
                    screenshot_id: Some("0f5b3c2a9d8e4f6a8b7c6d5e4f3a2b1c".into()),
                    image_ids: Vec::new(),
                },
            ),
        ),
        (
            "event_observation_cell",
            event(
                4,
                EventBody::Observation {
                    tool_call_id: "call_3".into(),
                    tool: "execute_ipython_cell".into(),
                    content: "[1 image displayed]".into(),
                    exit_code: None,
                    is_error: false,
                    url: None,
                    screenshot_id: None,
                    image_ids: vec!["6a1f0c9e2b7d4e3f8a5b9c0d1e2f3a4b".into()],
                },
            ),
        ),
        ("event_agent_message", event(5, EventBody::AgentMessage { text: "Done.".into() })),
        ("event_agent_error", event(6, EventBody::AgentError { code: "llm_timeout".into(), message: "timed out".into() })),
        ("event_execution_status", event(7, EventBody::ExecutionStatus { status: ExecutionStatus::Finished, reason: None })),
        (
            "event_execution_status_stuck",
            event(
                9,
                EventBody::ExecutionStatus {
                    status: ExecutionStatus::Stuck,
                    reason: Some("the same action gave the same result 4 times in a row (terminal ls)".into()),
                },
            ),
        ),
        ("event_title", event(8, EventBody::Title { title: "Greeting script".into(), set_by: TitleSource::Generated })),
    ];
    for (name, ev) in cases {
        let kind = format!("event.{}", ev.body.kind());
        check(name, env(1, &kind, ev));
    }
}

#[test]
fn automations_are_stable() {
    check(
        "cmd_automation_hook",
        env(
            30,
            "cmd.automation.hook",
            AutomationCommand::Hook {
                automation_id: id(31).to_string(),
                delivery_id: "msg_p5jXN8AQM9LWM0D4loKWxJek".into(),
                received_ms: T,
                event: None,
                body: r#"{"title":"Flaky test"}"#.into(),
            },
        ),
    );
    check(
        "cmd_automation_hook_github",
        env(
            37,
            "cmd.automation.hook",
            AutomationCommand::Hook {
                automation_id: id(31).to_string(),
                delivery_id: "72d3162e-cc78-11e3-81ab-4c9367dc0958".into(),
                received_ms: T,
                event: Some("issue_comment".into()),
                body: r#"{"action":"created"}"#.into(),
            },
        ),
    );
    check("cmd_automation_tick", env(32, "cmd.automation.tick", AutomationCommand::Tick { automation_id: id(31).to_string(), tick_ms: T }));
    check(
        "sys_automation_run",
        env(
            33,
            "sys.automation_run",
            SystemRecord::AutomationRun(AutomationRun {
                run_id: id(34).to_string(),
                automation_id: id(31).to_string(),
                owner: UserId("alice".into()),
                time_ms: T,
                source: "webhook".into(),
                trigger: "delivery msg_p5jXN8AQM9LWM0D4loKWxJek".into(),
                outcome: RunOutcome::Started,
                conversation_id: Some(ConversationId(id(1))),
                reason: None,
            }),
        ),
    );
    check(
        "sys_automation_run_ignored",
        env(
            35,
            "sys.automation_run",
            SystemRecord::AutomationRun(AutomationRun {
                run_id: id(36).to_string(),
                automation_id: id(31).to_string(),
                owner: UserId("alice".into()),
                time_ms: T,
                source: "schedule".into(),
                trigger: "tick 2026-11-19T19:33:20.000Z".into(),
                outcome: RunOutcome::Ignored,
                conversation_id: None,
                reason: Some("the automation is disabled".into()),
            }),
        ),
    );
}

#[test]
fn records_are_stable() {
    check(
        "sys_conversation_tags",
        env(
            12,
            "sys.conversation_tags",
            SystemRecord::ConversationTags {
                conversation_id: ConversationId(id(1)),
                tags: BTreeMap::from([("ticket".into(), "ENG-43".into())]),
            },
        ),
    );
    check(
        "sys_audit",
        env(
            11,
            "sys.audit",
            SystemRecord::Audit(AuditRecord {
                actor: UserId("root-admin".into()),
                action: "key.revoke".into(),
                target: "3f9c2a7b1d0e".into(),
                detail: Some("user alice".into()),
                org: None,
                client: Some("127.0.0.1".into()),
                at_ms: T,
            }),
        ),
    );
    check(
        "auth_user",
        env(
            12,
            "auth.user",
            UserAccount {
                user: UserId("alice".into()),
                admin: false,
                disabled: true,
                created_ms: T,
                updated_ms: T + 1,
                sso_subject: None,
                email: None,
            },
        ),
    );
    check(
        "auth_key",
        env(
            13,
            "auth.key",
            ApiKeyRecord {
                id: "3f9c2a7b1d0e".into(),
                user: UserId("alice".into()),
                name: "laptop".into(),
                salt: "00112233445566778899aabbccddeeff".into(),
                hash: "ab".repeat(32),
                scope: KeyScope::ReadOnly,
                created_ms: T,
                expires_ms: Some(T + 86_400_000),
                revoked_ms: None,
                session: false,
                parent: None,
                verified_ms: None,
            },
        ),
    );
    check(
        "sys_start_task",
        env(
            2,
            "sys.start_task",
            SystemRecord::StartTask(StartTaskUpdate {
                task_id: TaskId(id(3)),
                owner: UserId("alice".into()),
                conversation_id: ConversationId(id(1)),
                status: StartTaskStatus::RunningSetupScript,
                detail: None,
                sandbox_id: Some(SandboxId(id(2))),
                from_pool: false,
                created_ms: T,
                snapshot: None,
            }),
        ),
    );
    let process_sandbox = SandboxUpdate {
        sandbox_id: SandboxId(id(2)),
        owner: UserId("alice".into()),
        conversation_id: Some(ConversationId(id(1))),
        sandbox_kind: "process".into(),
        status: SandboxStatus::Running,
        exposed_urls: vec![ExposedUrl { name: "AGENT_SERVER".into(), url: "http://127.0.0.1:40000".into() }],
        workspace: "/data/sandboxes/x/workspace".into(),
        detail: None,
        pid: Some(4242),
        container: None,
        volume: None,
        spec: None,
        from_pool: false,
        host: None,
        wake_queued_until: None,
        snapshot: None,
        runtime: None,
        shape: None,
    };
    check("sys_sandbox", env(3, "sys.sandbox", SystemRecord::Sandbox(process_sandbox.clone())));
    // A sandbox of one of several supervisors: its record names the host.
    check(
        "sys_sandbox_hosted",
        env(
            3,
            "sys.sandbox",
            SystemRecord::Sandbox(SandboxUpdate {
                exposed_urls: vec![ExposedUrl { name: "AGENT_SERVER".into(), url: "http://10.1.2.3:40000".into() }],
                host: Some("sandbox-b".into()),
                wake_queued_until: None,
                snapshot: None,
                runtime: None,
                shape: None,
                ..process_sandbox
            }),
        ),
    );
    check(
        "sys_sandbox_docker",
        env(
            3,
            "sys.sandbox",
            SystemRecord::Sandbox(SandboxUpdate {
                sandbox_id: SandboxId(id(2)),
                owner: UserId("alice".into()),
                conversation_id: Some(ConversationId(id(1))),
                sandbox_kind: "docker".into(),
                status: SandboxStatus::Paused,
                exposed_urls: vec![
                    ExposedUrl { name: "AGENT_SERVER".into(), url: "http://127.0.0.1:40000".into() },
                    ExposedUrl { name: "WORKER_1".into(), url: "http://127.0.0.1:40001".into() },
                ],
                workspace: "/workspace".into(),
                detail: Some("paused after 1800 s idle".into()),
                pid: None,
                container: Some("3f2a".into()),
                volume: Some("halyard-d-x".into()),
                spec: Some("default".into()),
                from_pool: true,
                host: None,
                wake_queued_until: None,
                snapshot: None,
                runtime: None,
                shape: None,
            }),
        ),
    );
    check(
        "sys_sandbox_image",
        env(
            3,
            "sys.sandbox_image",
            SystemRecord::SandboxImage(SandboxImage {
                spec: "default".into(),
                base_image: "halyard-base:bookworm".into(),
                image: "halyard-runtime:src-ab12".into(),
                lock_tag: "halyard-runtime:lock-cd34".into(),
                versioned_tag: "halyard-runtime:0.1.0-halyard-base_bookworm".into(),
                outcome: ImageOutcome::Reused,
                build_ms: 0,
            }),
        ),
    );
    check(
        "sys_conversation_created",
        env(
            4,
            "sys.conversation_created",
            SystemRecord::ConversationCreated {
                conversation_id: ConversationId(id(1)),
                owner: UserId("alice".into()),
                task_id: TaskId(id(3)),
                sandbox_id: SandboxId(id(2)),
                title: Some("t".into()),
                repository: Some(Repository { url: "https://example.com/r.git".into(), branch: Some("main".into()) }),
                created_ms: T,
                request: None,
            },
        ),
    );
    check(
        "sys_conversation_created_request",
        env(
            4,
            "sys.conversation_created",
            SystemRecord::ConversationCreated {
                conversation_id: ConversationId(id(1)),
                owner: UserId("alice".into()),
                task_id: TaskId(id(3)),
                sandbox_id: SandboxId(id(2)),
                title: None,
                repository: None,
                created_ms: T,
                request: Some(Box::new(StartRequest {
                    plugins: None,
                    agent: None,
                    checks: None,
                    message: Some("hi".into()),
                    spec: Some("small".into()),
                    budget: None,
                    confirmation_policy: Some(ConfirmationPolicy::Risky),
                    llm_profile: Some("fast".into()),
                    secrets: Some(vec!["GH_TOKEN".into()]),
                    fork: None,
                    parent: None,
                    tags: BTreeMap::from([("ticket".into(), "ENG-42".into())]),
                    org: None,
                    visibility: Default::default(),
                    environment: None,
                })),
            },
        ),
    );
}

#[test]
fn commands_are_stable() {
    check(
        "cmd_conversation_start",
        env(
            5,
            "cmd.conversation.start",
            ConversationCommand::Start {
                plugins: None,
                agent: None,
                checks: None,
                task_id: TaskId(id(3)),
                conversation_id: ConversationId(id(1)),
                owner: UserId("alice".into()),
                message: Some("hi".into()),
                repository: None,
                title: None,
                created_ms: T,
                spec: None,
                budget: None,
                confirmation_policy: None,
                llm_profile: None,
                secrets: None,
                fork: None,
                parent: None,
                tags: BTreeMap::new(),
                org: None,
                visibility: Default::default(),
                queue: Default::default(),
                environment: None,
            },
        ),
    );
    check(
        "cmd_conversation_start_helper",
        env(
            5,
            "cmd.conversation.start",
            ConversationCommand::Start {
                plugins: None,
                agent: None,
                checks: None,
                task_id: TaskId(id(3)),
                conversation_id: ConversationId(id(1)),
                owner: UserId("alice".into()),
                message: Some("Write the tests of parse.rs".into()),
                repository: None,
                title: Some("Tests".into()),
                created_ms: T,
                spec: None,
                budget: Some(Budget { max_budget_usd: Some(1.25), max_tokens: None }),
                confirmation_policy: None,
                llm_profile: None,
                secrets: None,
                fork: None,
                parent: Some(ParentLink {
                    agent: None,
                    conversation_id: ConversationId(id(7)),
                    sandbox_id: SandboxId(id(8)),
                    tool_call_id: "call_3".into(),
                    depth: 1,
                }),
                tags: BTreeMap::new(),
                org: None,
                visibility: Default::default(),
                queue: Default::default(),
                environment: None,
            },
        ),
    );
    check(
        "cmd_conversation_start_fork",
        env(
            5,
            "cmd.conversation.start",
            ConversationCommand::Start {
                plugins: None,
                agent: None,
                checks: None,
                task_id: TaskId(id(3)),
                conversation_id: ConversationId(id(1)),
                owner: UserId("alice".into()),
                message: None,
                repository: None,
                title: Some("Fix the build (fork)".into()),
                created_ms: T,
                spec: None,
                budget: None,
                confirmation_policy: None,
                llm_profile: None,
                secrets: None,
                fork: Some(ForkSource { conversation_id: ConversationId(id(7)), sandbox_id: SandboxId(id(8)), at_seq: 12 }),
                parent: None,
                tags: BTreeMap::from([("source".into(), "github".into()), ("issue".into(), "42".into())]),
                org: None,
                visibility: Default::default(),
                queue: Default::default(),
                environment: None,
            },
        ),
    );
    check(
        "cmd_conversation_set_tags",
        env(
            5,
            "cmd.conversation.set_tags",
            ConversationCommand::SetTags {
                conversation_id: ConversationId(id(1)),
                tags: BTreeMap::from([("ticket".into(), Some("ENG-43".into())), ("draft".into(), None)]),
            },
        ),
    );
    check(
        "cmd_sandbox_create",
        env(
            6,
            "cmd.sandbox.create",
            SandboxCommand::Create {
                sandbox_id: SandboxId(id(2)),
                owner: UserId("alice".into()),
                conversation_id: ConversationId(id(1)),
                spec: None,
                queue: Default::default(),
                snapshot: None,
            },
        ),
    );
    check(
        "cmd_sandbox_create_queued",
        env(
            6,
            "cmd.sandbox.create",
            SandboxCommand::Create {
                sandbox_id: SandboxId(id(2)),
                owner: UserId("alice".into()),
                conversation_id: ConversationId(id(1)),
                spec: None,
                queue: QueueTerms { class: StartClass::Automation, deadline_secs: Some(600), org: Some("acme".into()), asked_us: None },
                snapshot: None,
            },
        ),
    );
    check(
        "cmd_sandbox_create_spec",
        env(
            6,
            "cmd.sandbox.create",
            SandboxCommand::Create {
                sandbox_id: SandboxId(id(2)),
                owner: UserId("alice".into()),
                conversation_id: ConversationId(id(1)),
                spec: Some("python".into()),
                queue: Default::default(),
                snapshot: None,
            },
        ),
    );
    check(
        "cmd_sandbox_snapshot",
        env(
            6,
            "cmd.sandbox.snapshot",
            SandboxCommand::Snapshot {
                sandbox_id: SandboxId(id(2)),
                plan: halyard_protocol::environment::SnapshotPlan {
                    snapshot_id: id(7).to_string(),
                    owner: UserId("alice".into()),
                    org: Some("acme".into()),
                    environment: "@acme/web".into(),
                    repository: Some("https://git.example.com/acme/web.git".into()),
                    branch: None,
                    family: "f".repeat(64),
                    key: "k".repeat(64),
                    setup_secs: 21.5,
                    ttl_secs: 604_800,
                    pool_size: 2,
                    setup_log: "$ npm ci\nadded 812 packages\n".into(),
                },
            },
        ),
    );
    check(
        "cmd_sandbox_use_image",
        env(
            6,
            "cmd.sandbox.use_image",
            SandboxCommand::UseImage {
                sandbox_id: SandboxId(id(2)),
                plan: halyard_protocol::environment::ImagePlan {
                    image: None,
                    context: Some(".devcontainer".into()),
                    dockerfile: Some("Dockerfile".into()),
                    args: [("NODE_VERSION".to_owned(), "22".to_owned())].into(),
                    user: Some("node".into()),
                    env: [("APP_MODE".to_owned(), "development".to_owned())].into(),
                },
            },
        ),
    );
    check(
        "cmd_sandbox_shape",
        env(
            6,
            "cmd.sandbox.shape",
            SandboxCommand::Shape {
                sandbox_id: SandboxId(id(2)),
                shape: halyard_protocol::environment::Shape {
                    egress: Some("open".into()),
                    resources: halyard_protocol::environment::Resources { memory_mb: Some(1024), cpus: Some(0.5), pids_limit: None },
                    ports: vec![3000],
                    egress_rules: None,
                },
            },
        ),
    );
    check(
        "cmd_sandbox_shape_egress_rules",
        env(
            6,
            "cmd.sandbox.shape",
            SandboxCommand::Shape {
                sandbox_id: SandboxId(id(2)),
                shape: halyard_protocol::environment::Shape {
                    egress_rules: Some(halyard_protocol::egress::EgressRules::default().with(
                        "environment web",
                        Some(&halyard_protocol::egress::EgressPolicy {
                            allow: vec!["registry.test".into(), "*.corp.test".into()],
                            deny: vec!["*.bad.corp.test".into()],
                            mode: Some(halyard_protocol::egress::EgressMode::ReadOnly),
                        }),
                    )),
                    ..Default::default()
                },
            },
        ),
    );
    check(
        "ask_request",
        env(9, "ask.request", AskRequest { conversation_id: ConversationId(id(1)), question: "What did you change?".into() }),
    );
    check("ask_answer", env(10, "ask.answer", AskAnswer { answer: Some("hello.py".into()), code: None, message: None }));
    check("cmd_agent_confirm", env(11, "cmd.agent.confirm", AgentCommand::Confirm { conversation_id: ConversationId(id(1)) }));
    check(
        "cmd_agent_reject",
        env(12, "cmd.agent.reject", AgentCommand::Reject { conversation_id: ConversationId(id(1)), reason: "Not /etc.".into() }),
    );
    check(
        "cmd_agent_set_confirmation_policy",
        env(
            13,
            "cmd.agent.set_confirmation_policy",
            AgentCommand::SetConfirmationPolicy { conversation_id: ConversationId(id(1)), policy: ConfirmationPolicy::Risky },
        ),
    );
    check(
        "cmd_agent_set_llm_profile",
        env(
            14,
            "cmd.agent.set_llm_profile",
            AgentCommand::SetLlmProfile { conversation_id: ConversationId(id(1)), profile: Some("fast".into()) },
        ),
    );
    check("cmd_agent_interrupt", env(8, "cmd.agent.interrupt", AgentCommand::Interrupt { conversation_id: ConversationId(id(1)) }));
    check(
        "cmd_agent_record_terminal_opened",
        env(
            15,
            "cmd.agent.record_terminal_opened",
            AgentCommand::RecordTerminalOpened { conversation_id: ConversationId(id(1)), by: UserId("alice".into()) },
        ),
    );
    check(
        "cmd_agent_record_network_blocked",
        env(
            15,
            "cmd.agent.record_network_blocked",
            AgentCommand::RecordNetworkBlocked {
                conversation_id: ConversationId(id(1)),
                host: "other.test".into(),
                port: 443,
                rule: "not in the allow list (environment web)".into(),
            },
        ),
    );
    check(
        "cmd_agent_record_network_used",
        env(
            15,
            "cmd.agent.record_network_used",
            AgentCommand::RecordNetworkUsed {
                conversation_id: ConversationId(id(1)),
                destinations: vec![halyard_protocol::egress::NetworkUse {
                    host: "registry.test".into(),
                    port: 443,
                    connections: 1,
                    bytes_sent: 517,
                    bytes_received: 4_096,
                }],
            },
        ),
    );
    check("cmd_agent_restore", env(16, "cmd.agent.restore", AgentCommand::Restore { conversation_id: ConversationId(id(1)), at_seq: 7 }));
    check(
        "cmd_agent_user_message",
        env(
            7,
            "cmd.agent.user_message",
            AgentCommand::UserMessage { conversation_id: ConversationId(id(1)), text: "more".into(), images: vec![] },
        ),
    );
}

#[test]
fn readers_ignore_unknown_fields_and_reject_future_versions() {
    // An envelope from a newer writer with an extra field still decodes.
    #[derive(Serialize)]
    struct Newer<'a> {
        v: u16,
        id: String,
        kind: &'a str,
        time_ms: i64,
        payload: AgentCommand,
        added_later: bool,
    }
    let bytes = rmp_serde::to_vec_named(&Newer {
        v: 1,
        id: id(9).to_string(),
        kind: "cmd.agent.pause",
        time_ms: T,
        payload: AgentCommand::Pause { conversation_id: ConversationId(id(1)) },
        added_later: true,
    })
    .unwrap();
    let newer: Envelope<AgentCommand> = decode(&bytes).unwrap();
    assert_eq!(newer.payload, AgentCommand::Pause { conversation_id: ConversationId(id(1)) });
    // A future major version is refused with a clear error.
    let mut future = env(8, "cmd.agent.pause", AgentCommand::Pause { conversation_id: ConversationId(id(1)) });
    future.v = 2;
    let err = decode::<AgentCommand>(&encode(&future).unwrap()).unwrap_err();
    assert!(err.to_string().contains("unsupported envelope version 2"));
    // Garbage is an error, not a panic.
    assert!(decode::<AgentCommand>(b"\xc1\x00garbage").is_err());
}
