//! The client side of the executor API (`halyard_protocol::executor`), used by every service
//! that acts inside a sandbox. It authenticates with the sandbox's session key, which it derives
//! from the deployment secret (see [`crate::keys`]).

use std::time::Duration;

use halyard_protocol::executor::{EditRequest, EditResponse, ErrorBody, ExecRequest, ExecResponse, Health, RotateKey, SESSION_KEY_HEADER};

/// How long a connection to an executor stays pooled unused. reqwest's default (90 s) kept one
/// per sandbox in every service that called it, about 9 KB each (hyper's dispatch channel), for
/// a minute and a half after its conversation went idle: a third of what a thousand idle
/// conversations cost. A new connection to an executor costs well under a millisecond.
pub const POOL_IDLE: Duration = Duration::from_secs(10);

/// A builder of the HTTP client a service calls executors with: connections unused for
/// [`POOL_IDLE`] are closed.
pub fn http_client() -> reqwest::ClientBuilder {
    reqwest::Client::builder().pool_idle_timeout(POOL_IDLE)
}

/// A message on an executor socket.
pub use tokio_tungstenite::tungstenite::Message as SocketMessage;

/// A socket to the executor.
pub type ExecutorSocket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Why an executor call failed.
#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    #[error("sandbox executor unreachable: {0}")]
    Unreachable(String),
    /// The executor refused the request; the message is meant for whoever asked (the agent).
    #[error("{message}")]
    Rejected { status: u16, code: String, message: String },
}

impl ExecutorError {
    /// An unreachable executor may come back (a restarting sandbox); a rejection will not.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Unreachable(_))
    }
}

/// The code of a refusal whose body is not the executor's JSON error.
const FOREIGN_ERROR: &str = "executor_error";

/// A client for one sandbox's executor.
#[derive(Clone, Debug)]
pub struct ExecutorClient {
    http: reqwest::Client,
    base: String,
    key: String,
}

impl ExecutorClient {
    pub fn new(http: reqwest::Client, base: impl Into<String>, key: String) -> Self {
        Self { http, base: base.into().trim_end_matches('/').to_owned(), key }
    }

    /// The executor's base URL (`http://host:port`).
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The sandbox's session key, for callers that open the executor's sockets themselves.
    pub fn session_key(&self) -> &str {
        &self.key
    }

    /// `GET /health` with a short timeout; `Ok` only if the executor answers healthy.
    pub async fn health(&self) -> Result<Health, ExecutorError> {
        let resp = self
            .http
            .get(format!("{}/health", self.base))
            .timeout(Duration::from_secs(2))
            .send()
            .await
            .map_err(|e| ExecutorError::Unreachable(e.to_string()))?;
        resp.json().await.map_err(|e| ExecutorError::Unreachable(e.to_string()))
    }

    /// Runs a command (or sends input). `timeout` bounds the HTTP call; the executor returns
    /// by itself after the command's own timeout.
    pub async fn exec(&self, req: &ExecRequest) -> Result<ExecResponse, ExecutorError> {
        let wait = Duration::from_secs_f64(req.timeout_secs.unwrap_or(30.0).max(0.0) + 30.0);
        self.post("/shell/exec", req, wait).await
    }

    /// Interrupts the command the shell of `session` (the main one for `None`) runs now (SIGINT
    /// to its process group, SIGKILL a few seconds later if it is still running).
    pub async fn interrupt(&self, session: Option<&str>) -> Result<(), ExecutorError> {
        let body = halyard_protocol::executor::InterruptRequest { session: session.map(str::to_owned), close: false };
        self.post_expecting_nothing("/shell/interrupt", &body, Duration::from_secs(10), "interrupt_failed").await
    }

    /// Ends a named shell session: its shell and everything in its process group are killed.
    pub async fn close_session(&self, session: &str) -> Result<(), ExecutorError> {
        let body = halyard_protocol::executor::InterruptRequest { session: Some(session.to_owned()), close: true };
        self.post_expecting_nothing("/shell/interrupt", &body, Duration::from_secs(10), "close_failed").await
    }

    /// Replaces the executor's session key with `key` (this client keeps the old one).
    pub async fn rotate_key(&self, key: &str) -> Result<(), ExecutorError> {
        let body = RotateKey { key: key.to_owned() };
        self.post_expecting_nothing("/session-key", &body, Duration::from_secs(5), "rotate_failed").await
    }

    /// Sets the variables that name the sandbox's way out
    /// ([`halyard_protocol::executor::NetworkVars`]).
    pub async fn set_network(&self, env: std::collections::BTreeMap<String, String>) -> Result<(), ExecutorError> {
        let body = halyard_protocol::executor::NetworkVars { env };
        self.post_expecting_nothing("/network", &body, Duration::from_secs(5), "network_failed").await
    }

