//! OpenHands' Runtime API, served by the sandbox supervisor (`HALYARD_RUNTIME_API_ADDR`), so that
//! an OpenHands deployment runs its sandboxes on Halyard's Docker engine without changing
//! OpenHands: the routes and shapes its app server's remote sandbox service
//! (`openhands/app_server/sandbox/remote_sandbox_service.py`) sends and reads.
//!
//! - `POST /start` with `image`, `command`, `working_dir`, `environment`, `session_id`,
//!   `resource_factor`, `run_as_user`/`run_as_group`/`fs_group`, `runtime_class` →
//!   `{runtime_id, session_id, url, session_api_key, status, pod_status}`; a start for a session
//!   that has a runtime answers with that runtime.
//! - `POST /pause`, `/resume`, `/stop` with `{runtime_id}` (404 for a runtime the key does not
//!   have); `GET /sessions/{session_id}`, `GET /sessions/batch?ids=…`, `GET /list` (running).
//! - Statuses as OpenHands maps them: `starting` (the container runs, its agent server does not
//!   answer HTTP yet), `running`, `paused`, `stopped`.
//! - Each OpenHands deployment has its own `X-API-Key` (`HALYARD_RUNTIME_API_KEYS`: hashes
//!   only) and sees only its own runtimes; `HALYARD_RUNTIME_API_MAX` bounds how many it has.
//!   What each starts, pauses, resumes and stops, and what it is refused, is in the audit trail
//!   (`runtime.*`, actor `runtime-api:<deployment>`; `GET /api/v1/admin/audit`).
//! - A runtime's URL is `<HALYARD_RUNTIME_API_URL>/<runtime id>` (path mode): this listener
//!   passes `/<id>/…` to its agent server, `/<id>/vscode/…` and `/<id>/work-1|2/…` to the other
//!   ports OpenHands derives ([`proxy`]); or, with `HALYARD_RUNTIME_API_URL_MODE=subdomain`,
//!   `<id>.<host>`, `vscode-<id>.<host>`, `work-1-<id>.<host>` by the request's `Host`.
//! - A runtime nothing reached for `HALYARD_SANDBOX_IDLE_STOP_SECS` hibernates ([`idle`]).
//!
//! A runtime is a container ([`runtimes`]): the image and command asked for (an image the engine
//! has; nothing is built or pulled), with the default spec's hardening, network and limits
//! scaled by `resource_factor`; `runtime_class` `gvisor` runs it under runsc, any other is
//! refused. Images an administrator pools (`HALYARD_RUNTIME_API_POOL`) have runtimes started
//! ahead, given to the starts that match them ([`pool`]).

pub mod idle;
pub mod pool;
pub mod proxy;
pub mod refusal;
pub mod runtimes;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use halyard_platform::Shutdown;
use halyard_platform::config::SandboxSpec;
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::docker::Engine;
use refusal::Refusal;
use runtimes::{Assignment, Assignments, Runtime, Shape, State as RunState};

/// What the Runtime API serves with.
pub struct RuntimeApi {
    pub engine: Engine,
    /// The default spec: its hardening, network and limits.
    pub spec: SandboxSpec,
    /// Deployment name → SHA-256 of its key (hex).
    pub keys: BTreeMap<String, String>,
    /// The public base of runtimes' URLs.
    pub url: String,
    /// Runtimes' URLs are subdomains of `url`'s host, not paths under it.
    pub subdomains: bool,
    pub max_runtimes: usize,
    /// Whose each runtime is.
    pub store: Assignments,
    /// Where the audit records go.
    pub js: async_nats::jetstream::Context,
    /// What was used when, for hibernation.
    pub idle: Arc<idle::Idle>,
    /// Held by a start from its checks to its runtime's assignment: two starts at once cannot
    /// both pass a deployment's limit, nor make two runtimes for one session.
    pub starting: tokio::sync::Mutex<()>,
    pub pool: pool::Pool,
}

