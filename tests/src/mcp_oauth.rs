//! An MCP server that wants OAuth sign-in, for the tests: the Python SDK's resource server
//! (`tests/servers/mcp_oauth_notes.py`) and its authorization server, npm's `oidc-provider`
//! (`tests/js/mcp-oauth-provider.mjs`: dynamic client registration, PKCE, resource indicators,
//! introspection, short-lived access tokens with refresh tokens).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::oidc::free_port;
use crate::python::PythonServer;

/// The client the MCP server introspects tokens as.
const INTROSPECTOR: &str = "notes-server";
const INTROSPECTOR_SECRET: &str = "notes-server-introspection-secret";

/// Both servers, running; stopped when dropped.
pub struct OAuthMcpServer {
    /// The authorization server.
    pub issuer: String,
    server: PythonServer,
    _provider: Process,
    tokens: PathBuf,
    _dir: tempfile::TempDir,
}

impl OAuthMcpServer {
    /// Starts the authorization server, handing out access tokens that live `ttl_secs`, and the
    /// MCP server it signs in to.
    pub async fn start(ttl_secs: u64) -> Self {
        Self::start_with(ttl_secs, "public").await
    }

    /// As [`Self::start`], with an authorization server that registers every client as a
    /// confidential one (with a secret it then requires), whatever the client asked.
    pub async fn confidential(ttl_secs: u64) -> Self {
        Self::start_with(ttl_secs, "confidential").await
    }

    async fn start_with(ttl_secs: u64, clients: &str) -> Self {
        let port = free_port();
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/js/mcp-oauth-provider.mjs");
        // (Held at once: a start that fails below still ends it.)
        let provider = Process(
            Command::new("node")
                .arg(script)
                .args([&port.to_string(), INTROSPECTOR, INTROSPECTOR_SECRET, &ttl_secs.to_string(), clients])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("node runs tests/js/mcp-oauth-provider.mjs (run tests/install-deps.sh)"),
        );
        let issuer = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        let metadata = format!("{issuer}/.well-known/oauth-authorization-server");
        while !reqwest::get(&metadata).await.is_ok_and(|r| r.status().is_success()) {
            assert!(Instant::now() < deadline, "the authorization server did not start (tests/js: npm ci)");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let dir = tempfile::tempdir().expect("a temporary folder");
        let tokens = dir.path().join("tokens.txt");
        let args = [issuer.as_str(), INTROSPECTOR, INTROSPECTOR_SECRET, tokens.to_str().expect("a UTF-8 path")];
        let server = PythonServer::start("mcp_oauth_notes.py", &args).await;
        Self { issuer, server, _provider: provider, tokens, _dir: dir }
    }

    /// The MCP server's endpoint.
    pub fn url(&self) -> String {
        self.server.mcp_url()
    }

    /// Every access token the MCP server accepted, in order.
    pub fn tokens(&self) -> Vec<String> {
        std::fs::read_to_string(&self.tokens).unwrap_or_default().lines().map(str::to_owned).collect()
    }
}

/// What the server's `whoami` tool answered in a conversation's `events`, in order.
pub fn whoami_answers(events: &[serde_json::Value]) -> Vec<String> {
    let answers = events.iter().filter(|e| e["kind"] == "observation" && e["tool"] == "notes__whoami");
    answers.map(|e| e["content"].as_str().expect("a tool's answer is text").to_owned()).collect()
}

/// Which distinct token a `whoami` answer names (`… with token #2`: 2).
pub fn token_number(answer: &str) -> u32 {
    answer.rsplit('#').next().and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("no token number in {answer:?}"))
}

/// A child process, ended when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
