//! The egress proxy: the one way out of a sandbox held to an outbound policy by domain
//! ([`halyard_protocol::egress`]). It listens on the host's address on the `policy` network
//! ([`crate::network`]), whose firewall lets nothing else leave, and knows each container there
//! by its address ([`EgressProxy::admit`]); a process sandbox, whose own network has no route
//! out, reaches it through a Unix socket made for it alone ([`EgressProxy::admit_socket`]),
//! which its executor relays from the sandbox's loopback.
//!
//! Per connection it reads one request head: `CONNECT host:port` (a TLS tunnel, never
//! decrypted) or a plain HTTP request with an absolute URL. The name is decided by the sandbox's
//! rules; the proxy resolves it itself (fixed names first, `HALYARD_EGRESS_RESOLVE`), so the
//! sandbox never chooses the address ([`Reach`]), and refuses, whatever the name (no DNS
//! rebinding onto Halyard's own services or another sandbox): addresses of this host, of the
//! deployment's sandbox networks, the classes webhooks are refused (loopback, link-local,
//! reserved), and private ones unless the operator allows them (`HALYARD_EGRESS_ADDRESS_ALLOW`).
//! A raw address is refused: policies name hosts. A refusal is a 403 whose body says
//! why, and a `network_blocked` event in the conversation (sent to its agent runner, the log's
//! one writer, which shows the model).
//!
//! A plain HTTP request is forwarded alone (`Connection: close`, its body by `Content-Length`)
//! and nothing more is read from the sandbox: a second request on the connection cannot slip
//! past the decision, nor a write past a read-only policy. A sandbox holds at most
//! `MAX_OPEN_PER_SANDBOX` connections through the proxy at once (429 past it).

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream;
use halyard_platform::bus;
use halyard_platform::netaddr::Cidr;
use halyard_protocol::command::AgentCommand;
use halyard_protocol::egress::{EgressRules, blocked_message};
use halyard_protocol::{ConversationId, SandboxId, subjects};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The port the proxy listens on, on the `policy` network's gateway.
pub const PROXY_PORT: u16 = halyard_protocol::executor::EGRESS_PROXY_PORT;

/// Each direction's buffer while relaying.
const RELAY_BUFFER: usize = 64 * 1024;
/// Largest request head read.
const MAX_HEAD: usize = 16 * 1024;
/// How long a sandbox has to send its request head, and the proxy to reach the destination.
const PATIENCE: Duration = Duration::from_secs(10);
/// Connections one sandbox may hold through the proxy at once: a hostile one cannot use up
/// the supervisor's descriptors.
const MAX_OPEN_PER_SANDBOX: usize = 256;

/// How many connections each sandbox holds through the proxy now.
#[derive(Clone, Default)]
struct Seats(Arc<Mutex<HashMap<SandboxId, usize>>>);

/// One connection's seat, given back when it ends.
struct Seat(Seats, SandboxId);

impl Seats {
    /// A seat for one more connection of `sandbox`, if it holds fewer than `max`.
    fn take(&self, sandbox: SandboxId, max: usize) -> Option<Seat> {
        let mut open = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let n = open.entry(sandbox).or_default();
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(Seat(self.clone(), sandbox))
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        let mut open = self.0.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = open.get_mut(&self.1) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.1);
            }
        }
    }
}

/// A sandbox the proxy serves.
#[derive(Clone, Debug)]
pub struct Tenant {
    pub sandbox: SandboxId,
    pub conversation: Option<ConversationId>,
    /// Its layers, the deployment's included.
    pub rules: EgressRules,
}

/// Where names lead and which addresses the proxy connects to.
#[derive(Clone, Debug, Default)]
pub struct Reach {
    /// Names resolved to these addresses instead of asking DNS.
    pub resolve: BTreeMap<String, IpAddr>,
    /// Private ranges may be reached (the operator's `private` in `HALYARD_EGRESS_ADDRESS_ALLOW`).
    pub private: bool,
    /// The deployment's sandbox networks: never reached, private or not.
    pub sandbox_networks: Vec<Cidr>,
}

/// How a connection reached the proxy, which says whose it is: from a container's address on
/// the `policy` network, or through the Unix socket served for one process sandbox.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Door {
    Address(IpAddr),
    Socket(SandboxId),
}

