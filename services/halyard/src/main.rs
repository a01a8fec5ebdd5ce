//! The `halyard` binary: every service in one process with an embedded nats-server
//! (`halyard up`), chosen services against an external NATS (`halyard serve gateway agent ...`),
//! the in-sandbox executor (`halyard executor`, started by the sandbox supervisor), and the
//! command-line client of a running gateway (`halyard run`, `chat`, `ls`, ..., `automations`, `org`, `admin`).
//!
//! Configuration is loaded here, once: defaults, then the TOML file, then `HALYARD_*`
//! environment variables, then flags; the services receive it ready-made.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

mod acp;
mod admin;
mod automations;
mod batches;
mod cli;
mod client;
mod environments;
mod follow;
mod observe;
mod orgs;
mod render;
mod usage;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};
use halyard_platform::{bus_auth, config::Config, keys, nats, shutdown, telemetry};
use tokio::io::AsyncBufReadExt;
use tokio::task::JoinSet;

#[derive(Parser, Debug)]
#[command(name = "halyard", version, about = "A multi-user backend for AI coding agents")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// What a server process is told besides its environment (the flags win).
#[derive(Args, Debug, Clone, Default)]
struct ServerArgs {
    /// TOML configuration file (also HALYARD_CONFIG).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Gateway listen address (HALYARD_HTTP_ADDR).
    #[arg(long)]
    http_addr: Option<String>,
    /// Data directory (HALYARD_DATA_DIR).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// External NATS URL (HALYARD_NATS_URL); `serve` needs one.
    #[arg(long)]
    nats_url: Option<String>,
    /// Log filter (HALYARD_LOG).
    #[arg(long)]
    log: Option<String>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run every service in this process, with an embedded nats-server.
    Up(ServerArgs),
    /// Run the chosen services against the NATS at HALYARD_NATS_URL.
    Serve {
        /// Which services this process runs.
        #[arg(required = true, value_enum)]
        services: Vec<Service>,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Manage users and API keys, and see the start queue, through a running gateway
    /// (HALYARD_URL, with an administrator's HALYARD_API_KEY).
    Admin {
        /// The gateway (HALYARD_URL).
        #[arg(long, env = "HALYARD_URL", default_value = "http://127.0.0.1:3000")]
        url: String,
        /// An administrator's API key (HALYARD_API_KEY).
        #[arg(long, env = "HALYARD_API_KEY", hide_env_values = true)]
        api_key: Option<String>,
        #[command(subcommand)]
        command: admin::AdminCommand,
    },
    #[command(flatten)]
    Client(cli::ClientCommand),
    /// Your automations: work started by signed requests or on a schedule.
    Automations {
        #[command(subcommand)]
        command: Box<automations::AutomationCommand>,
    },
    /// Organizations you are in, their members, budgets and prices.
    Org {
        #[command(subcommand)]
        command: orgs::OrgCommand,
    },
    /// What your conversations used (tokens, cost, LLM calls, sandbox time), or an
    /// organization's (--org), or everyone's (--all).
    Usage(usage::UsageArgs),
    /// Batches: many tasks run a few at a time, with one results table.
    Batch {
        #[command(subcommand)]
        command: batches::BatchCommand,
    },
    /// Environments (setup once, started from a snapshot) and their snapshots.
    Environments {
        #[command(subcommand)]
        command: environments::EnvironmentCommand,
    },
    /// Declare Halyard's streams, consumers and buckets on the external NATS at
    /// HALYARD_NATS_URL, with admin credentials (HALYARD_NATS_CREDS or HALYARD_NATS_USER):
    /// services with restricted credentials cannot declare them themselves.
    SetupBus(ServerArgs),
    /// Make a key for an OpenHands deployment to use the Runtime API (HALYARD_RUNTIME_API_ADDR):
    /// prints the key, shown this once, and the HALYARD_RUNTIME_API_KEYS entry (its SHA-256) to
    /// add to the configuration.
    RuntimeApiKey {
        /// The deployment's name (its runtimes are labelled with it).
        name: String,
    },
    /// Print the gateway's OpenAPI document (generated from its handlers; the web app's
    /// `web/openapi.json` and its types are made from it).
    Openapi,
    /// The executor inside a sandbox (started by the sandbox supervisor; reads its session key
    /// from the first line of standard input).
    #[command(hide = true)]
    Executor(ExecutorArgs),
    /// Forwards host ports into a process sandbox's own network (started by the sandbox
    /// supervisor in the sandbox's process group, so it lives and ends with the sandbox, not
    /// with the supervisor; see `halyard_sandbox::netns`).
    #[command(hide = true)]
    SandboxForward {
        /// The sandbox's tunnel socket.
        #[arg(long)]
        tunnel: PathBuf,
        /// `NAME=HOST:PORT=INNER`, once per port (PORT 0: any free one).
        #[arg(long = "forward", required = true)]
        forwards: Vec<String>,
    },
}

/// The executor's flags (see [`Command::Executor`]).
#[derive(Debug, clap::Args)]
struct ExecutorArgs {
    #[arg(long)]
    workspace: PathBuf,
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: std::net::SocketAddr,
    #[arg(long, default_value_t = 30_000)]
    output_cap: usize,
    /// Read the session key from this file (then delete it) instead of standard input; used
    /// in containers, where the supervisor uploads the file before starting the executor and
    /// the container's own lifecycle replaces the standard-input lifeline.
    #[arg(long)]
    key_file: Option<PathBuf>,
    /// Keep serving when standard input closes after the key (the supervisor crashed): the
    /// sandbox runs on and its supervisor adopts it when it returns, as with containers.
    /// Without it, end-of-file means the supervisor is gone and the executor stops.
    #[arg(long)]
    outlive_supervisor: bool,
    /// A listening Unix socket inherited from the supervisor, through which it reaches
    /// ports inside this sandbox's own network namespace (see `halyard_executor::tunnel`).
    #[arg(long)]
    tunnel_fd: Option<i32>,
    /// A process sandbox's way to the egress proxy: the Unix socket the supervisor serves for
    /// it while it is held to an outbound policy, relayed from its loopback's proxy port (see
    /// `halyard_executor::network`).
    #[arg(long)]
    egress_socket: Option<PathBuf>,
    /// What the workspace, home and temporary directory may hold together, in MiB (0: no
    /// limit; see `halyard_executor::disk`).
    #[arg(long, default_value_t = 0)]
    disk_limit_mb: u64,
    /// Stop the sandbox's browser after this many seconds unused (it starts again on the next
    /// browser call).
    #[arg(long, default_value_t = 600)]
    browser_idle_secs: u64,
    /// Stop the sandbox's VS Code (code-server) after this many seconds without a request or an
    /// open connection (it starts again on the next request for it).
    #[arg(long, default_value_t = 600)]
    vscode_idle_secs: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Service {
    Gateway,
    Conversations,
    Sandbox,
    Agent,
    Callbacks,
    Titles,
    Automations,
}

impl Service {
    /// The NATS role this service connects as (`nats/roles.json`).
    fn role(self) -> &'static str {
        match self {
            Self::Gateway => "gateway",
            Self::Conversations => "conversations",
            Self::Sandbox => "sandbox",
            Self::Agent => "agent",
            Self::Callbacks => "callbacks",
            Self::Titles => "titles",
            Self::Automations => "automations",
        }
    }
}

const ALL: [Service; 7] =
    [Service::Gateway, Service::Conversations, Service::Sandbox, Service::Agent, Service::Callbacks, Service::Titles, Service::Automations];

fn main() -> Result<()> {
    let cli = Cli::parse();
    let env: BTreeMap<String, String> = std::env::vars().collect();
    // Every service of `halyard up` shares these threads, and an unoptimised build's futures
    // are large (a start's handler holds a whole request and its checks): more room than
    // tokio's 2 MiB default, so that a deep one under load cannot end the whole process. The
    // stack is virtual memory until it is used.
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().thread_stack_size(8 << 20).build()?;
    match cli.command {
        Command::Executor(ref args) => {
            telemetry::init(env.get("HALYARD_LOG").map(String::as_str).unwrap_or("warn"));
            runtime.block_on(executor(args))
        }
        Command::SandboxForward { ref tunnel, ref forwards } => {
            runtime.block_on(halyard_sandbox::netns::serve_forwards(tunnel, forwards)).map_err(Into::into)
        }
        Command::Up(ref server) => runtime.block_on(up_or_serve(server, &env, &ALL, true)),
        Command::SetupBus(ref server) => runtime.block_on(setup_bus(server, &env)),
        Command::RuntimeApiKey { ref name } => {
            let (key, entry) = halyard_sandbox::runtime_api::new_key(name);
            println!("key (give it to the OpenHands deployment as its runtime API key; it is not kept): {key}");
            println!("add to HALYARD_RUNTIME_API_KEYS: {entry}");
            Ok(())
        }
        Command::Openapi => {
            println!("{}", halyard_gateway::openapi_document().to_pretty_json()?);
            Ok(())
        }
        Command::Admin { url, api_key, command } => {
            let _ = rustls::crypto::ring::default_provider().install_default();
            runtime.block_on(admin::run(&url, api_key.as_deref(), command))
        }
        Command::Client(command) => {
            let _ = rustls::crypto::ring::default_provider().install_default();
            let code = runtime.block_on(cli::run(command))?;
            // Dropping the runtime would wait for the blocked stdin reader of `chat`.
            runtime.shutdown_background();
            std::process::exit(code)
        }
        Command::Automations { command } => {
            let _ = rustls::crypto::ring::default_provider().install_default();
            let code = runtime.block_on(automations::run(*command))?;
            std::process::exit(code)
        }
        Command::Org { command } => {
            let _ = rustls::crypto::ring::default_provider().install_default();
            let code = runtime.block_on(orgs::run(command))?;
            std::process::exit(code)
        }
        Command::Usage(args) => {
            let _ = rustls::crypto::ring::default_provider().install_default();
            let code = runtime.block_on(usage::run(args))?;
            std::process::exit(code)
        }
        Command::Environments { command } => {
            let _ = rustls::crypto::ring::default_provider().install_default();
            let code = runtime.block_on(environments::run(command))?;
            std::process::exit(code)
        }
        Command::Batch { command } => {
            let _ = rustls::crypto::ring::default_provider().install_default();
            let code = runtime.block_on(batches::run(command))?;
            std::process::exit(code)
        }
        Command::Serve { ref services, ref server } => runtime.block_on(up_or_serve(server, &env, services, false)),
    }
}

fn load_config(cli: &ServerArgs, env: &BTreeMap<String, String>) -> Result<Config> {
    let file = cli.config.clone().or_else(|| env.get("HALYARD_CONFIG").map(PathBuf::from));
    let mut config = Config::load(file.as_deref(), env)?;
    if let Some(v) = &cli.http_addr {
        config.http_addr = v.clone();
    }
    if let Some(v) = &cli.data_dir {
        config.data_dir = v.clone();
    }
    if let Some(v) = &cli.nats_url {
        config.nats_url = v.clone();
    }
    if let Some(v) = &cli.log {
        config.log = v.clone();
    }
    if config.sandbox.executor_command.is_empty() {
        let exe = std::env::current_exe().context("cannot find the halyard binary for the executor")?;
        config.sandbox.executor_command = vec![exe.display().to_string(), "executor".into()];
    }
    // The sandbox gets a PATH and locale, and nothing else of our environment.
    for name in ["PATH", "LANG", "TZ"] {
        if let Some(v) = env.get(name) {
            config.sandbox.env.entry(name.into()).or_insert_with(|| v.clone());
        }
    }
    if config.web_dir.is_none() && Path::new("web/dist/index.html").is_file() {
        config.web_dir = Some(PathBuf::from("web/dist"));
    }
    if config.skills_dir.is_none() && Path::new("skills").is_dir() {
        config.skills_dir = Some(PathBuf::from("skills"));
    }
    Ok(config)
}

/// A value kept in a file of the data dir, created once (the deployment secret, the node id).
fn persistent(data_dir: &Path, name: &str, make: impl FnOnce() -> String) -> Result<String> {
    let path = data_dir.join(name);
    if let Ok(v) = std::fs::read_to_string(&path) {
        if !v.trim().is_empty() {
            return Ok(v.trim().to_owned());
        }
    }
    let v = make();
    // Created readable by its owner only (never widened on the way), like the bus credentials.
    bus_auth::write_private(&path, &v).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(v)
}

/// Runs `services` in this process until a signal or until one of them stops: the configuration
/// prepared, the bus connected (an embedded nats-server when `embedded`), the gateway's
/// listeners bound, metrics served, then each service on its own task.
async fn up_or_serve(cli: &ServerArgs, env: &BTreeMap<String, String>, services: &[Service], embedded: bool) -> Result<()> {
    let mut config = load_config(cli, env)?;
    // Kept to the end: dropping it exports the spans still buffered.
    let otlp = (!config.otlp_endpoint.is_empty()).then(|| telemetry::Otlp {
        endpoint: config.otlp_endpoint.clone(),
        service: match services {
            [one] => format!("halyard-{}", one.role()),
            _ => "halyard".to_owned(),
        },
    });
    let _traces = telemetry::init_with(&config.log, config.log_format == "json", otlp);
    halyard_platform::fault::install(&config.fault);
    let _ = rustls::crypto::ring::default_provider().install_default();
    prepare(&mut config, services).await?;
    let (server, clients) = connect_bus(&mut config, services, embedded).await?;
    let (mut listeners, http, apps) = bind_gateway(&mut config, services).await?;
    let failed_flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let metrics_at = serve_metrics(&config, &clients, failed_flag.clone()).await?;

    let config = Arc::new(config);
    let (trigger, shutdown) = shutdown::channel();
    // What idle conversations' state freed goes back to the system.
    let _trim = halyard_platform::memory::trim_every(Duration::from_secs(10), shutdown.clone());
    let mut tasks: JoinSet<(Service, Result<()>)> = JoinSet::new();
    for (service, client) in clients.iter().cloned() {
        spawn_service(&mut tasks, service, client, config.clone(), shutdown.clone(), &mut listeners);
    }
    tracing::info!(http = %http, nats = %config.nats_url, data_dir = %config.data_dir.display(), ?services, "halyard is up");
    // One machine-readable line for scripts and tests.
    println!("HALYARD_READY http={http} nats={} sandbox={} apps={apps} metrics={metrics_at}", config.nats_url, config.sandbox.kind);

    let mut failed = None;
    tokio::select! {
        _ = wait_for_signal() => tracing::info!("stopping"),
        Some(done) = tasks.join_next() => {
            if let Ok((service, result)) = done {
                tracing::error!(?service, result = ?result, "service stopped unexpectedly");
                failed_flag.store(true, std::sync::atomic::Ordering::SeqCst);
                failed = Some(service);
            }
        }
    }
    trigger.trigger();
    stop(tasks, clients, server).await;
    match failed {
        Some(service) => bail!("service {service:?} stopped unexpectedly"),
        None => Ok(()),
    }
}

/// The data directory made private, the deployment secret and node id kept in it, and the
/// sandbox kind chosen.
async fn prepare(config: &mut Config, services: &[Service]) -> Result<()> {
    // Everything Halyard writes (bus store, read models, secrets, credentials) is its own: a
    // process sandbox running under another uid must not read any of it. The sandbox
    // supervisor opens exactly the paths its sandboxes need.
    halyard_platform::set_umask(0o077);
    std::fs::create_dir_all(&config.data_dir).with_context(|| format!("cannot create {}", config.data_dir.display()))?;
    make_private(&config.data_dir)?;
    if config.secret.is_empty() {
        config.secret = persistent(&config.data_dir, "secret", keys::random_secret)?;
    }
    if config.node_id.is_empty() {
        config.node_id = persistent(&config.data_dir, "node-id", || uuid_like(&keys::random_secret()))?;
    }
    if config.sandbox.kind == "auto" {
        // Docker where an engine answers and has the default spec's base image; the process
        // sandbox otherwise, so a machine without Docker still runs everything.
        let base = config.sandbox.spec(&config.sandbox.default_spec).map(|s| s.base_image).unwrap_or_default();
        config.sandbox.kind = match halyard_sandbox::docker_usable(&config.sandbox.docker_host, &base).await {
            Ok(()) => "docker".into(),
            Err(why) => {
                tracing::info!(%why, "using process sandboxes");
                "process".into()
            }
        };
    }
    if config.sandbox.kind == "docker" && config.sandbox.spec(&config.sandbox.default_spec).is_none() {
        bail!("sandbox.default_spec `{}` names no configured spec", config.sandbox.default_spec);
    }
    tracing::info!(kind = %config.sandbox.kind, "sandbox kind");
    if services.contains(&Service::Gateway) && config.api_keys.is_empty() {
        tracing::warn!("no API keys configured (HALYARD_API_KEYS=user:key,...): every request will be refused");
    }
    Ok(())
}

/// The bus, and one connection per service. Every connection authenticates, one NATS user per
/// service role (`nats/roles.json`). Embedded: Halyard makes the users, declares the topology
/// as `admin`, and gives each service its role. External: the operator's credentials, one
/// identity per process (or per role from a directory of `.creds` files); an open server gets
/// the topology declared by whoever connects, a secured one by `halyard setup-bus` with admin
/// credentials.
async fn connect_bus(
    config: &mut Config,
    services: &[Service],
    embedded: bool,
) -> Result<(Option<nats::EmbeddedNats>, Vec<(Service, async_nats::Client)>)> {
    let patience = Duration::from_secs(30);
    let (server, bus_creds) = if embedded {
        let roles = bus_auth::role_decls()?;
        let creds = bus_auth::BusCredentials::load_or_create(&config.data_dir, &roles)?;
        let authorization = bus_auth::authorization(&creds, &roles);
        let server =
            nats::EmbeddedNats::start(&config.nats_server, config.nats_port, &nats::store_dir(&config.data_dir), Some(authorization))
                .await?;
        config.nats_url = server.url().to_owned();
        (Some(server), Some(creds))
    } else {
        if config.nats_url.is_empty() {
            bail!("`halyard serve` needs a NATS server: set HALYARD_NATS_URL or --nats-url");
        }
        (None, None)
    };
    let auth_of = |role: &str| match &bus_creds {
        Some(creds) => creds.auth(role),
        None => config.nats_auth(role),
    };
    if bus_creds.is_some() || auth_of(bus_auth::ADMIN) == bus_auth::NatsAuth::None {
        let admin = nats::connect(&config.nats_url, bus_auth::ADMIN, &auth_of(bus_auth::ADMIN), patience).await?;
        let ack_wait = Duration::from_millis(config.command_ack_wait_ms);
        nats::ensure_topology_within(&async_nats::jetstream::new(admin.clone()), Duration::from_secs(60), ack_wait).await?;
        let _ = admin.drain().await;
    }
    let mut clients = Vec::new();
    for &service in services {
        clients.push((service, nats::connect(&config.nats_url, service.role(), &auth_of(service.role()), patience).await?));
    }
    Ok((server, clients))
}

/// The gateway's listeners, and their addresses (the API's, the apps'). They are bound first:
/// their addresses are known (a port of 0 chosen) before the agent runner is told where
/// Halyard's own MCP server is.
async fn bind_gateway(config: &mut Config, services: &[Service]) -> Result<(Option<GatewayListeners>, String, String)> {
    let mut listeners = None;
    let mut http = String::new();
    let mut apps = String::new();
    if services.contains(&Service::Gateway) {
        let listener =
            tokio::net::TcpListener::bind(&config.http_addr).await.with_context(|| format!("cannot listen on {}", config.http_addr))?;
        http = listener.local_addr()?.to_string();
        // The address links are made of where no public URL is set: a port of 0 is the one chosen
        // now (the host stays as configured: it is what the site checks compare).
        if let Some(host) = config.http_addr.strip_suffix(":0") {
            config.http_addr = format!("{host}:{}", listener.local_addr()?.port());
        }
        let apps_listener = if config.apps_addr.is_empty() { None } else { Some(halyard_gateway::bind(&config.apps_addr).await?) };
        if let Some(l) = &apps_listener {
            apps = l.local_addr()?.to_string();
        }
        listeners = Some((listener, apps_listener));
    }
    if config.mcp.halyard_url.is_empty() {
        let addr = if http.is_empty() { config.http_addr.clone() } else { http.clone() };
        config.mcp.halyard_url = format!("http://{}/mcp", addr.replacen("0.0.0.0", "127.0.0.1", 1).replacen("[::]", "[::1]", 1));
    }
    Ok((listeners, http, apps))
}

/// The gateway's API listener and its apps listener, if it serves apps.
type GatewayListeners = (tokio::net::TcpListener, Option<tokio::net::TcpListener>);

/// Metrics, health and readiness for operators, on their own address (none when unset); the
/// address served.
async fn serve_metrics(
    config: &Config,
    clients: &[(Service, async_nats::Client)],
    failed: Arc<std::sync::atomic::AtomicBool>,
) -> Result<String> {
    if config.metrics_addr.is_empty() {
        return Ok(String::new());
    }
    let handle = observe::install()?;
    let listener = tokio::net::TcpListener::bind(&config.metrics_addr)
        .await
        .with_context(|| format!("cannot listen on {} (HALYARD_METRICS_ADDR)", config.metrics_addr))?;
    let at = listener.local_addr()?.to_string();
    let ready = observe::Readiness { clients: clients.iter().map(|(_, c)| c.clone()).collect(), failed };
    tokio::spawn(observe::serve(listener, handle, ready));
    Ok(at)
}

/// One service on a task of its own, with its bus connection.
fn spawn_service(
    tasks: &mut JoinSet<(Service, Result<()>)>,
    service: Service,
    client: async_nats::Client,
    config: Arc<Config>,
    shutdown: shutdown::Shutdown,
    listeners: &mut Option<GatewayListeners>,
) {
    match service {
        Service::Gateway => {
            let Some((listener, apps_listener)) = listeners.take() else { return };
            tasks.spawn(async move {
                (service, halyard_gateway::serve(config, client, listener, apps_listener, shutdown).await.map_err(Into::into))
            });
        }
        Service::Conversations => {
            tasks.spawn(async move { (service, halyard_conversations::run(config, client, shutdown).await.map_err(Into::into)) });
        }
        Service::Sandbox => {
            tasks.spawn(async move { (service, halyard_sandbox::run(config, client, shutdown).await.map_err(Into::into)) });
        }
        Service::Agent => {
            tasks.spawn(async move { (service, halyard_agent::run(config, client, shutdown).await.map_err(Into::into)) });
        }
        Service::Callbacks => {
            tasks.spawn(async move { (service, halyard_callbacks::run(config, client, shutdown).await.map_err(Into::into)) });
        }
        Service::Titles => {
            tasks.spawn(async move { (service, halyard_titles::run(config, client, shutdown).await.map_err(Into::into)) });
        }
        Service::Automations => {
            tasks.spawn(async move { (service, halyard_automations::run(config, client, shutdown).await.map_err(Into::into)) });
        }
    }
}

/// Lets the services stop (15 seconds at most), flushes what they published, and stops the
/// embedded server.
async fn stop(mut tasks: JoinSet<(Service, Result<()>)>, clients: Vec<(Service, async_nats::Client)>, server: Option<nats::EmbeddedNats>) {
    let drain = async { while tasks.join_next().await.is_some() {} };
    if tokio::time::timeout(Duration::from_secs(15), drain).await.is_err() {
        tracing::warn!("services did not stop within 15 s");
    }
    // What was published reaches the server, unless no server is left to reach.
    for (_, client) in clients {
        let _ = tokio::time::timeout(Duration::from_secs(2), client.flush()).await;
    }
    if let Some(server) = server {
        server.stop().await;
    }
}

/// Takes away other users' access to what earlier versions (or a looser umask) left in the data
/// dir; the sandboxes' directories are the supervisor's to set.
fn make_private(data_dir: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    for entry in std::fs::read_dir(data_dir).with_context(|| format!("cannot read {}", data_dir.display()))?.flatten() {
        if entry.file_name() == "sandboxes" {
            continue;
        }
        let Ok(meta) = entry.path().symlink_metadata() else { continue };
        if meta.is_symlink() || meta.permissions().mode() & 0o077 == 0 {
            continue;
        }
        // Group and others lose everything; the owner keeps what it had.
        let mode = meta.permissions().mode() & 0o700;
        std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(mode))
            .with_context(|| format!("cannot make {} private", entry.path().display()))?;
    }
    Ok(())
}