impl RuntimeApi {
    /// What the Runtime API serves with, from the configuration: the default spec, the keys'
    /// hashes, the pool's sizes, and its directory under the data directory (root's own).
    pub fn from_config(config: &halyard_platform::Config, engine: Engine, js: async_nats::jetstream::Context) -> Result<Arc<Self>, String> {
        let sandbox = &config.sandbox;
        let url = sandbox.runtime_api_url.clone().or_else(|| sandbox.runtime_api_addr.map(|a| format!("http://{a}"))).unwrap_or_default();
        let dir = config.data_dir.join("runtime-api");
        let store = Assignments::open(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let idle_after = (sandbox.idle_stop_secs > 0).then(|| std::time::Duration::from_secs(sandbox.idle_stop_secs));
        Ok(Arc::new(Self {
            engine,
            spec: sandbox.spec(&sandbox.default_spec).unwrap_or_default(),
            keys: sandbox.runtime_api_keys.clone(),
            url,
            subdomains: sandbox.runtime_api_subdomains,
            max_runtimes: sandbox.runtime_api_max,
            store,
            js,
            idle: Arc::new(idle::Idle::new(idle_after)),
            starting: Default::default(),
            pool: pool::Pool::new(sandbox.runtime_api_pool.clone(), &dir),
        }))
    }
}

/// Binds `addr` (a taken port stops the start-up, in words) and starts serving, keeping the
/// pool and hibernating unused runtimes, until `shutdown`: the tasks.
pub async fn launch(
    api: Arc<RuntimeApi>,
    addr: std::net::SocketAddr,
    shutdown: Shutdown,
) -> Result<Vec<tokio::task::JoinHandle<()>>, String> {
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| format!("HALYARD_RUNTIME_API_ADDR {addr}: {e}"))?;
    let keep = {
        let (api, shutdown) = (api.clone(), shutdown.clone());
        tokio::spawn(async move { api.pool.keep(&api.engine, &api.store, &api.spec, shutdown).await })
    };
    let hibernate = {
        let (api, shutdown) = (api.clone(), shutdown.clone());
        tokio::spawn(async move { api.idle.hibernate(&api.engine, &api.store, shutdown).await })
    };
    let served = tokio::spawn(async move {
        if let Err(e) = serve(api, listener, shutdown).await {
            tracing::error!(%addr, error = %e, "OpenHands' Runtime API stopped");
        }
    });
    Ok(vec![keep, hibernate, served])
}