/// The proxy's state: who is behind each door, and how names resolve.
pub struct EgressProxy {
    /// Where containers reach it (none on a host without Docker).
    listen: std::sync::OnceLock<SocketAddr>,
    tenants: Mutex<HashMap<Door, Tenant>>,
    /// The accept loop of each process sandbox's socket.
    sockets: Mutex<HashMap<SandboxId, (std::path::PathBuf, tokio::task::JoinHandle<()>)>>,
    seats: Seats,
    /// What allowed connections carry, reported every few seconds.
    usage: Arc<crate::egress_usage::Usage>,
    reach: Reach,
    js: jetstream::Context,
}

/// Why a connection was not made: the status, and the words the sandbox gets.
struct Refused {
    status: u16,
    text: String,
    /// A policy's rule (recorded as `network_blocked`), not a malformed request or an
    /// unreachable server.
    rule: Option<(String, u16, String)>,
}

impl EgressProxy {
    /// A proxy with no way in yet: containers reach it once it [`listens`](Self::listen_tcp),
    /// process sandboxes through the sockets [`admit_socket`](Self::admit_socket) makes.
    pub fn new(reach: Reach, js: jetstream::Context) -> Arc<Self> {
        let usage = Arc::new(crate::egress_usage::Usage::default());
        tokio::spawn(report_usage(usage.clone(), js.clone()));
        Arc::new(Self {
            listen: std::sync::OnceLock::new(),
            tenants: Mutex::new(HashMap::new()),
            sockets: Mutex::new(HashMap::new()),
            seats: Seats::default(),
            usage,
            reach,
            js,
        })
    }

    /// Listens at `listen` (the `policy` network's gateway) for containers, until the process
    /// ends.
    pub async fn listen_tcp(self: &Arc<Self>, listen: SocketAddr) -> std::io::Result<()> {
        let listener = TcpListener::bind(listen).await?;
        let _ = self.listen.set(listen);
        let serving = self.clone();
        tokio::spawn(async move {
            loop {
                // (A failed accept, out of descriptors say, is waited out rather than spun on.)
                let Ok((client, peer)) = listener.accept().await else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let _ = client.set_nodelay(true);
                let proxy = serving.clone();
                tokio::spawn(async move { proxy.serve(client, Door::Address(peer.ip())).await });
            }
        });
        Ok(())
    }

    /// Serves the container at `ip` by `tenant`'s rules (replacing what was there).
    pub fn admit(&self, ip: IpAddr, tenant: Tenant) {
        let mut tenants = self.tenants.lock().unwrap_or_else(|p| p.into_inner());
        tenants.retain(|_, t| t.sandbox != tenant.sandbox);
        tenants.insert(Door::Address(ip), tenant);
    }

    /// Serves the process sandbox of `tenant` by its rules through a Unix socket at `path`,
    /// which only `owner` (its uid) may connect to (`None`, under bubblewrap: only the sandbox
    /// sees the path); made once, and kept while its rules change.
    pub fn admit_socket(self: &Arc<Self>, path: &std::path::Path, owner: Option<u32>, tenant: Tenant) -> std::io::Result<()> {
        let sandbox = tenant.sandbox;
        let mut sockets = self.sockets.lock().unwrap_or_else(|p| p.into_inner());
        if !sockets.contains_key(&sandbox) {
            // Left by a supervisor that crashed: nobody serves it.
            let _ = std::fs::remove_file(path);
            let std_listener = std::os::unix::net::UnixListener::bind(path)?;
            // Its uid's alone (isolation `uid`: the directory is root's, so nothing can swap
            // the socket for a link before these). Under bubblewrap every sandbox is Halyard's
            // uid and sees only its own directory, which it may write: nothing is changed by
            // path there, which would follow a link it planted.
            if let Some(uid) = owner {
                std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
                std::os::unix::fs::chown(path, Some(uid), Some(uid))?;
            }
            std_listener.set_nonblocking(true)?;
            let listener = tokio::net::UnixListener::from_std(std_listener)?;
            let serving = self.clone();
            let task = tokio::spawn(async move {
                loop {
                    let Ok((client, _)) = listener.accept().await else {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    };
                    let proxy = serving.clone();
                    tokio::spawn(async move { proxy.serve(client, Door::Socket(sandbox)).await });
                }
            });
            sockets.insert(sandbox, (path.to_owned(), task));
        }
        let mut tenants = self.tenants.lock().unwrap_or_else(|p| p.into_inner());
        tenants.retain(|_, t| t.sandbox != sandbox);
        tenants.insert(Door::Socket(sandbox), tenant);
        Ok(())
    }

