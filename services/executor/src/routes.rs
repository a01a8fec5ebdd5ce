//! The executor's HTTP surface: the shared state, the route table, the session-key and
//! activity middleware, and the thin handlers that hand each request to its module.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::{Json, Router};
use halyard_protocol::executor::{EditRequest, ExecRequest, Health, RotateKey, SESSION_KEY_HEADER};

use crate::config::ExecutorConfig;
use crate::error::ExecutorError;
use crate::{acp, checkpoint, disk, files, git_proxy, hooks, limits, mcp, runtimes, shell, workspace};

#[derive(Clone)]
struct AppState {
    config: Arc<ExecutorConfig>,
    /// The key callers must present; replaced when a warm-pool sandbox is handed out.
    key: Arc<RwLock<String>>,
    /// The agent's shells: the main one, and one per helper conversation.
    shells: Arc<shell::sessions::Sessions>,
    editor: Arc<files::editor::Editor>,
    activity: Arc<Activity>,
    /// Passes git's requests for the conversation's repository on (`None`: no listener could
    /// be made).
    git: Option<Arc<git_proxy::GitProxy>>,
    /// Third-party agents' processes and their LLM relay.
    acp: Arc<acp::AcpHost>,
    /// The disk limit commands are watched against (`None`: none).
    disk: Option<Arc<disk::Disk>>,
    /// The workspace's checkpoints; one taken or restored at a time.
    checkpoints: Arc<tokio::sync::Mutex<checkpoint::Checkpoints>>,
    /// The sandbox's browser, started by the first browser call.
    browser: Arc<runtimes::browser::Browser>,
    /// The shell sessions' Python kernels, each started by its first cell.
    kernels: Arc<runtimes::kernel::Kernels>,
    /// The sandbox's VS Code, started by the first request for it.
    vscode: Arc<runtimes::vscode::VsCode>,
}

/// The file transfers need only the configuration.
impl axum::extract::FromRef<AppState> for Arc<ExecutorConfig> {
    fn from_ref(state: &AppState) -> Self {
        state.config.clone()
    }
}

/// Whether the agent is using this sandbox, for the supervisor's hibernation (and idle pause).
struct Activity {
    started: Instant,
    in_flight: AtomicUsize,
    /// Milliseconds after `started` when the last request ended.
    last_end_ms: AtomicU64,
}

impl Activity {
    fn idle_ms(&self) -> u64 {
        if self.in_flight.load(Ordering::SeqCst) > 0 {
            return 0;
        }
        (self.started.elapsed().as_millis() as u64).saturating_sub(self.last_end_ms.load(Ordering::SeqCst))
    }
}