    /// A POST whose answer only matters for its status; `code` names a refusal.
    async fn post_expecting_nothing<Q: serde::Serialize>(
        &self,
        path: &str,
        body: &Q,
        timeout: Duration,
        code: &str,
    ) -> Result<(), ExecutorError> {
        let resp = self
            .http
            .post(format!("{}{path}", self.base))
            .header(SESSION_KEY_HEADER, &self.key)
            .json(body)
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| ExecutorError::Unreachable(e.to_string()))?;
        let status = resp.status().as_u16();
        if resp.status().is_success() {
            return Ok(());
        }
        Err(ExecutorError::Rejected { status, code: code.into(), message: resp.text().await.unwrap_or_default() })
    }

    /// Runs one repository hook's command (it may take up to its own timeout, and a little).
    pub async fn run_hook(
        &self,
        req: &halyard_protocol::executor::HookRunRequest,
    ) -> Result<halyard_protocol::executor::HookRunResponse, ExecutorError> {
        self.post("/hooks/run", req, Duration::from_secs_f64(req.timeout_secs.clamp(1.0, 600.0) + 10.0)).await
    }

    /// `glob`: files by name.
    pub async fn glob(
        &self,
        req: &halyard_protocol::executor::GlobRequest,
    ) -> Result<halyard_protocol::executor::SearchResponse, ExecutorError> {
        self.post("/files/glob", req, Duration::from_secs(60)).await
    }

    /// `grep`: files by content.
    pub async fn grep(
        &self,
        req: &halyard_protocol::executor::GrepRequest,
    ) -> Result<halyard_protocol::executor::SearchResponse, ExecutorError> {
        self.post("/files/grep", req, Duration::from_secs(60)).await
    }

    /// `apply_patch`: a V4A patch, whole or not at all.
    pub async fn patch(
        &self,
        req: &halyard_protocol::executor::PatchRequest,
    ) -> Result<halyard_protocol::executor::PatchResponse, ExecutorError> {
        self.post("/files/patch", req, Duration::from_secs(60)).await
    }

    /// One of the agent's browser tools (the browser starts with the first; a page may take up
    /// to 20 s to load, and a cold start a few more).
    pub async fn browser(
        &self,
        req: &halyard_protocol::executor::BrowserRequest,
    ) -> Result<halyard_protocol::executor::BrowserResponse, ExecutorError> {
        self.post("/browser", req, Duration::from_secs(90)).await
    }

    /// One cell in the Python kernel (which starts with the first; the cell's own timeout is in
    /// the request, and an interrupted cell takes a few seconds more to stop).
    pub async fn ipython(
        &self,
        req: &halyard_protocol::executor::CellRequest,
    ) -> Result<halyard_protocol::executor::CellResponse, ExecutorError> {
        let wait = Duration::from_secs_f64(req.timeout_secs.unwrap_or(120.0).max(0.0) + 90.0);
        self.post("/ipython", req, wait).await
    }

    /// Starts the sandbox's VS Code if it is not running; returns once it listens (a cold start
    /// takes a second or a few).
    pub async fn start_vscode(&self) -> Result<serde_json::Value, ExecutorError> {
        self.post("/vscode", &serde_json::json!({}), Duration::from_secs(90)).await
    }

    /// Runs one `file_editor` command.
    pub async fn edit(&self, req: &EditRequest) -> Result<EditResponse, ExecutorError> {
        self.post("/files/edit", req, Duration::from_secs(60)).await
    }

    /// A directory's entries or a file's content (`path` relative to the workspace, or
    /// absolute).
    pub async fn files(&self, path: &str) -> Result<halyard_protocol::executor::FilesResponse, ExecutorError> {
        let path: String = url::form_urlencoded::byte_serialize(path.as_bytes()).collect();
        let request = self.http.get(format!("{}/files?path={path}", self.base));
        self.send(request, Duration::from_secs(20)).await
    }

    /// What changed in the workspace (`git status`/`git diff`, or the editor's record).
    /// Keeps the workspace as it is now as the checkpoint of event `seq`.
    /// It follows `parent`, the last checkpoint as the caller kept it, when given.
    pub async fn checkpoint(
        &self,
        seq: u64,
        parent: Option<&str>,
    ) -> Result<halyard_protocol::executor::CheckpointResponse, ExecutorError> {
        let body = halyard_protocol::executor::CheckpointRequest { seq, parent: parent.map(str::to_owned) };
        self.send(self.http.post(format!("{}/checkpoint", self.base)).json(&body), Duration::from_secs(120)).await
    }

    /// Puts the workspace back as it was at event `seq`, found from `head` (the last checkpoint
    /// as the caller kept it) when given.
    pub async fn restore(&self, seq: u64, head: Option<&str>) -> Result<halyard_protocol::executor::RestoreResponse, ExecutorError> {
        let body = halyard_protocol::executor::RestoreRequest { seq, head: head.map(str::to_owned) };
        self.send(self.http.post(format!("{}/restore", self.base)).json(&body), Duration::from_secs(120)).await
    }

    /// The checkpoints taken at or before event `seq`, as a git bundle the caller streams on
    /// (404 `not_found`: none was taken).
    pub async fn checkpoint_bundle(&self, seq: u64, head: Option<&str>) -> Result<reqwest::Response, ExecutorError> {
        // (A commit id is hex: nothing to escape.)
        let head = head.filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit())).map(|h| format!("&head={h}")).unwrap_or_default();
        self.open(self.http.get(format!("{}/checkpoint/bundle?seq={seq}{head}", self.base))).await
    }

    /// Makes this (new) workspace as the checkpoint at `seq` of the bundle in `body` left it.
    pub async fn unbundle(&self, seq: u64, body: reqwest::Body) -> Result<halyard_protocol::executor::RestoreResponse, ExecutorError> {
        let request = self.http.post(format!("{}/checkpoint/unbundle?seq={seq}", self.base)).body(body);
        self.send(request, Duration::from_secs(3600)).await
    }

    pub async fn changes(&self) -> Result<halyard_protocol::executor::ChangesResponse, ExecutorError> {
        self.send(self.http.get(format!("{}/changes", self.base)), Duration::from_secs(30)).await
    }

    /// Opens one of the executor's sockets (`/git/proxy`, `/mcp/stdio`, `/terminal/ws`) with
    /// the session key.
    pub async fn socket(&self, path: &str) -> Result<ExecutorSocket, ExecutorError> {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let url = format!("{}{path}", self.base.replacen("http", "ws", 1));
        let mut request = url.into_client_request().map_err(|e| ExecutorError::Unreachable(e.to_string()))?;
        let key = self.key.parse().map_err(|_| ExecutorError::Unreachable("the session key is no header value".into()))?;
        request.headers_mut().insert(SESSION_KEY_HEADER, key);
        // Nagle off: the frames are small and each is waited for (an agent's acknowledgement, a
        // relayed request's piece).
        let (socket, _) = tokio_tungstenite::connect_async_with_config(request, None, true)
            .await
            .map_err(|e| ExecutorError::Unreachable(e.to_string()))?;
        Ok(socket)
    }

    /// One file's bytes (`GET /files/raw`), for the caller to stream on.
    pub async fn download(&self, path: &str) -> Result<reqwest::Response, ExecutorError> {
        let path: String = url::form_urlencoded::byte_serialize(path.as_bytes()).collect();
        self.open(self.http.get(format!("{}/files/raw?path={path}", self.base))).await
    }

    /// The workspace as a gzipped tar (`GET /archive`), for the caller to stream on.
    pub async fn archive(&self) -> Result<reqwest::Response, ExecutorError> {
        self.open(self.http.get(format!("{}/archive", self.base))).await
    }

    /// Writes `body` to the file at `path` (`PUT /files/raw`): its path in the workspace and size.
    pub async fn upload(&self, path: &str, body: reqwest::Body) -> Result<serde_json::Value, ExecutorError> {
        let path: String = url::form_urlencoded::byte_serialize(path.as_bytes()).collect();
        let request = self.http.put(format!("{}/files/raw?path={path}", self.base)).body(body);
        self.send(request, Duration::from_secs(3600)).await
    }

    /// Sends a request whose answer the caller streams: no timeout on the whole (a large file
    /// takes what it takes), the executor's refusal as an error.
    async fn open(&self, request: reqwest::RequestBuilder) -> Result<reqwest::Response, ExecutorError> {
        let resp = request.header(SESSION_KEY_HEADER, &self.key).send().await.map_err(|e| ExecutorError::Unreachable(e.to_string()))?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        Err(Self::refusal(resp).await)
    }

    async fn refusal(resp: reqwest::Response) -> ExecutorError {
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        match serde_json::from_str::<ErrorBody>(&text) {
            Ok(b) => ExecutorError::Rejected { status, code: b.error.code, message: b.error.message },
            Err(_) => ExecutorError::Rejected { status, code: FOREIGN_ERROR.into(), message: text },
        }
    }

    async fn post<Q: serde::Serialize, R: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        body: &Q,
        timeout: Duration,
    ) -> Result<R, ExecutorError> {
        self.send(self.http.post(format!("{}{path}", self.base)).json(body), timeout).await
    }

    /// Sends a request with the session key; the JSON answer, or the executor's refusal.
    async fn send<R: serde::de::DeserializeOwned>(&self, request: reqwest::RequestBuilder, timeout: Duration) -> Result<R, ExecutorError> {
        let resp = request
            .header(SESSION_KEY_HEADER, &self.key)
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| ExecutorError::Unreachable(e.to_string()))?;
        if resp.status().is_success() {
            return resp.json().await.map_err(|e| ExecutorError::Unreachable(e.to_string()));
        }
        Err(Self::refusal(resp).await)
    }
}