async fn setup_bus(cli: &ServerArgs, env: &BTreeMap<String, String>) -> Result<()> {
    let config = load_config(cli, env)?;
    let _traces = telemetry::init_with(&config.log, config.log_format == "json", None);
    let _ = rustls::crypto::ring::default_provider().install_default();
    if config.nats_url.is_empty() {
        bail!("`halyard setup-bus` needs HALYARD_NATS_URL (or --nats-url)");
    }
    let admin = nats::connect(&config.nats_url, bus_auth::ADMIN, &config.nats_auth(bus_auth::ADMIN), Duration::from_secs(10)).await?;
    // A cluster that was just started may take a while to elect its leaders on a busy machine.
    let ack_wait = Duration::from_millis(config.command_ack_wait_ms);
    nats::ensure_topology_within(&async_nats::jetstream::new(admin.clone()), Duration::from_secs(180), ack_wait).await?;
    admin.drain().await?;
    println!("streams, consumers and buckets are declared on {}", config.nats_url);
    Ok(())
}

fn uuid_like(hex: &str) -> String {
    hex.chars().take(16).collect()
}

async fn wait_for_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

async fn executor(args: &ExecutorArgs) -> Result<()> {
    let ExecutorArgs {
        ref workspace,
        listen,
        output_cap,
        ref key_file,
        outlive_supervisor,
        tunnel_fd,
        ref egress_socket,
        disk_limit_mb,
        browser_idle_secs,
        vscode_idle_secs,
    } = *args;
    // The session key comes on stdin (or in a file deleted once read), never in the environment
    // or on the command line, where other processes of the sandbox could read it.
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin());
    let session_key = match &key_file {
        Some(path) => {
            let key = std::fs::read_to_string(path).with_context(|| format!("cannot read the session key file {}", path.display()))?;
            let _ = std::fs::remove_file(path);
            key.trim().to_owned()
        }
        None => {
            let mut line = String::new();
            stdin.read_line(&mut line).await?;
            line.trim().to_owned()
        }
    };
    if session_key.is_empty() {
        bail!("no session key given");
    }
    let listener = halyard_executor::bind(listen).await?;
    if let Some(fd) = tunnel_fd {
        #[allow(unsafe_code)]
        // SAFETY: the supervisor hands this descriptor to us alone, for this purpose.
        tokio::spawn(async move {
            if let Err(e) = unsafe { halyard_executor::tunnel::serve_fd(fd) }.await {
                tracing::error!(error = %e, "the sandbox's tunnel stopped");
            }
        });
    }
    if let Some(socket) = egress_socket {
        halyard_executor::network::relay_to_proxy(socket.clone()).await.context("cannot listen on the egress proxy's port")?;
    }
    println!("HALYARD_EXECUTOR_LISTENING {}", listener.local_addr()?);
    let config = halyard_executor::ExecutorConfig {
        workspace: workspace.clone(),
        session_key,
        output_cap,
        disk_limit: disk_limit_mb << 20,
        browser_idle: std::time::Duration::from_secs(browser_idle_secs),
        vscode_idle: std::time::Duration::from_secs(vscode_idle_secs),
    };
    // The supervisor keeps our standard input open while it lives: end-of-file means it is
    // gone (stopped or crashed), and a sandbox nobody supervises must not linger.
    let lifeline = key_file.is_none() && !outlive_supervisor;
    let parent_gone = async move {
        if !lifeline {
            return std::future::pending().await;
        }
        let mut rest = String::new();
        while let Ok(n) = stdin.read_line(&mut rest).await {
            if n == 0 {
                break;
            }
            rest.clear();
        }
    };
    halyard_executor::serve(config, listener, async {
        tokio::select! {
            _ = wait_for_signal() => {}
            _ = parent_gone => {}
        }
    })
    .await?;
    Ok(())
}