/// The executor's routes.
pub fn app(config: ExecutorConfig) -> Result<Router, ExecutorError> {
    let git = match git_proxy::GitProxy::start(&std::env::temp_dir()) {
        Ok(proxy) => Some(proxy),
        Err(e) => {
            tracing::warn!(error = %e, "no git proxy: git in the sandbox reaches private repositories of no provider");
            None
        }
    };
    let shell_env = git.as_ref().map(|g| g.shell_env()).unwrap_or_default();
    let shells = shell::sessions::Sessions::new(config.workspace.clone(), config.output_cap, shell_env)?;
    let editor = files::editor::Editor::new(config.workspace.clone());
    let activity = Activity { started: Instant::now(), in_flight: AtomicUsize::new(0), last_end_ms: AtomicU64::new(0) };
    let key = Arc::new(RwLock::new(config.session_key.clone()));
    let roots = [Some(config.workspace.clone()), std::env::var_os("HOME").map(PathBuf::from), Some(std::env::temp_dir())];
    let disk = disk::Disk::new(config.disk_limit, roots.into_iter().flatten().collect());
    let workspace = config.workspace.clone();
    let (config_idle, vscode_idle) = (config.browser_idle, config.vscode_idle);
    let state = AppState {
        config: Arc::new(config),
        key,
        shells: Arc::new(shells),
        editor: Arc::new(editor),
        activity: Arc::new(activity),
        git,
        acp: acp::AcpHost::new(workspace.clone()),
        disk,
        checkpoints: Arc::new(tokio::sync::Mutex::new(checkpoint::Checkpoints::new(workspace.clone()))),
        browser: runtimes::browser::Browser::new(config_idle),
        kernels: Arc::default(),
        vscode: runtimes::vscode::VsCode::new(workspace.clone(), vscode_idle),
    };
    let guarded = Router::new()
        .route("/shell/exec", post(exec))
        .route("/shell/interrupt", post(interrupt))
        .route("/files/edit", post(edit))
        .route("/files/glob", post(glob))
        .route("/files/grep", post(grep))
        .route("/files/patch", post(patch))
        .route("/hooks/run", post(run_hook))
        .route("/browser", post(browse))
        .route("/ipython", post(ipython))
        .route("/checkpoint", post(take_checkpoint))
        .route("/restore", post(restore))
        // A user at an app on a forwarded port uses the sandbox (see [`runtimes::ports`]).
        .route("/ports/{port}", any(runtimes::ports::forward))
        .route("/ports/{port}/", any(runtimes::ports::forward))
        .route("/ports/{port}/{*rest}", any(runtimes::ports::forward))
        .route_layer(middleware::from_fn_with_state(state.clone(), track_activity))
        // Looking is not activity: a user browsing files does not keep a sandbox awake.
        .route("/files", get(files))
        .route("/files/raw", get(files::transfer::download).put(files::transfer::upload))
        .route("/archive", get(files::transfer::archive))
        .route("/checkpoint/bundle", get(bundle_route))
        .route("/checkpoint/unbundle", post(unbundle_route))
        .route("/changes", get(changes))
        // An MCP server's open socket is not activity either: its calls come with the
        // agent's steps, which are.
        .route("/mcp/stdio", get(mcp_stdio))
        // The user's own terminal counts as activity while it is open (below), not per request.
        .route("/terminal/ws", get(terminal))
        .route("/git/proxy", get(git_proxy))
        .route("/acp/stdio", get(acp_stdio))
        .route("/llm/relay", get(llm_relay))
        // The user's VS Code: started here, and reached below (see [`runtimes::vscode`]). Its
        // own idle timer decides when it stops; while it is open, the sandbox is not idle.
        .route("/vscode", post(start_vscode))
        .route("/vscode/", any(vscode))
        .route("/vscode/{*rest}", any(vscode))
        .route("/session-key", post(rotate_key))
        .route("/network", post(set_network))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_key));
    Ok(Router::new().route("/health", get(health)).merge(guarded).with_state(state))
}

async fn terminal(State(state): State<AppState>, ws: axum::extract::WebSocketUpgrade) -> Response {
    let env = state.git.as_ref().map(|g| g.shell_env()).unwrap_or_default();
    let workspace = state.config.workspace.clone();
    let activity = state.activity.clone();
    ws.on_upgrade(move |socket| async move {
        // A user at a terminal is using the sandbox: no idle pause while one is open.
        activity.in_flight.fetch_add(1, Ordering::SeqCst);
        shell::pty::bridge(socket, workspace, env).await;
        activity.last_end_ms.store(activity.started.elapsed().as_millis() as u64, Ordering::SeqCst);
        activity.in_flight.fetch_sub(1, Ordering::SeqCst);
    })
}

async fn git_proxy(State(state): State<AppState>, ws: axum::extract::WebSocketUpgrade) -> Response {
    match state.git.clone() {
        Some(proxy) => ws.on_upgrade(move |socket| proxy.serve_holder(socket)),
        None => ExecutorError::Internal("this sandbox has no git proxy".into()).into_response(),
    }
}

/// A third-party agent's socket: the sandbox counts as busy while its driver is attached (a
/// turn in progress), so it is not hibernated under the agent.
async fn acp_stdio(State(state): State<AppState>, ws: axum::extract::WebSocketUpgrade) -> Response {
    let (host, activity) = (state.acp.clone(), state.activity.clone());
    activity.in_flight.fetch_add(1, Ordering::SeqCst);
    ws.on_upgrade(move |socket| async move {
        host.attach(socket).await;
        activity.last_end_ms.store(activity.started.elapsed().as_millis() as u64, Ordering::SeqCst);
        activity.in_flight.fetch_sub(1, Ordering::SeqCst);
    })
}