/// The executor of sandbox `sandbox_id`, answering, within `patience`. A record that says
/// RUNNING may be older than what happened (the supervisor restarting after a crash puts up a
/// new executor, with new ports, a moment later): it is believed only once its executor answers
/// its health check. Otherwise the sandbox is asked to resume (paused, crashed, killed or gone:
/// resume re-provisions on the same workspace) and its record is read again until one answers.
pub async fn reach(
    nats: &async_nats::Client,
    js: &async_nats::jetstream::Context,
    http: &reqwest::Client,
    secret: &str,
    sandbox_id: halyard_protocol::SandboxId,
    patience: Duration,
) -> Result<ExecutorClient, String> {
    let health = |exec: ExecutorClient| async move { exec.health().await.map(drop) };
    reach_probing(nats, js, http, secret, sandbox_id, patience, health).await.map(|(exec, _)| exec)
}

/// [`reach`], with the first request the caller has for the executor as its health check:
/// one request fewer when it is answered (a success, or a 404). The request's result comes
/// back with the client; a request that got no answer is followed by the health check, and
/// comes back as it failed if the executor is healthy.
pub async fn reach_probing<T, F, Fut>(
    nats: &async_nats::Client,
    js: &async_nats::jetstream::Context,
    http: &reqwest::Client,
    secret: &str,
    sandbox_id: halyard_protocol::SandboxId,
    patience: Duration,
    probe: F,
) -> Result<(ExecutorClient, Result<T, ExecutorError>), String>
where
    F: Fn(ExecutorClient) -> Fut,
    Fut: std::future::Future<Output = Result<T, ExecutorError>>,
{
    use halyard_protocol::command::SandboxCommand;
    use halyard_protocol::system::{SandboxStatus, SystemRecord};
    use halyard_protocol::{Envelope, subjects};

    let key = crate::keys::session_key(secret, sandbox_id);
    let mut deadline = tokio::time::Instant::now() + patience;
    let mut resumed = false;
    loop {
        let stored = crate::bus::last_record::<SystemRecord>(js, subjects::SYSTEM_STREAM, &subjects::sandbox_record(sandbox_id))
            .await
            .map_err(|e| e.to_string())?;
        let running = match stored {
            Some((_, Envelope { payload: SystemRecord::Sandbox(u), .. })) if u.status == SandboxStatus::Running => Some(u),
            _ => None,
        };
        if let Some(url) = running.as_ref().and_then(|u| u.agent_server_url()) {
            let exec = ExecutorClient::new(http.clone(), url, key.clone());
            let probed = tokio::time::timeout(Duration::from_secs(3), probe(exec.clone())).await;
            // (A 404 counts when the executor said it, in its own words: not some other server
            // on a port a gone executor left.)
            let answered = |r: &Result<T, ExecutorError>| match r {
                Ok(_) => true,
                Err(ExecutorError::Rejected { status, code, .. }) => *status == 404 && code != FOREIGN_ERROR,
                Err(_) => false,
            };
            match probed {
                Ok(result) if answered(&result) => return Ok((exec, result)),
                Ok(failed) if matches!(tokio::time::timeout(Duration::from_secs(3), exec.health()).await, Ok(Ok(_))) => {
                    return Ok((exec, failed));
                }
                _ => {}
            }
        }
        if !resumed {
            resumed = true;
            let resume = Envelope::new(SandboxCommand::Resume { sandbox_id }, crate::now_ms());
            if running.is_none() {
                let patience = deadline.saturating_duration_since(tokio::time::Instant::now());
                // (A wake that has to wait for room waits its turn in the start queue.)
                let wait = crate::bus::Wait { patience, in_line: true };
                crate::bus::await_sandbox_telling(nats, js, sandbox_id, Some(resume), wait, None).await?;
                // (It may have waited long: the executor gets its patience from now.)
                deadline = tokio::time::Instant::now() + patience;
                continue;
            }
            crate::bus::publish(js, subjects::sandbox_command(sandbox_id), &resume).await.map_err(|e| e.to_string())?;
        }
        if tokio::time::Instant::now() >= deadline {
            return Err("the sandbox's executor does not answer".into());
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