    /// Stops serving `sandbox` (its container went away or left the network, or it is no
    /// longer held to a policy). Connections already made run on.
    pub fn forget(&self, sandbox: SandboxId) {
        self.tenants.lock().unwrap_or_else(|p| p.into_inner()).retain(|_, t| t.sandbox != sandbox);
        if let Some((path, task)) = self.sockets.lock().unwrap_or_else(|p| p.into_inner()).remove(&sandbox) {
            task.abort();
            let _ = std::fs::remove_file(path);
        }
    }

    /// The variables a sandbox's tools take their proxy from, as it reaches the proxy through
    /// `door` (a process sandbox: its own loopback, which its executor relays).
    pub fn variables(&self, door: Door) -> BTreeMap<String, String> {
        let url = match (door, self.listen.get()) {
            (Door::Address(_), Some(listen)) => format!("http://{listen}"),
            _ => format!("http://127.0.0.1:{PROXY_PORT}"),
        };
        let mut vars = BTreeMap::new();
        for name in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
            vars.insert(name.to_owned(), url.clone());
        }
        for name in ["NO_PROXY", "no_proxy"] {
            vars.insert(name.to_owned(), "localhost,127.0.0.1,::1".to_owned());
        }
        vars
    }

    async fn serve<S: AsyncRead + AsyncWrite + Unpin>(self: Arc<Self>, mut client: S, door: Door) {
        let tenant = self.tenants.lock().unwrap_or_else(|p| p.into_inner()).get(&door).cloned();
        let outcome = match tenant {
            None => Err(Refused { status: 403, text: "this address is not a sandbox the egress proxy serves".into(), rule: None }),
            Some(t) => match self.seats.take(t.sandbox, MAX_OPEN_PER_SANDBOX) {
                None => Err(Refused {
                    status: 429,
                    text: format!("this sandbox already holds {MAX_OPEN_PER_SANDBOX} connections through the proxy; close some"),
                    rule: None,
                }),
                Some(_seat) => {
                    let relayed = self.relay(&mut client, &t).await;
                    if let Err(Refused { rule: Some((host, port, rule)), .. }) = &relayed {
                        self.record(&t, host, *port, rule);
                    }
                    relayed
                }
            },
        };
        if let Err(r) = outcome {
            let reason = match r.status {
                400 => "Bad Request",
                403 => "Forbidden",
                411 => "Length Required",
                429 => "Too Many Requests",
                _ => "Bad Gateway",
            };
            let body = format!("halyard: {}\n", r.text);
            let head = format!(
                "HTTP/1.1 {} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nX-Halyard-Egress: refused\r\nConnection: close\r\n\r\n",
                r.status,
                body.len()
            );
            let _ = client.write_all(format!("{head}{body}").as_bytes()).await;
            let _ = client.shutdown().await;
        }
    }

    /// Tells the conversation's agent runner (which writes its log) of a refusal.
    fn record(&self, tenant: &Tenant, host: &str, port: u16, rule: &str) {
        tracing::info!(sandbox_id = %tenant.sandbox, host, port, rule, "egress refused");
        let Some(conversation_id) = tenant.conversation else { return };
        let cmd = AgentCommand::RecordNetworkBlocked { conversation_id, host: host.to_owned(), port, rule: rule.to_owned() };
        let js = self.js.clone();
        tokio::spawn(async move {
            if let Err(e) = bus::send(&js, subjects::agent_network_command(conversation_id), cmd, None).await {
                tracing::warn!(%conversation_id, error = %e, "cannot record a refused connection");
            }
        });
    }

    /// Reads the request, decides, connects and relays.
    async fn relay<S: AsyncRead + AsyncWrite + Unpin>(&self, client: &mut S, tenant: &Tenant) -> Result<(), Refused> {
        let (head, rest) = tokio::time::timeout(PATIENCE, read_head(client)).await.map_err(|_| bad("no request head within 10 s"))??;
        let req = Request::parse(&head)?;
        let method = (req.method != "CONNECT").then_some(req.method.as_str());
        let blocked = |rule: String| Refused {
            status: 403,
            text: blocked_message(&req.host, req.port, &rule),
            rule: Some((req.host.clone(), req.port, rule)),
        };
        if req.host.trim_matches(['[', ']']).parse::<IpAddr>().is_ok() {
            return Err(blocked("a raw address (outbound policies name hosts)".into()));
        }
        tenant.rules.decide(&req.host, method).map_err(|r| blocked(r.rule))?;
        let addr = self.resolve(&req.host, req.port).await.map_err(blocked)?;
        let mut upstream = tokio::time::timeout(PATIENCE, TcpStream::connect(addr))
            .await
            .map_err(|_| gateway(format!("{}:{} did not answer within 10 s", req.host, req.port)))?
            .map_err(|e| gateway(format!("cannot connect to {}:{}: {e}", req.host, req.port)))?;
        let _ = upstream.set_nodelay(true);
        // Counted from here (the request head too): what the sandbox exchanged with it.
        let counter = tenant.conversation.map(|c| self.usage.open(c, &req.host, req.port));
        if let Some(c) = &counter {
            c.sent((head.len() + rest.len()) as u64);
        }
        let mut client = crate::egress_usage::Counted::new(client, counter);
        if req.method == "CONNECT" {
            client.write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n").await.map_err(|e| gateway(e.to_string()))?;
            upstream.write_all(&rest).await.map_err(|e| gateway(e.to_string()))?;
            // Buffers of 64 KiB, not tokio's 8: a download through the proxy cost about a
            // quarter of its rate in system calls with 8 (`load/results/egress.json`).
            let _ = tokio::io::copy_bidirectional_with_sizes(&mut client, &mut upstream, RELAY_BUFFER, RELAY_BUFFER).await;
            return Ok(());
        }
        upstream.write_all(req.forwarded_head().as_bytes()).await.map_err(|e| gateway(e.to_string()))?;
        let body = req.content_length;
        let already = rest.len().min(body as usize);
        upstream.write_all(&rest[..already]).await.map_err(|e| gateway(e.to_string()))?;
        copy_exact(&mut client, &mut upstream, body - already as u64).await.map_err(|e| gateway(e.to_string()))?;
        let _ = tokio::io::copy(&mut upstream, &mut client).await;
        let _ = client.shutdown().await;
        Ok(())
    }

    /// The address `host` is reached at: a fixed one, else DNS's first that is not
    /// [`Reach::forbidden`].
    async fn resolve(&self, host: &str, port: u16) -> Result<SocketAddr, String> {
        let name = host.trim_end_matches('.').to_ascii_lowercase();
        let candidates: Vec<SocketAddr> = match self.reach.resolve.get(&name) {
            Some(ip) => vec![SocketAddr::new(*ip, port)],
            None => tokio::net::lookup_host((name.as_str(), port)).await.map_err(|e| format!("{name} does not resolve ({e})"))?.collect(),
        };
        let mut refused = None;
        for addr in candidates {
            match self.reach.forbidden(addr.ip()) {
                None => return Ok(addr),
                Some(why) => refused = Some(format!("{name} resolves to {} ({why} address)", addr.ip())),
            }
        }
        Err(refused.unwrap_or_else(|| format!("{name} resolves to no address")))
    }
}