async fn llm_relay(State(state): State<AppState>, ws: axum::extract::WebSocketUpgrade) -> Response {
    match state.acp.llm_relay() {
        Some(relay) => ws.on_upgrade(move |socket| relay.serve_holder(socket, |_| Ok(()))),
        None => ExecutorError::Internal("this sandbox has no LLM relay".into()).into_response(),
    }
}

async fn mcp_stdio(State(state): State<AppState>, ws: axum::extract::WebSocketUpgrade) -> Response {
    let workspace = state.config.workspace.clone();
    ws.on_upgrade(move |socket| mcp::bridge(socket, workspace))
}

/// Serves on `listener` until `shutdown` resolves.
pub async fn serve(
    config: ExecutorConfig,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ExecutorError> {
    let app = app(config)?;
    // Small frames (an agent's line, a command's output) go out at once, not after the peer's
    // delayed acknowledgement of the one before (Nagle's algorithm held them up to 40 ms).
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, app).with_graceful_shutdown(shutdown).await.map_err(|e| ExecutorError::Internal(e.to_string()))
}

/// Binds `addr`, for callers that want to learn the port before serving.
pub async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener, ExecutorError> {
    tokio::net::TcpListener::bind(addr).await.map_err(|e| ExecutorError::Internal(format!("bind {addr}: {e}")))
}

async fn require_key(State(state): State<AppState>, req: Request, next: Next) -> Result<Response, ExecutorError> {
    let ok = {
        let given = req.headers().get(SESSION_KEY_HEADER).map(|v| v.as_bytes()).unwrap_or_default();
        let want = state.key.read().map_err(|_| ExecutorError::Internal("key lock poisoned".into()))?;
        let want = want.as_bytes();
        // Constant-time comparison: the key must not leak through response timing.
        !want.is_empty() && given.len() == want.len() && given.iter().zip(want).fold(0u8, |a, (x, y)| a | (x ^ y)) == 0
    };
    if !ok {
        return Err(ExecutorError::Unauthorized);
    }
    Ok(next.run(req).await)
}

/// Counts shell and file requests in flight, and when the last one ended.
async fn track_activity(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let activity = &state.activity;
    activity.in_flight.fetch_add(1, Ordering::SeqCst);
    let response = next.run(req).await;
    activity.last_end_ms.store(activity.started.elapsed().as_millis() as u64, Ordering::SeqCst);
    activity.in_flight.fetch_sub(1, Ordering::SeqCst);
    response
}

async fn health(State(state): State<AppState>) -> Json<Health> {
    Json(Health {
        ok: state.shells.main().is_alive(),
        workspace: state.config.workspace.display().to_string(),
        // A user in VS Code (its tab open: the workbench's connection) is using the sandbox,
        // as at a terminal.
        idle_ms: if state.vscode.in_use() { 0 } else { state.activity.idle_ms() },
        browser: state.browser.running(),
        vscode: state.vscode.running(),
    })
}

/// `POST /vscode`: starts VS Code if it is not running, and answers once it listens.
async fn start_vscode(State(state): State<AppState>) -> Result<Json<serde_json::Value>, ExecutorError> {
    state.vscode.ensure().await?;
    Ok(Json(serde_json::json!({ "running": true })))
}

/// `/vscode/…`: a request for VS Code, passed to it.
async fn vscode(State(state): State<AppState>, req: Request) -> Response {
    state.vscode.clone().forward(req).await
}

/// `POST /ipython`: one cell in the session's Python kernel ([`runtimes::kernel`]), in its shell's working
/// directory.
async fn ipython(
    State(state): State<AppState>,
    Json(req): Json<halyard_protocol::executor::CellRequest>,
) -> Result<Json<halyard_protocol::executor::CellResponse>, ExecutorError> {
    let cwd = state.shells.existing(req.session.as_deref()).and_then(|s| s.cwd());
    state.kernels.run(&req, &state.config.workspace, cwd, state.config.output_cap).await.map(Json)
}

/// `POST /browser`: one of the agent's browser tools ([`runtimes::browser`]).
async fn browse(
    State(state): State<AppState>,
    Json(req): Json<halyard_protocol::executor::BrowserRequest>,
) -> Result<Json<halyard_protocol::executor::BrowserResponse>, ExecutorError> {
    state.browser.act(&req).await.map(Json)
}

