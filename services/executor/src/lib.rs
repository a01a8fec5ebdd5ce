//! The executor: a small HTTP server that runs inside a sandbox and carries out the agent's
//! actions there. It owns the agent's persistent shells (the main one, and one per helper
//! conversation working beside it: [`shell`]) and a file editor
//! ([`editor`]), and answers only requests that carry the sandbox's session key. It holds no
//! other secret and talks to nothing but its caller: it never sees the bus or an LLM key.
//!
//! Routes: `GET /health` (open: liveness, workspace, and `idle_ms` since the last shell or file
//! request, for the supervisor's hibernation and idle pause), `POST /shell/exec`, `POST /files/edit`, `POST
//! /files/glob`, `/files/grep` and `/files/patch` (the agent's file tools, [`files`]), `POST /browser` (the
//! agent's browser tools, [`runtimes::browser`]), `POST /ipython` (a cell in the Python kernel,
//! [`runtimes::kernel`]), `POST /vscode` and `/vscode/…` (the user's VS Code, started and reached,
//! [`runtimes::vscode`]), `/ports/<n>/…` (an app on a forwarded port, [`runtimes::ports`]), `POST
//! /hooks/run` (a repository hook's command, [`hooks`]), `GET
//! /files` and `GET /changes` (browsing and what changed, [`workspace`]), `POST /checkpoint` and
//! `POST /restore` (the workspace kept after each action and put back, [`checkpoint`]), `GET
//! /checkpoint/bundle` and `POST /checkpoint/unbundle` (checkpoints carried to a fork), `GET /mcp/stdio` (a
//! WebSocket to an MCP server run in the sandbox, [`mcp`]), `GET /git/proxy` (a WebSocket
//! git's requests for the conversation's repository travel over, [`git_proxy`]), `GET
//! /acp/stdio` and `GET /llm/relay` (a third-party agent's stdio and its LLM calls, [`acp`])
//! and `POST /session-key` (replaces the key; a warm-pool sandbox is handed to its new owner so).
//!
//! Inside: [`routes`] is the HTTP surface over the modules below it; [`error`] and [`config`]
//! are the ground every module stands on.

pub mod acp;
pub mod checkpoint;
pub mod config;
pub mod disk;
pub mod error;
pub mod files;
pub mod git_proxy;
pub mod hooks;
pub mod limits;
pub mod mcp;
pub mod network;
mod private;
pub mod relay;
mod routes;
pub mod runtimes;
pub mod shell;
pub mod tunnel;
pub mod workspace;

pub use config::ExecutorConfig;
pub use error::ExecutorError;
pub use routes::{app, bind, serve};
