//! What the egress proxy adds (issue 53): connections and downloads from this process to a
//! server in a container of its own network, made directly (the baseline) and through the
//! proxy, in turns within each repetition:
//!
//! - `direct`: a TCP connection to the server;
//! - `proxy`: `CONNECT sink.test:9000` on the Unix socket the proxy serves a process sandbox
//!   (the proxy's own work: decide, resolve, connect, relay, count);
//! - `relay`: the same through the executor's relay on `127.0.0.1:3128`, the whole path a
//!   process sandbox's tool takes (a container's tool reaches the proxy over TCP instead).
//!
//! Per connection: the median time to open it, ask for 2 bytes and read them to the end; the
//! figure is the median less `direct`'s (target under 1 ms). Per MB: a 64 MB download's rate, and
//! the loss against `direct` (target under 5 %). CPU: this process's (client and proxy) per
//! connection and per MB, and the proxy's share (less `direct`'s, which is the client's).

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use halyard_protocol::egress::{EgressPolicy, EgressRules};
use halyard_protocol::{ConversationId, SandboxId};
use halyard_sandbox::egress_proxy::{EgressProxy, Reach, Tenant};
use halyard_tests::docker::docker;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Sends the number of bytes each connection asks for (its first line), then closes.
const SINK: &str = r#"
import socket, threading
chunk = memoryview(b"x" * (1 << 20))
def serve(c):
    n = int(c.makefile("rb").readline())
    while n > 0:
        k = min(n, len(chunk))
        c.sendall(chunk[:k])
        n -= k
    c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 9000))
s.listen(512)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

/// The sink's container and network, removed when dropped.
struct Sink {
    name: String,
    network: String,
    ip: std::net::IpAddr,
    _dir: tempfile::TempDir,
}

impl Sink {
    fn start() -> Result<Self> {
        let dir = tempfile::tempdir()?;
        std::fs::write(dir.path().join("sink.py"), SINK)?;
        std::fs::set_permissions(dir.path().join("sink.py"), std::os::unix::fs::PermissionsExt::from_mode(0o644))?;
        let suffix = uuid::Uuid::new_v4().simple().to_string()[..10].to_owned();
        let (name, network) = (format!("halyard-load-sink-{suffix}"), format!("halyard-load-sink-{suffix}"));
        docker(&["network", "create", &network]);
        let mount = format!("{}:/srv:ro", dir.path().display());
        docker(&["run", "-d", "--name", &name, "--network", &network, "-v", &mount, "halyard-base:bookworm", "python3", "/srv/sink.py"]);
        let ip: std::net::IpAddr = docker(&["inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", &name]).parse()?;
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect((ip, 9000)).is_err() {
            ensure!(Instant::now() < deadline, "the sink did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(Self { name, network, ip, _dir: dir })
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        let _ = std::process::Command::new("docker").args(["rm", "-f", &self.name]).output();
        let _ = std::process::Command::new("docker").args(["network", "rm", &self.network]).output();
    }
}

#[derive(Clone, Copy, Debug)]
enum Path {
    Direct,
    Proxy,
    Relay,
}

impl Path {
    const ALL: [Path; 3] = [Path::Direct, Path::Proxy, Path::Relay];

    fn name(self) -> &'static str {
        match self {
            Path::Direct => "direct",
            Path::Proxy => "proxy",
            Path::Relay => "relay",
        }
    }
}

/// Asks for `n` bytes over one new connection by `path`, and reads them to the end.
async fn fetch(path: Path, sink: std::net::IpAddr, socket: &std::path::Path, n: u64) -> Result<u64> {
    match path {
        Path::Direct => {
            let mut s = tokio::net::TcpStream::connect((sink, 9000)).await?;
            s.set_nodelay(true)?;
            ask(&mut s, n, false).await
        }
        Path::Proxy => ask(&mut tokio::net::UnixStream::connect(socket).await?, n, true).await,
        Path::Relay => {
            let mut s = tokio::net::TcpStream::connect(("127.0.0.1", halyard_protocol::executor::EGRESS_PROXY_PORT)).await?;
            s.set_nodelay(true)?;
            ask(&mut s, n, true).await
        }
    }
}

async fn ask<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, n: u64, tunnel: bool) -> Result<u64> {
    if tunnel {
        s.write_all(b"CONNECT sink.test:9000 HTTP/1.1\r\nHost: sink.test:9000\r\n\r\n").await?;
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            head.push(s.read_u8().await?);
        }
        ensure!(head.starts_with(b"HTTP/1.1 200"), "the proxy refused: {}", String::from_utf8_lossy(&head));
    }
    s.write_all(format!("{n}\n").as_bytes()).await?;
    let mut buf = vec![0u8; 256 * 1024];
    let mut got = 0u64;
    loop {
        let k = s.read(&mut buf).await?;
        if k == 0 {
            break;
        }
        got += k as u64;
    }
    ensure!(got == n, "asked for {n} bytes, got {got}");
    Ok(got)
}