/// `POST /session-key`: the caller proved it holds the current key; the new one replaces it.
async fn rotate_key(State(state): State<AppState>, Json(req): Json<RotateKey>) -> Result<StatusCode, ExecutorError> {
    if req.key.len() < 32 {
        return Err(ExecutorError::Tool("a session key has at least 32 characters".into()));
    }
    let mut key = state.key.write().map_err(|_| ExecutorError::Internal("key lock poisoned".into()))?;
    *key = req.key;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /network`: the sandbox's supervisor says how the sandbox reaches out now.
async fn set_network(Json(req): Json<halyard_protocol::executor::NetworkVars>) -> StatusCode {
    crate::network::set(req.env);
    StatusCode::NO_CONTENT
}

async fn exec(
    State(state): State<AppState>,
    Json(req): Json<ExecRequest>,
) -> Result<Json<halyard_protocol::executor::ExecResponse>, ExecutorError> {
    let shell = state.shells.get(req.session.as_deref())?;
    let before = limits::counters();
    let watch = match &state.disk {
        Some(disk) => {
            let shell = shell.clone();
            Some(disk.watch(move || drop(tokio::spawn(async move { shell.interrupt(std::time::Duration::from_secs(3)).await }))).await)
        }
        None => None,
    };
    let mut res = shell.exec(req).await?;
    if let Some(note) = limits::note(before, limits::counters()) {
        res.output.push_str(&note);
    }
    if let Some(note) = match watch {
        Some(watch) => watch.finish().await,
        None => None,
    } {
        res.output.push_str(&note);
    }
    Ok(Json(res))
}

/// `POST /shell/interrupt`: stops the running command of a session now, without waiting for it.
async fn interrupt(
    State(state): State<AppState>,
    Json(req): Json<halyard_protocol::executor::InterruptRequest>,
) -> Json<serde_json::Value> {
    let signalled = match (req.close, req.session.as_deref()) {
        (true, Some(name)) => state.shells.close(name),
        _ => match state.shells.existing(req.session.as_deref()) {
            // A Python cell running in the session's kernel is interrupted too.
            Some(shell) => state.kernels.interrupt(req.session.as_deref()) | shell.interrupt(std::time::Duration::from_secs(3)).await,
            None => false,
        },
    };
    Json(serde_json::json!({ "interrupted": signalled }))
}

#[derive(serde::Deserialize)]
struct FilesQuery {
    #[serde(default)]
    path: String,
}

/// `GET /files?path=`: a directory's entries or a file's content.
async fn files(
    State(state): State<AppState>,
    axum::extract::Query(q): axum::extract::Query<FilesQuery>,
) -> Result<Json<halyard_protocol::executor::FilesResponse>, ExecutorError> {
    let workspace = state.config.workspace.clone();
    let out = tokio::task::spawn_blocking(move || workspace::files(&workspace, &q.path))
        .await
        .map_err(|e| ExecutorError::Internal(e.to_string()))??;
    Ok(Json(out))
}

/// `POST /hooks/run` (see [`hooks`]): with git reaching the conversation's repository as the
/// agent's shell does.
async fn run_hook(
    State(state): State<AppState>,
    Json(req): Json<halyard_protocol::executor::HookRunRequest>,
) -> Result<Json<halyard_protocol::executor::HookRunResponse>, ExecutorError> {
    let env = state.git.as_ref().map(|g| g.shell_env()).unwrap_or_default();
    Ok(Json(hooks::run(&state.config.workspace, &env, req).await?))
}

/// `POST /checkpoint` (see [`checkpoint`]).
async fn take_checkpoint(
    State(state): State<AppState>,
    Json(req): Json<halyard_protocol::executor::CheckpointRequest>,
) -> Result<Json<halyard_protocol::executor::CheckpointResponse>, ExecutorError> {
    let store = state.checkpoints.lock().await;
    Ok(Json(store.take(req.seq, req.parent.as_deref()).await?))
}

/// `POST /restore` (see [`checkpoint`]).
async fn restore(
    State(state): State<AppState>,
    Json(req): Json<halyard_protocol::executor::RestoreRequest>,
) -> Result<Json<halyard_protocol::executor::RestoreResponse>, ExecutorError> {
    let store = state.checkpoints.lock().await;
    Ok(Json(store.restore(req.seq, req.head.as_deref()).await?))
}

/// `GET /changes`: what changed in the workspace.
async fn changes(State(state): State<AppState>) -> Json<halyard_protocol::executor::ChangesResponse> {
    Json(workspace::changes(&state.config.workspace, state.editor.edited()).await)
}

async fn edit(
    State(state): State<AppState>,
    Json(req): Json<EditRequest>,
) -> Result<Json<halyard_protocol::executor::EditResponse>, ExecutorError> {
    let editor = state.editor.clone();
    // File I/O is blocking; keep it off the async workers.
    let out = tokio::task::spawn_blocking(move || editor.run(&req)).await.map_err(|e| ExecutorError::Internal(e.to_string()))??;
    Ok(Json(halyard_protocol::executor::EditResponse { output: out }))
}

/// Runs one of the file tools off the async workers (file I/O blocks).
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> Result<T, ExecutorError> + Send + 'static) -> Result<Json<T>, ExecutorError> {
    tokio::task::spawn_blocking(work).await.map_err(|e| ExecutorError::Internal(e.to_string()))?.map(Json)
}

/// `POST /files/glob`: files by name ([`files::search`]).
async fn glob(
    State(state): State<AppState>,
    Json(req): Json<halyard_protocol::executor::GlobRequest>,
) -> Result<Json<halyard_protocol::executor::SearchResponse>, ExecutorError> {
    let workspace = state.config.workspace.clone();
    blocking(move || files::search::glob(&workspace, &req)).await
}

/// `POST /files/grep`: files by content ([`files::search`]).
async fn grep(
    State(state): State<AppState>,
    Json(req): Json<halyard_protocol::executor::GrepRequest>,
) -> Result<Json<halyard_protocol::executor::SearchResponse>, ExecutorError> {
    let workspace = state.config.workspace.clone();
    blocking(move || files::search::grep(&workspace, &req)).await
}

/// `POST /files/patch`: a V4A patch, applied whole or not at all ([`files::patch`]).
async fn patch(
    State(state): State<AppState>,
    Json(req): Json<halyard_protocol::executor::PatchRequest>,
) -> Result<Json<halyard_protocol::executor::PatchResponse>, ExecutorError> {
    let workspace = state.config.workspace.clone();
    blocking(move || files::patch::apply(&workspace, &req.patch)).await
}

#[derive(serde::Deserialize)]
struct SeqQuery {
    seq: u64,
    /// (Bundles) the last checkpoint as the agent runner kept it (see [`checkpoint::Checkpoints::trust`]).
    #[serde(default)]
    head: Option<String>,
}

/// `GET /checkpoint/bundle?seq=`: the checkpoints at or before `seq`, as a git bundle.
async fn bundle_route(
    axum::extract::State(state): axum::extract::State<AppState>,
    axum::extract::Query(q): axum::extract::Query<SeqQuery>,
) -> Result<axum::response::Response, ExecutorError> {
    use axum::response::IntoResponse;
    // Listing the refs is what must not overlap a checkpoint being taken; reading the objects
    // may.
    let stdout = state.checkpoints.lock().await.bundle(q.seq, q.head.as_deref()).await?;
    Ok(crate::files::transfer::body_of(stdout).into_response())
}

/// `POST /checkpoint/unbundle?seq=` (the body: a bundle from [`bundle_route`]).
async fn unbundle_route(
    axum::extract::State(state): axum::extract::State<AppState>,
    axum::extract::Query(q): axum::extract::Query<SeqQuery>,
    body: axum::body::Body,
) -> Result<axum::Json<halyard_protocol::executor::RestoreResponse>, ExecutorError> {
    let store = state.checkpoints.lock().await;
    tokio::fs::create_dir_all(store.dir()).await.map_err(|e| ExecutorError::Internal(format!("checkpoint store: {e}")))?;
    let file = store.dir().join(format!("incoming-{}.bundle", uuid::Uuid::new_v4()));
    let limit = halyard_protocol::executor::MAX_CHECKPOINT_BUNDLE_BYTES;
    let made = match crate::files::transfer::write_limited(&file, body, limit).await {
        Ok(_) => store.unbundle(q.seq, &file).await,
        Err(e) => Err(e),
    };
    let _ = tokio::fs::remove_file(&file).await;
    Ok(axum::Json(made?))
}
