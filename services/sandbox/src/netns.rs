//! A network of its own for every process sandbox (isolation modes `uid` and `bwrap`).
//!
//! Without it, a process sandbox shares the host's loopback: its apps listen where the web
//! workspace is served (and so receive the user's session cookie when the agent sends the
//! browser there), and it reaches the gateway, NATS and every other sandbox's ports directly.
//! In a namespace of its own it has a loopback of its own, and nothing of the host's:
//!
//! - **In:** the executor is handed a Unix socket that only Halyard's user can connect to
//!   (`halyard_executor::tunnel`); a forwarder process (`halyard sandbox-forward`, in the
//!   sandbox's process group, so it outlives a crashed supervisor and ends, pauses and resumes
//!   with the sandbox) listens on the publish host (never the address the UI is served on) and
//!   forwards each of the sandbox's ports (the executor's API, `WORKER_1`, `WORKER_2`) through
//!   it.
//! - **Out:** `slirp4netns` (user-mode NAT, run by the supervisor outside the sandbox, in the
//!   executor's process group so it stops, pauses and resumes with it) gives egress class
//!   `open` a way out, with the host's loopback refused (`--disable-host-loopback`); egress
//!   `none` has no way out at all, and `policy` only the egress proxy, which the executor
//!   relays from its loopback (`halyard_executor::network`). A running sandbox moves onto
//!   `policy` by its NAT ending ([`stop_slirp`]), and back by its starting again.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, UnixStream};
use tokio::task::JoinHandle;

/// The descriptor the tunnel socket has in the executor.
pub const TUNNEL_FD: i32 = 3;