/// Sends each conversation's traffic since the last report to its agent runner, every
/// [`REPORT_EVERY`](crate::egress_usage::REPORT_EVERY) (nothing when nothing passed).
async fn report_usage(usage: Arc<crate::egress_usage::Usage>, js: jetstream::Context) {
    loop {
        tokio::time::sleep(crate::egress_usage::REPORT_EVERY).await;
        for (conversation_id, destinations) in usage.take() {
            let cmd = AgentCommand::RecordNetworkUsed { conversation_id, destinations };
            if let Err(e) = bus::send(&js, subjects::agent_network_command(conversation_id), cmd, None).await {
                tracing::warn!(%conversation_id, error = %e, "cannot report the sandbox's traffic");
            }
        }
    }
}

impl Reach {
    /// Why the proxy never connects to `ip`, if it does not: a sandbox network's address; the
    /// address classes webhooks are refused ([`halyard_platform::net::restricted_class`]), but
    /// private ones where the operator allows them; any address of this host.
    pub fn forbidden(&self, ip: IpAddr) -> Option<&'static str> {
        if self.sandbox_networks.iter().any(|n| n.contains(ip)) {
            return Some("a sandbox network's");
        }
        match halyard_platform::net::restricted_class(ip) {
            Some("private") if self.private => {}
            None => {}
            Some(class) => return Some(class),
        }
        // An address a socket of this host can bind to is one of the host's own: Halyard's
        // services may listen there.
        std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok().then_some("Halyard's host's own")
    }
}

