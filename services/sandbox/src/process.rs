//! Starting, signalling and checking executor processes.

use std::process::Stdio;
use std::time::Duration;

use halyard_platform::executor_client::ExecutorClient;

use crate::isolation::Confinement;
use crate::layout::Layout;
use crate::netns;
use halyard_protocol::system::AGENT_SERVER;
use std::os::fd::AsRawFd;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

/// The line an executor prints once it listens.
pub const LISTENING_PREFIX: &str = "HALYARD_EXECUTOR_LISTENING ";

/// A started executor. It outlives a supervisor that crashes (the next one adopts it); a
/// supervisor that stops cleanly stops it first.
#[derive(Debug)]
pub struct Started {
    pub child: Child,
    pub pid: u32,
    /// The executor's URL, and each app's (`WORKER_1`, ...), as the host reaches them.
    pub url: String,
    pub apps: Vec<(String, String)>,
}

/// How a process sandbox is started.
pub struct Launch<'a> {
    pub command: &'a [String],
    /// Where its ports are reached from the host (never the UI's address).
    pub host: std::net::IpAddr,
    pub confinement: &'a Confinement,
    pub env: &'a std::collections::BTreeMap<String, String>,
    pub layout: &'a Layout,
    pub key: &'a str,
    pub output_cap: usize,
    /// Seconds the sandbox's browser may stay unused.
    pub browser_idle_secs: u64,
    /// Seconds the sandbox's VS Code may stay unused.
    pub vscode_idle_secs: u64,
    /// The spec's disk limit, in MiB (0: none).
    pub disk_mb: u64,
    /// The apps' names and their ports (inside the sandbox's network when it has its own,
    /// else on `host`).
    pub apps: &'a [(String, u16)],
    /// With a network of its own, where it may connect (see [`crate::egress::Egress`]).
    pub egress: crate::egress::Egress,
    /// The resource limits it joins before it runs.
    pub group: &'a crate::limits::Group,
    pub timeout: Duration,
}