/// In the child, before `exec` (so only async-signal-safe calls): if `new_netns`, a new
/// network namespace with its loopback up; then (if `uid`) the sandbox's uid and gid with no
/// supplementary groups. Runs as root: the namespace needs it, so the identity is dropped here
/// rather than by `Command::uid` (which would drop it first).
#[allow(unsafe_code)]
pub fn enter(new_netns: bool, uid: Option<u32>) -> io::Result<()> {
    // SAFETY: plain system calls on values owned here.
    unsafe {
        if new_netns {
            if libc::unshare(libc::CLONE_NEWNET) != 0 {
                return Err(io::Error::last_os_error());
            }
            loopback_up()?;
        }
        if let Some(uid) = uid {
            if libc::setgroups(0, std::ptr::null()) != 0 || libc::setgid(uid) != 0 || libc::setuid(uid) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// In the child: hands the tunnel socket over as [`TUNNEL_FD`] (bubblewrap makes the namespace).
#[allow(unsafe_code)]
pub fn pass_tunnel(fd: i32) -> io::Result<()> {
    // SAFETY: dup2 and fcntl on a descriptor this process holds. dup2 leaves the copy open
    // across exec; when the socket already is that descriptor, the flag is cleared instead.
    let ok = unsafe { if fd == TUNNEL_FD { libc::fcntl(fd, libc::F_SETFD, 0) >= 0 } else { libc::dup2(fd, TUNNEL_FD) >= 0 } };
    if ok { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Brings `lo` up in the current network namespace (a new one starts with it down).
#[allow(unsafe_code)]
unsafe fn loopback_up() -> io::Result<()> {
    // SAFETY: an ioctl on a socket of our own with a zeroed, named `ifreq`.
    unsafe {
        let sock = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if sock < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
            *dst = *src as libc::c_char;
        }
        let mut result = libc::ioctl(sock, libc::SIOCGIFFLAGS, &mut req);
        if result == 0 {
            req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
            result = libc::ioctl(sock, libc::SIOCSIFFLAGS, &req);
        }
        let err = io::Error::last_os_error();
        libc::close(sock);
        if result != 0 { Err(err) } else { Ok(()) }
    }
}

/// The listening tunnel socket at `path`, open to its owner only (root, or the user Halyard
/// runs as); a stale one is replaced.
pub fn tunnel_listener(path: &Path) -> io::Result<std::os::unix::net::UnixListener> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = std::os::unix::net::UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// Forwarding tasks of one sandbox; they end when this is dropped.
#[derive(Debug, Default)]
pub struct Forwards {
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Forwards {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Forwards {
    /// Forwards `outer` (port 0: any free port of its host) to `inner` in the sandbox whose
    /// tunnel is `tunnel`.
    pub async fn add(&mut self, outer: SocketAddr, tunnel: PathBuf, inner: u16) -> io::Result<SocketAddr> {
        let listener = TcpListener::bind(outer).await?;
        let outer = listener.local_addr()?;
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else { continue };
                let tunnel = tunnel.clone();
                tokio::spawn(async move {
                    let _ = client.set_nodelay(true);
                    let Ok(mut inside) = UnixStream::connect(&tunnel).await else { return };
                    if inside.write_all(format!("{inner}\n").as_bytes()).await.is_ok() {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut inside).await;
                    }
                });
            }
        });
        self.tasks.push(task);
        Ok(outer)
    }
}

/// The line the forwarder prints for each port it listens on (then [`FORWARDING_READY`]).
pub const FORWARDING: &str = "HALYARD_FORWARDING ";
pub const FORWARDING_READY: &str = "HALYARD_FORWARDING_READY";

/// `halyard sandbox-forward`: listens on each `NAME=HOST:PORT=INNER`, says where, and forwards
/// until it is ended.
pub async fn serve_forwards(tunnel: &Path, specs: &[String]) -> io::Result<()> {
    let mut forwards = Forwards::default();
    for spec in specs {
        let bad = || io::Error::new(io::ErrorKind::InvalidInput, format!("expected NAME=HOST:PORT=INNER, not {spec}"));
        let mut parts = spec.splitn(3, '=');
        let (Some(name), Some(outer), Some(inner)) = (parts.next(), parts.next(), parts.next()) else { return Err(bad()) };
        let outer: SocketAddr = outer.parse().map_err(|_| bad())?;
        let inner: u16 = inner.parse().map_err(|_| bad())?;
        let at = forwards.add(outer, tunnel.to_owned(), inner).await?;
        println!("{FORWARDING}{name} {at}");
    }
    println!("{FORWARDING_READY}");
    std::future::pending::<()>().await;
    drop(forwards);
    Ok(())
}

/// `slirp4netns`, if installed.
pub fn slirp_program() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join("slirp4netns")).find(|p| p.is_file())
}