fn bad(text: impl Into<String>) -> Refused {
    Refused { status: 400, text: text.into(), rule: None }
}

fn gateway(text: String) -> Refused {
    Refused { status: 502, text, rule: None }
}

/// One request head as the proxy needs it.
struct Request {
    method: String,
    host: String,
    port: u16,
    /// Origin-form target (`/path?query`) of a plain HTTP request.
    path: String,
    version: u8,
    headers: Vec<(String, Vec<u8>)>,
    content_length: u64,
}

impl Request {
    fn parse(head: &[u8]) -> Result<Self, Refused> {
        let mut headers = [httparse::EMPTY_HEADER; 100];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(head) {
            Ok(httparse::Status::Complete(_)) => {}
            _ => return Err(bad("not an HTTP request head")),
        }
        let method = req.method.unwrap_or_default().to_owned();
        let target = req.path.unwrap_or_default();
        let version = req.version.unwrap_or(1);
        let headers: Vec<(String, Vec<u8>)> = req.headers.iter().map(|h| (h.name.to_owned(), h.value.to_vec())).collect();
        let header =
            |name: &str| headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| String::from_utf8_lossy(v).into_owned());
        if header("transfer-encoding").is_some() {
            return Err(Refused { status: 411, text: "send the request body with a Content-Length".into(), rule: None });
        }
        let content_length = match header("content-length") {
            Some(v) => v.trim().parse().map_err(|_| bad("a Content-Length that is not a number"))?,
            None => 0,
        };
        let (authority, path, default_port) = if method == "CONNECT" {
            (target.to_owned(), String::new(), 443)
        } else {
            let rest = target
                .strip_prefix("http://")
                .ok_or_else(|| bad("send plain HTTP through the proxy with an absolute http:// URL, and TLS with CONNECT"))?;
            let (authority, path) = rest.find('/').map_or((rest, "/"), |i| (&rest[..i], &rest[i..]));
            (authority.to_owned(), path.to_owned(), 80)
        };
        let (host, port) = split_authority(&authority, default_port).ok_or_else(|| bad(format!("`{authority}` is not host:port")))?;
        Ok(Self { method, host, port, path, version, headers, content_length })
    }

    /// The head sent on: origin-form, without the proxy's own headers, one request only.
    fn forwarded_head(&self) -> String {
        let mut head = format!("{} {} HTTP/1.{}\r\n", self.method, self.path, self.version);
        let hop = ["proxy-connection", "proxy-authorization", "connection", "keep-alive"];
        for (name, value) in self.headers.iter().filter(|(n, _)| !hop.iter().any(|h| n.eq_ignore_ascii_case(h))) {
            head.push_str(&format!("{name}: {}\r\n", String::from_utf8_lossy(value)));
        }
        head.push_str("Connection: close\r\n\r\n");
        head
    }
}

/// `host[:port]` (`[v6]:port` too), with `default` for a missing port.
fn split_authority(authority: &str, default: u16) -> Option<(String, u16)> {
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, _)) if !h.ends_with(']') && h.contains(':') => (authority, None),
        Some((h, p)) => (h, Some(p)),
        None => (authority, None),
    };
    let port = match port {
        Some(p) => p.parse().ok().filter(|p| *p != 0)?,
        None => default,
    };
    let host = host.trim_matches(['[', ']']).to_owned();
    (!host.is_empty()).then_some((host, port))
}