/// Starts an executor as `launch` says (its directories already prepared), hands it the key
/// on standard input, and waits (no fixed sleeps) until its health endpoint answers, for at
/// most `launch.timeout`.
#[allow(unsafe_code)]
pub async fn start(launch: Launch<'_>, http: &reqwest::Client) -> Result<Started, String> {
    let Launch {
        command,
        host,
        confinement,
        env,
        layout,
        key,
        output_cap,
        browser_idle_secs,
        vscode_idle_secs,
        disk_mb,
        apps,
        egress,
        group,
        timeout,
    } = launch;
    let full: Vec<String> = confinement.wrapper.iter().chain(command).cloned().collect();
    let (program, args) = full.split_first().ok_or("no executor command configured")?;
    let log = layout.open_log()?;
    let tunnel = match confinement.own_network {
        true => Some(netns::tunnel_listener(&layout.tunnel()).map_err(|e| format!("cannot make {}: {e}", layout.tunnel().display()))?),
        false => None,
    };
    // In a network of its own the executor listens on its own loopback; else on the host's.
    let listen = if tunnel.is_some() { std::net::SocketAddr::from(([127, 0, 0, 1], 0)) } else { std::net::SocketAddr::new(host, 0) };
    // Its workspace and home as the sandbox sees them: a container's paths where it has a mount
    // namespace of its own (`crate::paths`), else where they are on the host.
    let (workspace, home) = match confinement.same_paths {
        true => (std::path::PathBuf::from(crate::paths::WORKSPACE), std::path::PathBuf::from(crate::paths::HOME)),
        false => (layout.workspace(), layout.home()),
    };
    let binds = match confinement.same_paths && confinement.wrapper.is_empty() {
        true => Some(crate::paths::Binds::new(&layout.workspace(), &layout.home()).map_err(|e| format!("sandbox paths: {e}"))?),
        false => None,
    };
    let mut cmd = Command::new(program);
    cmd.args(args)
        .arg("--workspace")
        .arg(&workspace)
        .arg("--listen")
        .arg(listen.to_string())
        .args(["--output-cap", &output_cap.to_string(), "--disk-limit-mb", &disk_mb.to_string(), "--outlive-supervisor"])
        .args(["--browser-idle-secs", &browser_idle_secs.to_string(), "--vscode-idle-secs", &vscode_idle_secs.to_string()])
        .current_dir(layout.workspace())
        // Nothing of Halyard's environment (LLM keys included) reaches the sandbox.
        .env_clear()
        .envs(env)
        .env("HOME", &home)
        .env("TMPDIR", layout.tmp())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log))
        // Its own process group, so pause, resume and delete reach its children too.
        .process_group(0);
    let tunnel_fd = tunnel.as_ref().map(|t| t.as_raw_fd());
    if tunnel_fd.is_some() {
        cmd.args(["--tunnel-fd", &netns::TUNNEL_FD.to_string()]);
        // Its way to the egress proxy, should it be held to a policy (the proxy makes the
        // socket then).
        cmd.arg("--egress-socket").arg(std::path::absolute(layout.egress_socket()).unwrap_or_else(|_| layout.egress_socket()));
    }
    // In the child, in this order: join the resource limits, make the mount and network
    // namespaces (all need Halyard's privileges), then become the sandbox's uid. (`bwrap`: bubblewrap
    // makes the namespace; the tunnel socket only has to reach it.)
    let group = group.clone();
    let new_netns = tunnel_fd.is_some() && confinement.wrapper.is_empty();
    let uid = confinement.uid;
    // SAFETY: only async-signal-safe system calls run between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            group.enter()?;
            if let Some(fd) = tunnel_fd {
                netns::pass_tunnel(fd)?;
            }
            if let Some(binds) = &binds {
                crate::paths::enter(binds)?;
            }
            netns::enter(new_netns, uid)
        })
    };
    let began = std::time::Instant::now();
    let mut child = cmd.spawn().map_err(|e| format!("cannot start executor `{program}`: {e}"))?;
    tracing::debug!(ms = began.elapsed().as_secs_f64() * 1000.0, "executor spawned (its resource groups and network namespace joined)");
    // The child has its copy; ours must not linger.
    drop(tunnel);
    let pid = child.id().ok_or("executor exited at once")?;
    note_pid(layout, pid);
    let deadline = tokio::time::Instant::now() + timeout;
    let result = async {
        let mut stdin = child.stdin.take().ok_or("executor has no stdin")?;
        stdin.write_all(format!("{key}\n").as_bytes()).await.map_err(|e| format!("cannot hand the session key over: {e}"))?;
        drop(stdin);
        let stdout = child.stdout.take().ok_or("executor has no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let addr = loop {
            let line = tokio::time::timeout_at(deadline, lines.next_line())
                .await
                .map_err(|_| format!("executor did not report its address within {timeout:?}"))?
                .map_err(|e| format!("reading executor output: {e}"))?
                .ok_or_else(|| format!("executor exited before listening; see {}", layout.log().display()))?;
            if let Some(addr) = line.strip_prefix(LISTENING_PREFIX) {
                break addr.trim().to_owned();
            }
        };
        tracing::debug!(ms = began.elapsed().as_secs_f64() * 1000.0, "executor listening");
        let (url, apps) = if confinement.own_network {
            own_network(layout, host, apps, pid, deadline, &addr, egress, !confinement.wrapper.is_empty()).await?
        } else {
            let urls =
                apps.iter().map(|(name, port)| (name.clone(), format!("http://{}", std::net::SocketAddr::new(host, *port)))).collect();
            (format!("http://{addr}"), urls)
        };
        tracing::debug!(ms = began.elapsed().as_secs_f64() * 1000.0, "sandbox network made");
        // An executor that ends first fails the start now, not at the deadline.
        let client = ExecutorClient::new(http.clone(), url.clone(), key.to_owned());
        tokio::select! {
            healthy = wait_healthy(&client, deadline) => healthy?,
            ended = child.wait() => {
                let how = ended.map_or_else(|e| e.to_string(), |s| s.to_string());
                return Err(format!("executor ended ({how}) before it answered; see {}", layout.log().display()));
            }
        }
        tracing::debug!(ms = began.elapsed().as_secs_f64() * 1000.0, "executor healthy");
        Ok::<_, String>((url, apps))
    }
    .await;
    match result {
        Ok((url, apps)) => Ok(Started { child, pid, url, apps }),
        Err(e) => {
            kill_group(pid);
            let _ = child.wait().await;
            Err(e)
        }
    }
}