/// This process's CPU seconds so far (user and system).
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    #[allow(unsafe_code)]
    let usage = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u
    };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(usage.ru_utime) + t(usage.ru_stime)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn round(x: f64, places: i32) -> f64 {
    let f = 10f64.powi(places);
    (x * f).round() / f
}

/// One repetition: each path's connection latency and download rate, with CPU.
async fn once(sink: std::net::IpAddr, socket: &std::path::Path, connections: usize, mb: u64) -> Result<Value> {
    let mut run = serde_json::Map::new();
    for path in Path::ALL {
        let cpu = cpu_seconds();
        let mut times = Vec::with_capacity(connections);
        for _ in 0..connections {
            let t = Instant::now();
            fetch(path, sink, socket, 2).await?;
            times.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        let cpu_per_connection_ms = (cpu_seconds() - cpu) * 1000.0 / connections as f64;
        let cpu = cpu_seconds();
        let mut rates = Vec::new();
        for _ in 0..3 {
            let t = Instant::now();
            fetch(path, sink, socket, mb << 20).await?;
            rates.push(mb as f64 / t.elapsed().as_secs_f64());
        }
        let cpu_per_mb_ms = (cpu_seconds() - cpu) * 1000.0 / (3 * mb) as f64;
        run.insert(
            path.name().to_owned(),
            json!({
                "connection_ms": round(median(times), 3),
                "mb_per_s": round(median(rates), 1),
                "cpu_ms_per_connection": round(cpu_per_connection_ms, 3),
                "cpu_ms_per_mb": round(cpu_per_mb_ms, 3),
            }),
        );
    }
    let measured = run.clone();
    let at = |path: &str, k: &str| measured[path][k].as_f64().unwrap_or(0.0);
    for path in ["proxy", "relay"] {
        let added = json!({
            "connection_ms": round(at(path, "connection_ms") - at("direct", "connection_ms"), 3),
            "throughput_loss_pct": round((1.0 - at(path, "mb_per_s") / at("direct", "mb_per_s")) * 100.0, 1),
            "cpu_ms_per_connection": round(at(path, "cpu_ms_per_connection") - at("direct", "cpu_ms_per_connection"), 3),
            "cpu_ms_per_mb": round(at(path, "cpu_ms_per_mb") - at("direct", "cpu_ms_per_mb"), 3),
            "over_direct_connection": round(at(path, "connection_ms") / at("direct", "connection_ms"), 2),
        });
        run.insert(format!("{path}_added"), added);
    }
    Ok(Value::Object(run))
}

pub async fn run(reps: usize) -> Result<Value> {
    let nats = halyard_tests::NatsServer::start();
    let js = async_nats::jetstream::new(async_nats::connect(&nats.url).await?);
    // Where the proxy's reports of traffic go (nobody reads them here).
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "LOAD_EGRESS".into(),
        subjects: vec!["halyard.cmd.>".into()],
        ..Default::default()
    })
    .await?;
    let sink = Sink::start()?;
    let reach = Reach { resolve: [("sink.test".to_owned(), sink.ip)].into(), private: true, sandbox_networks: Vec::new() };
    let proxy = EgressProxy::new(reach, js);
    let dir = tempfile::tempdir()?;
    let socket = dir.path().join("egress.sock");
    let policy = EgressPolicy { allow: vec!["sink.test".into()], ..Default::default() };
    let tenant = Tenant {
        sandbox: SandboxId::new(),
        conversation: Some(ConversationId::new()),
        rules: EgressRules::default().with("environment", Some(&policy)),
    };
    proxy.admit_socket(&socket, None, tenant).context("the proxy's socket")?;
    halyard_executor::network::relay_to_proxy(socket.clone()).await.context("the relay's port (3128 on loopback)")?;
    let (connections, mb) = (crate::scaled(300, 20), crate::scaled(64, 4));
    // Warm-up: connections, the sink's threads, page cache.
    once(sink.ip, &socket, 20, 4).await?;
    let mut result = crate::record::repeated("egress", reps, |_| once(sink.ip, &socket, connections, mb)).await?;
    result["connections_per_repetition"] = json!(connections);
    result["download_mb"] = json!(mb);
    result["targets"] = json!({"connection_ms_added": 1.0, "throughput_loss_pct": 5.0});
    Ok(result)
}