/// Gives the network namespace of `pid` a way out through user-mode NAT, with the host's
/// loopback refused. Without root (`owner_userns`), slirp4netns must first join the user
/// namespace that owns that network namespace (bubblewrap nests another inside it, where the
/// sandbox runs). It joins process group `group`, so it stops, pauses and resumes with the
/// sandbox.
#[allow(unsafe_code)]
pub async fn start_slirp(program: &Path, pid: u32, owner_userns: bool, group: u32, log: std::fs::File) -> Result<(), String> {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(["--configure", "--mtu=65520", "--disable-host-loopback"]);
    if !owner_userns {
        // As root it would run with every capability: its system calls are filtered, so a flaw
        // in its NAT (which parses what the hostile agent sends) gains less. (Not
        // `--enable-sandbox`: its mount namespace set-up, racing with Docker creating
        // containers on the same host, made runc fail to find `docker-init`.)
        cmd.arg("--enable-seccomp");
    }
    let owner =
        if owner_userns { Some(owning_userns(pid).map_err(|e| format!("cannot find the sandbox's user namespace: {e}"))?) } else { None };
    if let Some(fd) = owner.as_ref().map(std::os::fd::AsRawFd::as_raw_fd) {
        cmd.arg(format!("--userns-path=/proc/self/fd/{USERNS_FD}"));
        // SAFETY: dup2 and fcntl between fork and exec, on a descriptor this process holds.
        unsafe {
            cmd.pre_exec(move || {
                let ok = if fd == USERNS_FD { libc::fcntl(fd, libc::F_SETFD, 0) >= 0 } else { libc::dup2(fd, USERNS_FD) >= 0 };
                if ok { Ok(()) } else { Err(io::Error::last_os_error()) }
            });
        }
    }
    cmd.arg(pid.to_string())
        .arg("tap0")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .process_group(group as i32);
    let mut child = cmd.spawn().map_err(|e| format!("cannot start slirp4netns: {e}"))?;
    drop(owner);
    // Ready when the interface is there: looked for after 1 ms, then at doubling intervals up
    // to 20 ms (it usually takes a few: a fixed 20 ms step cost every start about 15 ms).
    let mut outcome = Err("slirp4netns did not configure the sandbox's network within 2 s".to_owned());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    let mut pause = std::time::Duration::from_millis(1);
    while std::time::Instant::now() < deadline {
        if std::fs::read_to_string(format!("/proc/{pid}/net/dev")).is_ok_and(|d| d.contains("tap0")) {
            outcome = Ok(());
            break;
        }
        if let Ok(Some(status)) = child.try_wait() {
            outcome = Err(format!("slirp4netns ended ({status}) before the sandbox's network was up; its words are in the executor log"));
            break;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(std::time::Duration::from_millis(20));
    }
    // Reaped whenever it ends; it is not waited on otherwise.
    tokio::spawn(async move {
        let _ = child.wait().await;
    });
    outcome
}

/// Ends the user-mode NAT of the sandbox whose process group is `group` (it is moving onto
/// the egress proxy), and waits until it is gone: its tap device, the namespace's one route
/// out, goes with it.
pub async fn stop_slirp(group: u32) -> Result<(), String> {
    let found = slirp_processes(group);
    for pid in &found {
        // SAFETY: a signal to a process of this sandbox's group.
        #[allow(unsafe_code)]
        unsafe {
            libc::kill(*pid as i32, libc::SIGKILL);
        }
    }
    for _ in 0..200 {
        if found.iter().all(|pid| !running(*pid)) {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    Err("the sandbox's way out (slirp4netns) did not end within 2 s".into())
}

/// The slirp4netns processes of process group `group`.
fn slirp_processes(group: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
            // `pid (comm) state ppid pgrp ...`: the name may hold spaces, so split after it.
            let Some((head, tail)) = stat.rsplit_once(')') else { return false };
            let pgrp = tail.split_whitespace().nth(2).and_then(|g| g.parse::<u32>().ok());
            head.ends_with("(slirp4netns") && pgrp == Some(group)
        })
        .collect()
}

/// Whether `pid` is still running (a zombie is not: it holds no descriptors, and has ended).
pub(crate) fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit_once(')').is_some_and(|(_, tail)| tail.split_whitespace().next() != Some("Z")))
}

/// Where slirp4netns finds the user namespace it joins.
const USERNS_FD: i32 = 3;