/// The executor's address (`addr`, on the sandbox's own loopback) and its `apps` forwarded to
/// `host`, then the sandbox's way out as its egress class allows: the `internet` filter first,
/// then the connection out (none for `none`).
#[allow(clippy::too_many_arguments)] // the launch's parts this step needs
async fn own_network(
    layout: &Layout,
    host: std::net::IpAddr,
    apps: &[(String, u16)],
    pid: u32,
    deadline: tokio::time::Instant,
    addr: &str,
    egress: crate::egress::Egress,
    bwrap: bool,
) -> Result<(String, Vec<(String, String)>), String> {
    let inner: std::net::SocketAddr = addr.parse().map_err(|_| format!("executor reported a bad address {addr}"))?;
    let mut wanted = vec![(AGENT_SERVER.to_owned(), inner.port())];
    wanted.extend(apps.iter().cloned());
    if egress == crate::egress::Egress::Internet && bwrap {
        return Err("egress `internet` needs Halyard to run as root for process sandboxes (its filter is an \
                    iptables table in the sandbox's network); use `open`, `none` or Docker sandboxes"
            .into());
    }
    // The way in and the way out are made at once: neither needs the other.
    let way_out = async {
        if egress == crate::egress::Egress::Internet {
            // The filter goes in before the way out opens.
            netns::internet_only(pid).await?;
        }
        // `policy`: its way out is the proxy, through the executor (`--egress-socket`).
        if !egress.internal() {
            connect_out(pid, bwrap, layout.open_log()?).await?;
        }
        Ok::<_, String>(())
    };
    let (forwarded, out) = tokio::join!(forward(layout, host, &wanted, pid, deadline), way_out);
    let mut at = forwarded?;
    out?;
    let url = at.remove(0).1;
    Ok((url, at))
}