/// A new deployment key for `name`: the key (shown once) and its `HALYARD_RUNTIME_API_KEYS`
/// entry.
pub fn new_key(name: &str) -> (String, String) {
    let key = format!("hrk_{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple());
    let entry = format!("{name}={}", hash(&key));
    (key, entry)
}

fn hash(key: &str) -> String {
    Sha256::digest(key.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// The router: the API's routes, and every other path to a runtime ([`proxy`]).
pub fn app(api: Arc<RuntimeApi>) -> Router {
    Router::new()
        .route("/start", post(start))
        .route("/stop", post(stop))
        .route("/pause", post(pause))
        .route("/resume", post(resume))
        .route("/list", get(list))
        .route("/sessions/batch", get(batch))
        .route("/sessions/{session_id}", get(session))
        .fallback(|State(api): State<Arc<RuntimeApi>>, req: axum::extract::Request| async move {
            proxy::forward(&api.engine, &api.store, &api.idle, &api.url, api.subdomains, req).await
        })
        .with_state(api)
}

/// Serves the Runtime API on `listener` until `shutdown`.
pub async fn serve(api: Arc<RuntimeApi>, listener: tokio::net::TcpListener, mut shutdown: Shutdown) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    tracing::info!(%addr, url = %api.url, deployments = api.keys.len(), "OpenHands' Runtime API listening");
    let service = app(api).into_make_service_with_connect_info::<std::net::SocketAddr>();
    axum::serve(listener, service).with_graceful_shutdown(async move { shutdown.wait().await }).await
}

/// The OpenHands deployment whose `X-API-Key` came.
fn client(api: &RuntimeApi, headers: &HeaderMap) -> Result<String, Refusal> {
    let refused = || Refusal::new(StatusCode::UNAUTHORIZED, "unauthorized", "Send the deployment's Runtime API key in X-API-Key.");
    let key = headers.get("x-api-key").and_then(|v| v.to_str().ok()).ok_or_else(refused)?;
    let presented = hash(key);
    api.keys.iter().find(|(_, h)| **h == presented).map(|(name, _)| name.clone()).ok_or_else(refused)
}

/// Leaves an audit record of what `client` (an OpenHands deployment; `-`: a wrong key) did or
/// was refused: `runtime.<action>` on `target`, from `from`.
async fn audit(api: &RuntimeApi, client: &str, action: &str, target: &str, detail: Value, from: std::net::SocketAddr) {
    let record = halyard_protocol::system::SystemRecord::Audit(halyard_protocol::accounts::AuditRecord {
        actor: halyard_protocol::UserId(format!("runtime-api:{client}")),
        action: format!("runtime.{action}"),
        target: target.to_owned(),
        detail: (!detail.is_null()).then_some(detail),
        org: None,
        client: Some(from.ip().to_string()),
        at_ms: halyard_platform::now_ms(),
    });
    if let Err(e) = halyard_platform::bus::send(&api.js, halyard_protocol::subjects::audit_record("runtime"), record, None).await {
        tracing::error!(error = %e, client, action, target, "audit record lost");
    }
}

/// The OpenHands deployment a request comes from (its key checked: a wrong one is refused, and
/// on the record), and the address it comes from.
struct Caller {
    client: String,
    from: std::net::SocketAddr,
}

impl axum::extract::FromRequestParts<Arc<RuntimeApi>> for Caller {
    type Rejection = Refusal;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, api: &Arc<RuntimeApi>) -> Result<Self, Refusal> {
        let from = parts.extensions.get::<ConnectInfo<std::net::SocketAddr>>().map_or(([0, 0, 0, 0], 0).into(), |c| c.0);
        let found = client(api, &parts.headers);
        if found.is_err() {
            audit(api, "-", "unauthorized", "", Value::Null, from).await;
        }
        Ok(Self { client: found?, from })
    }
}

/// A runtime as OpenHands reads it.
async fn view(api: &RuntimeApi, r: &Runtime) -> Value {
    let a = &r.assignment;
    let status = match r.state {
        RunState::Running if runtimes::answers(&api.engine, r).await => "running",
        RunState::Running => "starting",
        // Frozen, or hibernated (its processes ended, its files kept): `/resume` brings either
        // back.
        RunState::Paused | RunState::Stopped => "paused",
    };
    let pod_status = match status {
        "running" => "ready",
        "starting" => "pending",
        other => other,
    };
    json!({
        "runtime_id": r.runtime_id,
        "session_id": a.session_id,
        "url": runtime_url(api, &r.runtime_id),
        "session_api_key": a.session_key,
        "status": status,
        "pod_status": pod_status,
        "image": a.image,
    })
}

/// A runtime's URL: `<url>/<id>` (path mode) or `<scheme>://<id>.<host>` (subdomain mode).
fn runtime_url(api: &RuntimeApi, runtime_id: &str) -> String {
    match api.url.split_once("://") {
        Some((scheme, host)) if api.subdomains => format!("{scheme}://{runtime_id}.{host}"),
        _ => format!("{}/{runtime_id}", api.url),
    }
}

/// `command` as OpenHands sends it: a list, or one string for the shell.
#[derive(Deserialize)]
#[serde(untagged)]
enum Command {
    List(Vec<String>),
    Line(String),
}

#[derive(Deserialize)]
struct StartRequest {
    image: String,
    #[serde(default)]
    command: Option<Command>,
    #[serde(default)]
    working_dir: Option<String>,
    #[serde(default)]
    environment: HashMap<String, String>,
    session_id: String,
    #[serde(default)]
    resource_factor: Option<f64>,
    #[serde(default)]
    run_as_user: Option<u32>,
    #[serde(default)]
    run_as_group: Option<u32>,
    #[serde(default)]
    fs_group: Option<u32>,
    #[serde(default)]
    runtime_class: Option<String>,
}

async fn start(
    State(api): State<Arc<RuntimeApi>>,
    Caller { client, from }: Caller,
    body: Result<Json<StartRequest>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<Value>, Refusal> {
    let started = start_for(&api, &client, body).await;
    if let Ok((r, _)) = &started {
        api.idle.touch(r["runtime_id"].as_str().unwrap_or_default());
    }
    let (action, target, detail) = match &started {
        Ok((r, from_pool)) => (
            "start",
            r["runtime_id"].as_str().unwrap_or_default().to_owned(),
            json!({"image": r["image"], "session_id": r["session_id"], "from_pool": from_pool}),
        ),
        Err(refusal) => ("refused", String::new(), json!({"code": refusal.code})),
    };
    audit(&api, &client, action, &target, detail, from).await;
    started.map(|(r, _)| Json(r))
}

/// Starts (or finds, or takes from the pool) `client`'s runtime: its view, and whether it was
/// warm.
async fn start_for(
    api: &RuntimeApi,
    client: &str,
    body: Result<Json<StartRequest>, axum::extract::rejection::JsonRejection>,
) -> Result<(Value, bool), Refusal> {
    let client = client.to_owned();
    let Json(req) = body.map_err(|e| Refusal::new(StatusCode::BAD_REQUEST, "invalid_request", format!("{e}")))?;
    let bad = |code, m: String| Refusal::new(StatusCode::BAD_REQUEST, code, m);
    if req.session_id.is_empty() || req.session_id.len() > 128 {
        return Err(bad("invalid_session_id", "session_id must be 1 to 128 characters.".into()));
    }
    let _one = api.starting.lock().await;
    let mine = runtimes::of(&api.engine, &api.store, &client).await?;
    if let Some(r) = mine.iter().find(|r| r.assignment.session_id.as_deref() == Some(&req.session_id)) {
        return Ok((view(api, r).await, false));
    }
    let engine_runtime = match req.runtime_class.as_deref() {
        None | Some("") => api.engine.runtime_of(&api.spec.runtime),
        Some("gvisor") | Some("runsc") => Some(api.engine.gvisor_runtime.clone()),
        Some(other) => {
            return Err(bad(
                "runtime_class_unknown",
                format!("runtime_class `{other}` is not one Halyard runs: leave it out, or ask for `gvisor`."),
            ));
        }
    };
    let factor = req.resource_factor.unwrap_or(1.0);
    if !(0.1..=8.0).contains(&factor) {
        return Err(bad("invalid_resource_factor", "resource_factor must be between 0.1 and 8.".into()));
    }
    if !crate::docker::image_exists(&api.engine.docker, &req.image).await {
        return Err(bad(
            "image_not_present",
            format!(
                "The engine has no image `{}`, and Halyard neither builds nor pulls one for the Runtime API: load it into the engine first.",
                req.image
            ),
        ));
    }
    // What was asked is checked first: a refusal then says what to change in it.
    if mine.len() >= api.max_runtimes {
        return Err(Refusal::new(
            StatusCode::TOO_MANY_REQUESTS,
            "quota_exceeded",
            format!("This deployment has {} runtimes, its most: stop one first.", mine.len()),
        ));
    }
    let user = match (req.run_as_user, req.run_as_group) {
        (Some(u), Some(g)) => Some(format!("{u}:{g}")),
        (Some(u), None) => Some(u.to_string()),
        _ => None,
    };
    let command = match req.command {
        Some(Command::List(c)) if !c.is_empty() => Some(c),
        Some(Command::Line(l)) if !l.trim().is_empty() => Some(vec!["/bin/sh".into(), "-c".into(), l]),
        _ => None,
    };
    let shape = Shape {
        image: req.image,
        command,
        working_dir: req.working_dir,
        environment: req.environment.into_iter().collect(),
        resource_factor: factor,
        user,
        groups: req.fs_group.map(|g| vec![g.to_string()]).unwrap_or_default(),
        engine_runtime,
    };
    api.pool.learn(&shape);
    if let Some(warm) = api.pool.take(&api.engine, &api.store, &shape, &client, &req.session_id).await {
        tracing::info!(client = %client, runtime_id = %warm.runtime_id, image = %shape.image, "runtime taken from the pool");
        return Ok((view(api, &warm).await, true));
    }
    let assignment = Assignment {
        client: Some(client.clone()),
        session_id: Some(req.session_id),
        image: shape.image.clone(),
        session_key: runtimes::session_key(),
    };
    let runtime_id = runtimes::create(&api.engine, &api.store, &api.spec, &shape, &assignment).await?;
    tracing::info!(client = %client, %runtime_id, image = %shape.image, "runtime started");
    let made = runtimes::find(&api.engine, &api.store, &runtime_id).await?;
    let made = made
        .ok_or_else(|| Refusal::new(StatusCode::SERVICE_UNAVAILABLE, "engine_error", "The runtime's container went at once; try again."))?;
    Ok((view(api, &made).await, false))
}

#[derive(Deserialize)]
struct RuntimeRef {
    runtime_id: String,
}

/// The key's runtime `id`, or a 404.
async fn own(api: &RuntimeApi, client: &str, id: &str) -> Result<Runtime, Refusal> {
    let found = runtimes::find(&api.engine, &api.store, id).await?.filter(|r| r.is_of(client));
    found.ok_or_else(|| Refusal::new(StatusCode::NOT_FOUND, "runtime_not_found", format!("No runtime {id} for this key.")))
}

fn parse_ref(body: Result<Json<RuntimeRef>, axum::extract::rejection::JsonRejection>) -> Result<String, Refusal> {
    body.map(|Json(r)| r.runtime_id).map_err(|e| Refusal::new(StatusCode::BAD_REQUEST, "invalid_request", format!("{e}")))
}

type RefBody = Result<Json<RuntimeRef>, axum::extract::rejection::JsonRejection>;

async fn stop(State(api): State<Arc<RuntimeApi>>, Caller { client, from }: Caller, body: RefBody) -> Result<Json<Value>, Refusal> {
    let r = own(&api, &client, &parse_ref(body)?).await?;
    runtimes::remove(&api.engine, &r.container).await?;
    api.store.remove(&r.runtime_id);
    audit(&api, &client, "stop", &r.runtime_id, json!({"session_id": r.assignment.session_id}), from).await;
    tracing::info!(client = %client, runtime_id = %r.runtime_id, "runtime stopped");
    Ok(Json(json!({"runtime_id": r.runtime_id, "status": "stopped"})))
}

async fn pause(State(api): State<Arc<RuntimeApi>>, Caller { client, from }: Caller, body: RefBody) -> Result<Json<Value>, Refusal> {
    let r = own(&api, &client, &parse_ref(body)?).await?;
    if r.state == RunState::Running {
        api.engine.pause(&r.container).await?;
    }
    audit(&api, &client, "pause", &r.runtime_id, json!({"session_id": r.assignment.session_id}), from).await;
    Ok(Json(json!({"runtime_id": r.runtime_id, "status": "paused"})))
}

async fn resume(State(api): State<Arc<RuntimeApi>>, Caller { client, from }: Caller, body: RefBody) -> Result<Json<Value>, Refusal> {
    let r = own(&api, &client, &parse_ref(body)?).await?;
    match r.state {
        RunState::Paused => api.engine.unpause(&r.container).await?,
        RunState::Stopped => api.engine.start(&r.container).await?,
        RunState::Running => {}
    }
    api.idle.touch(&r.runtime_id);
    audit(&api, &client, "resume", &r.runtime_id, json!({"session_id": r.assignment.session_id}), from).await;
    let now = own(&api, &client, &r.runtime_id).await?;
    Ok(Json(view(&api, &now).await))
}

async fn session(
    State(api): State<Arc<RuntimeApi>>,
    Caller { client, .. }: Caller,
    Path(session_id): Path<String>,
) -> Result<Json<Value>, Refusal> {
    let mine = runtimes::of(&api.engine, &api.store, &client).await?;
    let r = mine.iter().find(|r| r.assignment.session_id.as_deref() == Some(&session_id)).ok_or_else(|| {
        Refusal::new(StatusCode::NOT_FOUND, "session_not_found", format!("No runtime for session {session_id} with this key."))
    })?;
    Ok(Json(view(&api, r).await))
}

async fn batch(
    State(api): State<Arc<RuntimeApi>>,
    Caller { client, .. }: Caller,
    Query(q): Query<Vec<(String, String)>>,
) -> Result<Json<Value>, Refusal> {
    let ids: Vec<&str> = q.iter().filter(|(k, _)| k == "ids").map(|(_, v)| v.as_str()).collect();
    let mine = runtimes::of(&api.engine, &api.store, &client).await?;
    let mut out = Vec::new();
    for r in mine.iter().filter(|r| r.assignment.session_id.as_deref().is_some_and(|s| ids.contains(&s))) {
        out.push(view(&api, r).await);
    }
    Ok(Json(Value::Array(out)))
}

/// The key's running runtimes.
async fn list(State(api): State<Arc<RuntimeApi>>, Caller { client, .. }: Caller) -> Result<Json<Value>, Refusal> {
    let mine = runtimes::of(&api.engine, &api.store, &client).await?;
    let mut out = Vec::new();
    for r in mine.iter().filter(|r| r.state == RunState::Running) {
        out.push(view(&api, r).await);
    }
    Ok(Json(json!({"runtimes": out})))
}