/// Reads up to the end of the request head: the head, and what came after it.
async fn read_head<R: AsyncRead + Unpin>(r: &mut R) -> Result<(Vec<u8>, Vec<u8>), Refused> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(end + 4);
            return Ok((buf, rest));
        }
        if buf.len() > MAX_HEAD {
            return Err(bad("a request head over 16 KiB"));
        }
        let n = r.read(&mut chunk).await.map_err(|e| bad(e.to_string()))?;
        if n == 0 {
            return Err(bad("the connection closed before a request head"));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Copies exactly `n` bytes from `from` to `to`.
async fn copy_exact<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(from: &mut R, to: &mut W, n: u64) -> std::io::Result<()> {
    let copied = tokio::io::copy(&mut from.take(n), to).await?;
    if copied < n {
        return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the request body ended early"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_heads_are_read_as_the_proxy_needs_them() {
        let r = Request::parse(b"CONNECT registry.test:443 HTTP/1.1\r\nHost: registry.test:443\r\n\r\n").ok().unwrap();
        assert_eq!((r.method.as_str(), r.host.as_str(), r.port), ("CONNECT", "registry.test", 443));
        let r = Request::parse(b"GET http://registry.test/a?b HTTP/1.1\r\nHost: registry.test\r\nProxy-Connection: keep-alive\r\n\r\n")
            .ok()
            .unwrap();
        assert_eq!((r.host.as_str(), r.port, r.path.as_str()), ("registry.test", 80, "/a?b"));
        assert_eq!(r.forwarded_head(), "GET /a?b HTTP/1.1\r\nHost: registry.test\r\nConnection: close\r\n\r\n");
        let r = Request::parse(b"POST http://x.test:8080 HTTP/1.0\r\nContent-Length: 3\r\n\r\n").ok().unwrap();
        assert_eq!((r.port, r.path.as_str(), r.content_length), (8080, "/", 3));
        assert_eq!(Request::parse(b"GET /relative HTTP/1.1\r\n\r\n").err().unwrap().status, 400);
        assert_eq!(Request::parse(b"POST http://x.test/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n").err().unwrap().status, 411);
        assert_eq!(split_authority("[::1]:8443", 443), Some(("::1".into(), 8443)));
        assert_eq!(split_authority("x.test:0", 443), None);
    }

    #[test]
    fn a_sandbox_holds_a_bounded_number_of_connections() {
        let (seats, a, b) = (Seats::default(), SandboxId::new(), SandboxId::new());
        let held: Vec<Seat> = (0..3).map(|_| seats.take(a, 3).unwrap()).collect();
        assert!(seats.take(a, 3).is_none());
        assert!(seats.take(b, 3).is_some(), "another sandbox's seats are its own");
        drop(held);
        assert!(seats.take(a, 3).is_some());
        assert!(seats.0.lock().unwrap().get(&a).is_none_or(|n| *n == 0));
    }

    #[test]
    fn the_hosts_own_and_special_addresses_are_never_reached() {
        let open = Reach { private: true, sandbox_networks: vec![Cidr::parse("172.31.0.0/16").unwrap()], ..Default::default() };
        for reach in [&Reach::default(), &open] {
            for ip in ["127.0.0.1", "127.9.9.9", "169.254.169.254", "0.0.0.0", "224.0.0.1", "::1", "::ffff:127.0.0.1", "fe80::1"] {
                assert!(reach.forbidden(ip.parse().unwrap()).is_some(), "{ip}");
            }
            // Documentation addresses are reserved.
            assert_eq!(reach.forbidden("192.0.2.10".parse().unwrap()), Some("reserved"));
            assert!(reach.forbidden("8.8.8.8".parse().unwrap()).is_none());
        }
        // A private address only where the operator allows them, and never a sandbox's.
        assert_eq!(Reach::default().forbidden("10.251.7.9".parse().unwrap()), Some("private"));
        assert!(open.forbidden("10.251.7.9".parse().unwrap()).is_none());
        assert_eq!(open.forbidden("172.31.0.5".parse().unwrap()), Some("a sandbox network's"));
    }
}