/// Gives the sandbox of executor `pid` its way out (see [`netns`]). Under bubblewrap the
/// namespaces are those of bubblewrap's child, and its user namespace must be named too.
pub(crate) async fn connect_out(pid: u32, bwrap: bool, log: std::fs::File) -> Result<(), String> {
    let Some(program) = netns::slirp_program() else {
        return Err("the sandbox's spec allows egress but slirp4netns is not installed (`apt-get install slirp4netns`), \
                    or give the spec egress `none`"
            .into());
    };
    let inner = if bwrap {
        let mut found = None;
        for _ in 0..100 {
            found = netns::first_child(pid);
            if found.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        found.ok_or("cannot find the sandbox's process inside bubblewrap")?
    } else {
        pid
    };
    netns::start_slirp(&program, inner, bwrap, pid, log).await
}

/// Starts the forwarder of a sandbox in its own network (see [`netns`]): `wanted` ports (name,
/// port inside) are forwarded from free ports of `host`. It joins the executor's process group
/// (`group`), so it ends, pauses and resumes with the sandbox and outlives a crashed
/// supervisor. Returns each name with its URL from the host.
async fn forward(
    layout: &Layout,
    host: std::net::IpAddr,
    wanted: &[(String, u16)],
    group: u32,
    deadline: tokio::time::Instant,
) -> Result<Vec<(String, String)>, String> {
    // This very binary, even if a newer one replaced its file since it started.
    let exe = std::path::PathBuf::from("/proc/self/exe");
    let log = layout.open_log()?;
    let mut cmd = Command::new(exe);
    cmd.arg("sandbox-forward").arg("--tunnel").arg(layout.tunnel());
    for (name, inner) in wanted {
        cmd.arg("--forward").arg(format!("{name}={}={inner}", std::net::SocketAddr::new(host, 0)));
    }
    cmd.env_clear()
        .env("HALYARD_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log))
        .process_group(group as i32);
    let mut child = cmd.spawn().map_err(|e| format!("cannot start the sandbox's forwarder: {e}"))?;
    let stdout = child.stdout.take().ok_or("the forwarder has no stdout")?;
    // Reaped whenever it ends (with the sandbox's group); the health check notices a dead one.
    tokio::spawn(async move {
        let _ = child.wait().await;
    });
    let mut lines = BufReader::new(stdout).lines();
    let mut at = Vec::new();
    loop {
        let line = tokio::time::timeout_at(deadline, lines.next_line())
            .await
            .map_err(|_| "the sandbox's forwarder did not start in time".to_owned())?
            .map_err(|e| format!("reading the forwarder's output: {e}"))?
            .ok_or_else(|| format!("the sandbox's forwarder ended before listening; see {}", layout.log().display()))?;
        if line == netns::FORWARDING_READY {
            break;
        }
        if let Some((name, addr)) = line.strip_prefix(netns::FORWARDING).and_then(|l| l.split_once(' ')) {
            at.push((name.to_owned(), format!("http://{addr}")));
        }
    }
    // Kept going by the group's lifetime, not by this pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    if at.len() != wanted.len() {
        return Err(format!("the forwarder listens on {} ports, not {}", at.len(), wanted.len()));
    }
    Ok(at)
}

/// `n` ports of `host` free right now (the kernel's picks; a race with another binder is
/// possible but harmless: the agent's server then fails to bind and says so).
pub fn free_ports(host: std::net::IpAddr, n: usize) -> Vec<u16> {
    let listeners: Vec<std::net::TcpListener> =
        (0..n).filter_map(|_| std::net::TcpListener::bind(std::net::SocketAddr::new(host, 0)).ok()).collect();
    listeners.iter().filter_map(|l| l.local_addr().ok()).map(|a| a.port()).collect()
}

/// Polls `/health` with backoff until it answers or `deadline` passes.
pub async fn wait_healthy(client: &ExecutorClient, deadline: tokio::time::Instant) -> Result<(), String> {
    let mut delay = Duration::from_millis(2);
    loop {
        match client.health().await {
            Ok(h) if h.ok => return Ok(()),
            Ok(_) => {}
            Err(e) if tokio::time::Instant::now() >= deadline => return Err(format!("executor not healthy: {e}")),
            Err(_) => {}
        }
        if tokio::time::Instant::now() >= deadline {
            return Err("executor not healthy before the start timeout".into());
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_millis(200));
    }
}

/// Notes `pid` as the sandbox's executor (see [`Layout::executor_pid`]). A sandbox that can
/// write its directory (bubblewrap's) may have planted something there: a link is not followed
/// (the note is written with Halyard's privileges) and a pipe is not waited on. A note that
/// cannot be written only costs the clean-up after a crash.
fn note_pid(layout: &Layout, pid: u32) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let written = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(layout.executor_pid())
        .and_then(|mut f| f.write_all(pid.to_string().as_bytes()));
    if let Err(e) = written {
        tracing::warn!(error = %e, path = %layout.executor_pid().display(), "cannot note the executor's pid");
    }
}