/// The user namespace that owns the network namespace of `pid` (`NS_GET_USERNS`).
#[allow(unsafe_code)]
fn owning_userns(pid: u32) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::{AsRawFd, FromRawFd};
    const NS_GET_USERNS: libc::c_ulong = 0xb701;
    let net = std::fs::File::open(format!("/proc/{pid}/ns/net"))?;
    // SAFETY: an ioctl on an open namespace file; a non-negative result is a new descriptor we
    // then own.
    let fd = unsafe { libc::ioctl(net.as_raw_fd(), NS_GET_USERNS) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Egress `internet` for the sandbox whose executor is `pid` (Halyard as root): an iptables
/// table in its network refuses the private, shared, loopback, link-local and multicast ranges
/// ([`crate::egress::BLOCKED_FOR_INTERNET`]; the host's own addresses are among them), allowing
/// its own loopback and slirp4netns' DNS. Docker's `internet` networks drop the same ranges.
pub async fn internet_only(pid: u32) -> Result<(), String> {
    let netns = format!("--net=/proc/{pid}/ns/net");
    let mut rules: Vec<Vec<String>> = vec![
        vec!["-o".into(), "lo".into(), "-j".into(), "ACCEPT".into()],
        vec!["-d".into(), SLIRP_DNS.into(), "-p".into(), "udp".into(), "--dport".into(), "53".into(), "-j".into(), "ACCEPT".into()],
        vec!["-d".into(), SLIRP_DNS.into(), "-p".into(), "tcp".into(), "--dport".into(), "53".into(), "-j".into(), "ACCEPT".into()],
    ];
    rules.extend(crate::egress::BLOCKED_FOR_INTERNET.iter().map(|range| vec!["-d".into(), (*range).into(), "-j".into(), "REJECT".into()]));
    for rule in rules {
        let out = tokio::process::Command::new("nsenter")
            .arg(&netns)
            .args(["iptables", "-w", "-A", "OUTPUT"])
            .args(&rule)
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .map_err(|e| format!("cannot run nsenter and iptables for egress `internet` (install iptables): {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "cannot filter the sandbox's egress (iptables {}): {}",
                rule.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    Ok(())
}

/// slirp4netns' DNS forwarder, inside the sandbox's network.
const SLIRP_DNS: &str = "10.0.2.3";

/// The first child of `pid` (bubblewrap's process inside the namespaces).
pub fn first_child(pid: u32) -> Option<u32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// Whether `ip` is the address (or the unspecified address covering it) that `http_addr`
/// listens on: sandboxes' ports must never be there.
pub fn shares_ui_address(ip: IpAddr, http_addr: &str) -> bool {
    let host = halyard_platform::netaddr::host_of(http_addr);
    let ui = match host {
        "localhost" => {
            return ip.is_loopback() && matches!(ip, IpAddr::V4(v) if v.octets() == [127, 0, 0, 1])
                || ip == IpAddr::V6(std::net::Ipv6Addr::LOCALHOST);
        }
        h => match h.parse::<IpAddr>() {
            Ok(a) => a,
            Err(_) => return false,
        },
    };
    ui == ip
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_forward_reaches_the_port_it_names_through_the_tunnel() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tunnel.sock");
        // A stand-in for the executor's end: answers with the port line it was sent.
        let tunnel = tokio::net::UnixListener::from_std({
            let l = tunnel_listener(&path).unwrap();
            l.set_nonblocking(true).unwrap();
            l
        })
        .unwrap();
        tokio::spawn(async move {
            let (mut s, _) = tunnel.accept().await.unwrap();
            let mut line = [0u8; 5];
            s.read_exact(&mut line).await.unwrap();
            s.write_all(&line).await.unwrap();
        });
        let mut f = Forwards::default();
        let at = f.add("127.0.0.1:0".parse().unwrap(), path.clone(), 8001).await.unwrap();
        let mut c = tokio::net::TcpStream::connect(at).await.unwrap();
        let mut echoed = [0u8; 5];
        c.read_exact(&mut echoed).await.unwrap();
        assert_eq!(&echoed, b"8001\n");
        assert_eq!(std::fs::metadata(&path).map(|m| m.permissions().mode() & 0o777).unwrap(), 0o600);
    }

    #[test]
    fn the_ui_address_is_never_the_publish_address() {
        assert!(shares_ui_address("127.0.0.1".parse().unwrap(), "127.0.0.1:3000"));
        assert!(shares_ui_address("127.0.0.1".parse().unwrap(), "localhost:3000"));
        assert!(!shares_ui_address("127.0.0.2".parse().unwrap(), "127.0.0.1:3000"));
        assert!(!shares_ui_address("10.0.0.5".parse().unwrap(), "0.0.0.0:3000"));
    }
}