/// Ends the executor an earlier start of this sandbox left running (its supervisor was killed
/// before anything recorded it, so no record names it): the noted pid's process group, if that
/// process still works in this sandbox's workspace (a pid reused by another process does not).
/// Left alone, it would serve nobody (its tunnel is replaced), keep its share of the sandbox's
/// limits, and outlive the sandbox's deletion with the sandbox's uid. `ended` is the recorded
/// executor, which the caller has just ended itself (usually the one the note names: it is not
/// signalled twice). Returns the pid ended here.
pub fn end_leftover(layout: &Layout, ended: Option<u32>) -> Option<u32> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    // Read as it was written: no link followed, no pipe waited on, a pid's length at most.
    let note = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(layout.executor_pid())
        .ok()
        .filter(|f| f.metadata().is_ok_and(|m| m.is_file()))?;
    let mut text = String::new();
    note.take(16).read_to_string(&mut text).ok()?;
    let pid: u32 = text.trim().parse().ok().filter(|p| Some(*p) != ended)?;
    let dir = |p: &std::path::Path| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()))
    };
    let here = dir(&layout.workspace())?;
    // Its working directory as the kernel has it: the same directory under whatever path an
    // isolated executor sees it.
    if pid <= 1 || !alive(pid) || dir(std::path::Path::new(&format!("/proc/{pid}/cwd"))) != Some(here) {
        return None;
    }
    kill_group(pid);
    Some(pid)
}

/// Whether a process exists.
pub fn alive(pid: u32) -> bool {
    halyard_platform::signal(pid as i32, 0)
}

/// SIGSTOP to the executor's group and to the group of every process below it: the executor's
/// shell runs in a group of its own (so `C-c` reaches only the command), and a pause must
/// freeze the command too, not only the executor.
pub fn stop_group(pid: u32) -> bool {
    let frozen = halyard_platform::signal(-(pid as i32), libc::SIGSTOP);
    for group in groups_below(pid) {
        halyard_platform::signal(-group, libc::SIGSTOP);
    }
    frozen
}

/// SIGCONT to the executor's group and every group below it.
pub fn continue_group(pid: u32) -> bool {
    for group in groups_below(pid) {
        halyard_platform::signal(-group, libc::SIGCONT);
    }
    halyard_platform::signal(-(pid as i32), libc::SIGCONT)
}

/// Ends an executor and everything below it at once (SIGKILL to its group and to every group
/// below it, frozen or not): a hibernating sandbox keeps nothing running, and there is nothing
/// to save (the workspace is on disk; an idle shell holds no work).
pub fn end_tree(pid: u32) {
    for group in groups_below(pid) {
        halyard_platform::signal(-group, libc::SIGKILL);
    }
    halyard_platform::signal(-(pid as i32), libc::SIGKILL);
}

/// The process groups of `pid`'s descendants other than its own, read from `/proc`.
fn groups_below(pid: u32) -> Vec<i32> {
    // (pid, ppid, pgrp) of every process; `stat`'s command name may hold spaces and
    // parentheses, so the fields are read after its last `)`.
    let procs: Vec<(u32, u32, i32)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
            let mut fields = stat.get(stat.rfind(')')? + 2..)?.split(' ');
            let ppid = fields.nth(1)?.parse().ok()?;
            let pgrp = fields.next()?.parse().ok()?;
            Some((p, ppid, pgrp))
        })
        .collect();
    let mut tree = vec![pid];
    let mut groups = Vec::new();
    let mut i = 0;
    while let Some(&parent) = tree.get(i) {
        for &(p, ppid, pgrp) in &procs {
            if ppid == parent && !tree.contains(&p) {
                tree.push(p);
                if pgrp != pid as i32 && !groups.contains(&pgrp) {
                    groups.push(pgrp);
                }
            }
        }
        i += 1;
    }
    groups
}

/// [`kill_group`], waited for: returns once the executor has ended (SIGKILL to its group after
/// two seconds, then up to one more). For a supervisor that stops: its runtime ends next, and
/// with it the timer that would have sent the SIGKILL, so an executor slow to end would outlive
/// the clean stop that was to end it.
pub async fn end_group(pid: u32) {
    terminate_group(pid);
    ended_within(pid, GROUP_GRACE).await;
    kill_what_is_left(pid);
    ended_within(pid, Duration::from_secs(1)).await;
}

/// Waits until `pid` has ended (a zombie has), for at most `patience`.
async fn ended_within(pid: u32, patience: Duration) {
    let deadline = tokio::time::Instant::now() + patience;
    while netns::running(pid) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Stops an executor and its process group (the forwarder and slirp4netns of a sandbox with a
/// network of its own are in it): SIGTERM (the executor then ends its shell's process group too),
/// continued if frozen, and SIGKILL to whatever of the group is still there two seconds later.
pub fn kill_group(pid: u32) {
    terminate_group(pid);
    tokio::spawn(async move {
        tokio::time::sleep(GROUP_GRACE).await;
        kill_what_is_left(pid);
    });
}

/// How long an executor's group has to end after SIGTERM before it is killed.
const GROUP_GRACE: Duration = Duration::from_secs(2);

/// SIGTERM to the group of `pid`, continued in case it is frozen.
fn terminate_group(pid: u32) {
    halyard_platform::signal(-(pid as i32), libc::SIGTERM);
    halyard_platform::signal(-(pid as i32), libc::SIGCONT);
}

/// SIGKILL to any member of the group of `pid` still there, not only the executor (which may
/// have ended already).
fn kill_what_is_left(pid: u32) {
    if halyard_platform::signal(-(pid as i32), 0) {
        halyard_platform::signal(-(pid as i32), libc::SIGKILL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> (tempfile::TempDir, Layout) {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout { root: dir.path().to_owned() };
        std::fs::create_dir_all(layout.workspace()).unwrap();
        (dir, layout)
    }

    #[tokio::test]
    async fn a_noted_executor_still_in_its_workspace_is_ended_and_nothing_else_is() {
        let (_dir, layout) = layout();
        let spawn = |cwd: &std::path::Path| {
            use std::os::unix::process::CommandExt;
            std::process::Command::new("sleep").arg("60").current_dir(cwd).process_group(0).spawn().unwrap()
        };
        // Working elsewhere (a pid taken over by another process): left alone.
        let mut other = spawn(std::path::Path::new("/"));
        note_pid(&layout, other.id());
        assert_eq!(end_leftover(&layout, None), None);
        assert!(other.try_wait().unwrap().is_none(), "a process outside the workspace was ended");
        other.kill().unwrap();
        other.wait().unwrap();
        // The one left running in the workspace: ended, with its group.
        let mut left = spawn(&layout.workspace());
        note_pid(&layout, left.id());
        // Not the one its caller ended already.
        assert_eq!(end_leftover(&layout, Some(left.id())), None);
        assert!(left.try_wait().unwrap().is_none(), "the executor its caller ended was signalled again");
        assert_eq!(end_leftover(&layout, None), Some(left.id()));
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while left.try_wait().unwrap().is_none() {
            assert!(std::time::Instant::now() < deadline, "the noted executor still runs");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn what_a_sandbox_plants_as_the_note_is_neither_followed_nor_waited_on() {
        let (_dir, layout) = layout();
        // A link to an endless file is not read; a pipe with no reader is not waited on.
        std::os::unix::fs::symlink("/dev/zero", layout.executor_pid()).unwrap();
        assert_eq!(end_leftover(&layout, None), None);
        note_pid(&layout, 1234);
        assert!(std::fs::symlink_metadata(layout.executor_pid()).unwrap().file_type().is_symlink());
        std::fs::remove_file(layout.executor_pid()).unwrap();
        let mkfifo = |path: std::path::PathBuf| {
            let path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: a path this test owns.
            #[allow(unsafe_code)]
            let made = unsafe { libc::mkfifo(path.as_ptr(), 0o600) };
            assert_eq!(made, 0);
        };
        mkfifo(layout.executor_pid());
        note_pid(&layout, 1234);
        assert_eq!(end_leftover(&layout, None), None);
        // Nor is the log, which the executor's output is sent to.
        mkfifo(layout.log());
        assert!(layout.open_log().is_err());
    }
}
