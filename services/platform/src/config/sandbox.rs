//! The sandbox supervisor's settings: the kind, process isolation, Docker, specs and their
//! images, the pool, idle pause and stop, running limits.

use serde::{Deserialize, Serialize};

use crate::settings::set;
use crate::settings::{Setting, number, one_of};

/// Sandboxes.
#[derive(Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxConfig {
    /// `auto` (default: `docker` when a Docker engine answers and the default spec's base
    /// image is there, else `process`), `process` or `docker`. `halyard` resolves `auto` once at
    /// start-up; services only ever see `process` or `docker`.
    pub kind: String,
    /// Command that starts an executor; empty means "this binary, `executor` subcommand".
    pub executor_command: Vec<String>,
    /// How long to wait for a new sandbox's health endpoint.
    pub start_timeout_secs: u64,
    /// Cap on one command's output returned to the agent, in bytes.
    pub output_cap_bytes: usize,
    /// How long a sandbox's browser may stay unused before it is stopped (it starts again with
    /// the next browser call).
    pub browser_idle_secs: u64,
    /// How long a sandbox's VS Code (code-server) may stay without a request or an open
    /// connection before it is stopped (it starts again with the next request for it).
    pub vscode_idle_secs: u64,
    /// Running sandboxes per user, across every host (0: unlimited). A start past it waits in
    /// the start queue until one of the user's sandboxes stops.
    pub max_running_per_user: usize,
    /// Running sandboxes in total, across every host (0: unlimited). A start past it waits.
    pub max_running_total: usize,
    /// Sandboxes this host runs at once (0: unlimited): its supervisor takes a start only with
    /// room, and a start no host has room for waits in the start queue.
    pub host_slots: usize,
    /// How long a start may wait in the start queue before it ends in an error, unless its
    /// request says (`queue_deadline_secs`).
    pub queue_deadline_secs: u64,
    /// How long an environment snapshot is used after it was made, unless its environment says.
    pub snapshot_ttl_secs: u64,
    /// Disk (MiB) one user's environment snapshots may take together (0: no limit).
    pub snapshot_quota_user_mb: u64,
    /// Disk (MiB) the snapshots made in one organization may take together (0: no limit).
    pub snapshot_quota_org_mb: u64,
    /// Environment given to process sandboxes (nothing else of Halyard's environment is).
    pub env: std::collections::BTreeMap<String, String>,
    /// Docker engine address (`unix:///path` or `tcp://host:port`).
    pub docker_host: String,
    /// Where sandboxes' ports are published (Docker) or forwarded from (process), and the host
    /// of their URLs: `127.0.0.2` by default, a loopback address that only this host reaches
    /// and that is not the web workspace's (`127.0.0.1`: a browser sends the workspace's
    /// cookies to every port of the host it was opened at, so an agent's app must never
    /// listen there); the host's own address where agent runners run elsewhere (a Kubernetes
    /// pod's IP). Refused when it is the address the gateway serves the web workspace on.
    pub publish_host: std::net::IpAddr,
    /// Repository of the runtime images Halyard builds (tags say what they hold).
    pub image_repository: String,
    /// The spec new conversations get.
    pub default_spec: String,
    /// Docker sandbox specs; empty means one spec, `default`, on `halyard-base:bookworm`.
    pub specs: Vec<SandboxSpec>,
    /// Pre-started docker sandboxes kept ready per spec.
    pub pool_size: usize,
    /// Pause (freeze) a running sandbox after this long without activity (0: never, the
    /// default: hibernation frees what a pause would hold).
    pub idle_pause_secs: u64,
    /// Hibernate a sandbox after this long without activity (0: never): its processes end (a
    /// container is stopped), its workspace stays, and the next request starts it again.
    pub idle_stop_secs: u64,
    /// How process sandboxes are isolated: `auto` (`uid` as root, else `bwrap` where bubblewrap
    /// works, else `none`), `uid`, `bwrap` or `none` (one user's sandboxes only).
    pub process_isolation: String,
    /// Process sandboxes' network: `own` (a network namespace each, in modes `uid` and
    /// `bwrap`; the default) or `host` (the host's own network and loopback: for a single
    /// developer whose agent must reach services on the host; an agent's app then listens where
    /// the web workspace is served, so never on a shared deployment).
    pub process_network: String,
    /// First uid (and gid) given to process sandboxes with `uid` isolation.
    pub process_uid_base: u32,
    /// The runtime of the specs that name none: `runc` (default) or `gvisor`.
    pub runtime: String,
    /// The name the Docker engine has gVisor's `runsc` registered under (`infra/docker-up.sh`
    /// registers it as `runsc`).
    pub gvisor_runtime: String,
    /// How many uids from `process_uid_base` sandboxes may use (one each at a time).
    pub process_uid_count: u32,
    /// The deployment's outbound policy by domain, bounding every organization's and
    /// environment's (see `halyard_protocol::egress`); applied to the sandboxes that have one.
    pub egress: halyard_protocol::egress::EgressPolicy,
    /// Names the egress proxy resolves to fixed addresses instead of asking DNS
    /// (`name=address`): a registry on a private network the host's resolver does not know.
    pub egress_resolve: std::collections::BTreeMap<String, std::net::IpAddr>,
    /// Address classes the egress proxy may connect to besides public ones: `private` (a
    /// company's forge or registry on its own network). Loopback and link-local never.
    pub egress_addresses: Vec<String>,
    /// Where OpenHands' Runtime API listens (none: not served). Container sandboxes only.
    pub runtime_api_addr: Option<std::net::SocketAddr>,
    /// The Runtime API's address as OpenHands deployments reach it: runtimes' URLs are under it
    /// (path mode, `<url>/<runtime id>`). Default `http://<runtime_api_addr>`.
    pub runtime_api_url: Option<String>,
    /// The OpenHands deployments that may use the Runtime API: name → SHA-256 of its key (hex).
    /// Only the hashes are configured: a key is shown once, to the administrator who made it.
    pub runtime_api_keys: std::collections::BTreeMap<String, String>,
    /// Most runtimes (running or paused) one deployment may have at once.
    pub runtime_api_max: usize,
    /// Warm runtimes the Runtime API keeps started, by image.
    pub runtime_api_pool: std::collections::BTreeMap<String, usize>,
    /// Runtimes' URLs as subdomains of the Runtime API's host (`<id>.<host>`, `vscode-<id>.<host>`)
    /// rather than paths (`<url>/<id>`, `<url>/<id>/vscode`).
    pub runtime_api_subdomains: bool,
}

/// What a docker sandbox is made from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxSpec {
    pub name: String,
    /// Any image with a shell; Halyard adds its executor in a runtime image built from it.
    pub base_image: String,
    pub working_dir: String,
    /// `uid:gid` the executor and the agent's commands run as.
    pub user: String,
    pub env: std::collections::BTreeMap<String, String>,
    pub memory_mb: u64,
    pub cpus: f64,
    pub pids_limit: i64,
    /// What the workspace (with the sandbox's home and temporary directory) may hold, in MiB
    /// (0: no limit).
    pub disk_mb: u64,
    /// Where the sandbox may connect: `open` (default: anywhere but other sandboxes),
    /// `internet` (not private, loopback or link-local ranges, nor the Docker host) or `none`;
    /// or an outbound policy by domain (`egress = { allow = [...], deny = [...] }`: through the
    /// egress proxy only, held to it as another layer of its rules).
    pub egress: SpecEgress,
    /// The container runtime: `runc` (Docker's own) or `gvisor` (a user-space kernel between
    /// the agent and the host's: `runsc`, as the engine has it registered); empty: the
    /// deployment's `HALYARD_SANDBOX_RUNTIME`.
    pub runtime: String,
    /// Docker inside the sandbox (`docker build`, `docker compose up` for a project's tests)
    /// without a privileged container: only under gVisor, whose Docker-in-gVisor mode needs a
    /// runsc of 2024-02 or later; checked at start-up, refused in words where it cannot be had.
    pub docker: bool,
}

/// A spec's `egress`: a network class, or an outbound policy by domain (whose class is
/// `policy`). Read as a string or a table; reads as its class where a `&str` is wanted.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SpecEgress {
    pub class: String,
    pub policy: Option<halyard_protocol::egress::EgressPolicy>,
}

impl SpecEgress {
    pub fn as_str(&self) -> &str {
        &self.class
    }
}

impl std::ops::Deref for SpecEgress {
    type Target = str;
    fn deref(&self) -> &str {
        &self.class
    }
}

impl From<&str> for SpecEgress {
    fn from(class: &str) -> Self {
        Self { class: class.to_owned(), policy: None }
    }
}

impl From<String> for SpecEgress {
    fn from(class: String) -> Self {
        Self { class, policy: None }
    }
}

impl PartialEq<&str> for SpecEgress {
    fn eq(&self, other: &&str) -> bool {
        self.class == *other
    }
}

impl Serialize for SpecEgress {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.policy {
            Some(p) => p.serialize(s),
            None => self.class.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for SpecEgress {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Either {
            Class(String),
            Policy(halyard_protocol::egress::EgressPolicy),
        }
        match Either::deserialize(d)? {
            Either::Class(class) => Ok(class.into()),
            Either::Policy(p) => {
                p.check("egress").map_err(serde::de::Error::custom)?;
                Ok(Self { class: "policy".into(), policy: Some(p) })
            }
        }
    }
}

/// The container runtimes a spec may name.
pub const RUNTIMES: [&str; 2] = ["runc", "gvisor"];

impl Default for SandboxSpec {
    fn default() -> Self {
        Self {
            name: "default".into(),
            base_image: "halyard-base:bookworm".into(),
            working_dir: "/workspace".into(),
            user: "1000:1000".into(),
            env: std::collections::BTreeMap::from([
                ("PATH".into(), "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()),
                ("LANG".into(), "C.UTF-8".into()),
            ]),
            memory_mb: 2048,
            cpus: 1.0,
            pids_limit: 512,
            disk_mb: 10 * 1024,
            egress: "open".into(),
            runtime: String::new(),
            docker: false,
        }
    }
}

impl SandboxConfig {
    /// The configured specs (the built-in default if none), each with its runtime said (the
    /// deployment's where it names none).
    pub fn specs(&self) -> Vec<SandboxSpec> {
        let mut specs = if self.specs.is_empty() { vec![SandboxSpec::default()] } else { self.specs.clone() };
        for s in specs.iter_mut().filter(|s| s.runtime.is_empty()) {
            s.runtime.clone_from(&self.runtime);
        }
        for s in &mut specs {
            s.egress.class = self.bounded_egress(&s.egress);
        }
        specs
    }

    /// The network class a sandbox of class `egress` gets: under a deployment's outbound policy,
    /// every class with a way out is `policy` (its one way out is the egress proxy).
    pub fn bounded_egress(&self, egress: &str) -> String {
        match egress {
            "" | "open" | "internet" if !self.egress.is_empty() => "policy".into(),
            other => other.to_owned(),
        }
    }

    /// The first spec that runs under `runtime`, if any.
    pub fn spec_with_runtime(&self, runtime: &str) -> Option<SandboxSpec> {
        self.specs().into_iter().find(|s| s.runtime == runtime)
    }

    /// The spec called `name`.
    pub fn spec(&self, name: &str) -> Option<SandboxSpec> {
        self.specs().into_iter().find(|s| s.name == name)
    }
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            kind: "auto".into(),
            executor_command: Vec::new(),
            start_timeout_secs: 30,
            output_cap_bytes: 30_000,
            browser_idle_secs: 600,
            vscode_idle_secs: 600,
            max_running_per_user: 0,
            max_running_total: 0,
            host_slots: 0,
            queue_deadline_secs: halyard_protocol::queue::DEFAULT_DEADLINE_SECS,
            snapshot_ttl_secs: 7 * 86_400,
            snapshot_quota_user_mb: 20 * 1024,
            snapshot_quota_org_mb: 100 * 1024,
            env: std::collections::BTreeMap::new(),
            docker_host: "unix:///var/run/docker.sock".into(),
            publish_host: std::net::Ipv4Addr::new(127, 0, 0, 2).into(),
            image_repository: "halyard-runtime".into(),
            default_spec: "default".into(),
            specs: Vec::new(),
            pool_size: 1,
            idle_pause_secs: 0,
            idle_stop_secs: 600,
            process_isolation: "auto".into(),
            process_network: "own".into(),
            process_uid_base: 200_000,
            process_uid_count: 50_000,
            runtime: "runc".into(),
            gvisor_runtime: "runsc".into(),
            egress: Default::default(),
            egress_resolve: Default::default(),
            egress_addresses: Vec::new(),
            runtime_api_addr: None,
            runtime_api_url: None,
            runtime_api_keys: Default::default(),
            runtime_api_max: 10,
            runtime_api_pool: Default::default(),
            runtime_api_subdomains: false,
        }
    }
}

/// `HALYARD_*` settings of the sandbox supervisor.
pub(crate) const SETTINGS: &[Setting<SandboxConfig>] = &[
    set!("SANDBOX", "`auto`", "sandbox kind: `docker`, `process`, or `auto` (Docker if usable)", |c, v| c.kind =
        one_of(v, &["auto", "process", "docker"])?),
    set!("PROCESS_ISOLATION", "`auto`", "process sandboxes: `uid` (root), `bwrap`, `none` (one user only), `auto` picks", |c, v| c
        .process_isolation =
        one_of(v, &["auto", "uid", "bwrap", "none"])?),
    set!(
        "PROCESS_NETWORK",
        "`own`",
        "process sandboxes: a network namespace each (`own`), or the host's network (`host`: one developer only)",
        |c, v| c.process_network = one_of(v, &["own", "host"])?
    ),
    set!("PROCESS_UID_BASE", "`200000`", "first uid given to process sandboxes", |c, v| c.process_uid_base = number(v, "a uid")?),
    set!("PROCESS_UID_COUNT", "`50000`", "uids process sandboxes may use", |c, v| c.process_uid_count = number(v, "a count")?),
    set!("DOCKER_HOST", "`unix:///var/run/docker.sock`", "the Docker engine", |c, v| c.docker_host = v.to_owned()),
    set!(
        "SANDBOX_PUBLISH_HOST",
        "`127.0.0.2`",
        "where sandboxes' ports are published (Docker) or forwarded from (process), and their URLs' host; never the address the web workspace is served on (refused: a browser sends that host's cookies to every port); set it to the host's own address (a pod IP) when agent runners or gateways run on other hosts. Each executor still asks for its session key; the agent's apps on `WORKER_*` do not, so the network there must be the operator's own",
        |c, v| c.publish_host = number(v, "an IP address")?
    ),
    set!("SANDBOX_POOL_SIZE", "`1`", "warm-pool sandboxes per spec (docker)", |c, v| c.pool_size = number(v, "a count")?),
    set!("SANDBOX_IDLE_PAUSE_SECS", "`0`", "freeze after this long idle (0: never)", |c, v| c.idle_pause_secs = number(v, "seconds")?),
    set!("SANDBOX_IDLE_STOP_SECS", "`600`", "hibernate after this long idle: processes end, files stay (0: never)", |c, v| c
        .idle_stop_secs =
        number(v, "seconds")?),
    set!("SANDBOX_START_TIMEOUT_SECS", "`30`", "wait for a new sandbox's executor", |c, v| c.start_timeout_secs = number(v, "seconds")?),
    // Shorthand for the default spec's base image.
    set!("SANDBOX_BASE_IMAGE", "the default spec's: `halyard-base:bookworm`", "base image of the default spec", |c, v| {
        let mut specs = c.specs();
        if let Some(s) = specs.iter_mut().find(|s| s.name == c.default_spec) {
            s.base_image = v.to_owned();
        }
        c.specs = specs
    }),
    set!("SANDBOX_DEFAULT_SPEC", "`default`", "the spec new conversations get", |c, v| c.default_spec = v.to_owned()),
    set!(
        "SANDBOX_RUNTIME",
        "`runc`",
        "the container runtime of the specs that name none: `runc`, or `gvisor` (a user-space kernel: slower system calls, a smaller attack surface)",
        |c, v| c.runtime = one_of(v, &RUNTIMES)?
    ),
    set!("GVISOR_RUNTIME", "`runsc`", "the name the Docker engine has gVisor's runsc registered under", |c, v| c.gvisor_runtime =
        v.to_owned()),
    set!(
        "EGRESS_ALLOW",
        "(none)",
        "the deployment's outbound allow list by domain (`name` or `*.suffix`, comma-separated): with it (or EGRESS_DENY) set, every sandbox with a way out (container, or process in a network of its own) reaches out only through the egress proxy, and only these",
        |c, v| {
            c.egress.allow = crate::settings::list(v);
            c.egress.check("HALYARD_EGRESS_ALLOW")?
        }
    ),
    set!("EGRESS_DENY", "(none)", "names no sandbox with an outbound policy may reach (`name` or `*.suffix`, comma-separated)", |c, v| {
        c.egress.deny = crate::settings::list(v);
        c.egress.check("HALYARD_EGRESS_DENY")?
    }),
    set!(
        "EGRESS_RESOLVE",
        "(none)",
        "names the egress proxy resolves to fixed addresses instead of asking DNS (`name=address`, comma-separated)",
        |c, v| {
            let mut map = std::collections::BTreeMap::new();
            for pair in crate::settings::list(v) {
                let (name, addr) = pair.split_once('=').ok_or_else(|| format!("expected name=address, not `{pair}`"))?;
                let addr = addr.trim().parse().map_err(|_| format!("`{addr}` is not an IP address"))?;
                map.insert(name.trim().to_ascii_lowercase(), addr);
            }
            c.egress_resolve = map
        }
    ),
    set!(
        "EGRESS_ADDRESS_ALLOW",
        "(none)",
        "address classes the egress proxy may connect to besides public ones: `private` (never loopback or link-local, nor a sandbox network)",
        |c, v| {
            let classes = crate::settings::network_classes(v)?;
            if let Some(c) = classes.iter().find(|c| *c != "private") {
                return Err(format!("the egress proxy never reaches {c} addresses; only `private` may be allowed"));
            }
            c.egress_addresses = classes
        }
    ),
    set!(
        "RUNTIME_API_ADDR",
        "(none: not served)",
        "where OpenHands' Runtime API listens (`/start`, `/stop`, `/pause`, `/resume`, `/sessions/{id}`, `/list`, and its runtimes' URLs in path mode), for OpenHands deployments that run their sandboxes here; container sandboxes only",
        |c, v| c.runtime_api_addr = Some(number(v, "an address (ip:port)")?)
    ),
    set!(
        "RUNTIME_API_URL",
        "http://(RUNTIME_API_ADDR)",
        "the Runtime API's address as OpenHands deployments reach it: runtimes' URLs are under it",
        |c, v| {
            if !(v.starts_with("http://") || v.starts_with("https://")) {
                return Err(format!("expected an http(s) URL, not `{v}`"));
            }
            c.runtime_api_url = Some(v.trim_end_matches('/').to_owned())
        }
    ),
    set!(
        "RUNTIME_API_KEYS",
        "(none)",
        "the OpenHands deployments that may use the Runtime API, as `name=sha256` pairs (comma-separated): each deployment's `X-API-Key`, hashed (`halyard runtime-api-key <name>` makes one)",
        |c, v| {
            let mut keys = std::collections::BTreeMap::new();
            for pair in crate::settings::list(v) {
                let (name, hash) = pair.split_once('=').ok_or_else(|| format!("expected name=sha256, not `{pair}`"))?;
                let hash = hash.trim().to_ascii_lowercase();
                if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(format!("`{}`: a key's SHA-256 is 64 hex digits", name.trim()));
                }
                keys.insert(name.trim().to_owned(), hash);
            }
            c.runtime_api_keys = keys
        }
    ),
    set!(
        "RUNTIME_API_POOL",
        "(none)",
        "warm runtimes the Runtime API keeps started, as `image=count` pairs (comma-separated): a start of the image asking what its last start asked (OpenHands asks the same for every start of a sandbox spec) is given one already running",
        |c, v| {
            let mut pool = std::collections::BTreeMap::new();
            for pair in crate::settings::list(v) {
                let (image, count) = pair.rsplit_once('=').ok_or_else(|| format!("expected image=count, not `{pair}`"))?;
                pool.insert(image.trim().to_owned(), number(count.trim(), "a count")?);
            }
            c.runtime_api_pool = pool
        }
    ),
    set!(
        "RUNTIME_API_URL_MODE",
        "`path`",
        "runtimes' URLs: `path` (`<RUNTIME_API_URL>/<id>`, `/<id>/vscode`) or `subdomain` (`<id>.<host>`, `vscode-<id>.<host>`: the host's subdomains must resolve to the Runtime API, as `*.localhost` does)",
        |c, v| c.runtime_api_subdomains = one_of(v, &["path", "subdomain"])? == "subdomain"
    ),
    set!("RUNTIME_API_MAX", "`10`", "most runtimes one OpenHands deployment may have at once (running or paused)", |c, v| c
        .runtime_api_max =
        number(v, "a count")?),
    set!(
        "SANDBOX_BROWSER_IDLE_SECS",
        "`600`",
        "a sandbox's browser stops after this long unused (the next browser call starts it again)",
        |c, v| c.browser_idle_secs = number(v, "seconds")?
    ),
    set!(
        "SANDBOX_VSCODE_IDLE_SECS",
        "`600`",
        "a sandbox's VS Code (code-server) stops after this long without a request or an open connection (the next request starts it again)",
        |c, v| c.vscode_idle_secs = number(v, "seconds")?
    ),
    set!("EXECUTOR_COMMAND", "(this binary)", "the command that starts an executor, split on spaces (else `halyard executor`)", |c, v| c
        .executor_command =
        v.split_whitespace().map(str::to_owned).collect()),
    set!(
        "MAX_RUNNING_PER_USER",
        "`0`",
        "running sandboxes per user and in total, across hosts (0: none); a start past one waits in the start queue",
        |c, v| c.max_running_per_user = number(v, "a count")?
    ),
    set!(
        "MAX_RUNNING_TOTAL",
        "`0`",
        "running sandboxes per user and in total, across hosts (0: none); a start past one waits in the start queue",
        |c, v| c.max_running_total = number(v, "a count")?
    ),
    set!(
        "SANDBOX_HOST_SLOTS",
        "`0`",
        "sandboxes one host runs at once (0: no limit); a start no host has room for waits in the start queue",
        |c, v| c.host_slots = number(v, "a count")?
    ),
    set!(
        "START_QUEUE_DEADLINE_SECS",
        "`1800`",
        "how long a start may wait in the start queue (a start's `queue_deadline_secs` overrides it)",
        |c, v| c.queue_deadline_secs = number(v, "seconds")?
    ),
    set!(
        "SNAPSHOT_TTL_SECS",
        "`604800`",
        "how long an environment snapshot is started from after it was made (an environment's `snapshot_ttl_secs` overrides it)",
        |c, v| c.snapshot_ttl_secs = number(v, "seconds")?
    ),
    set!("SNAPSHOT_QUOTA_USER_MB", "`20480`", "disk one user's environment snapshots may take together, in MiB (0: no limit)", |c, v| c
        .snapshot_quota_user_mb =
        number(v, "MiB")?),
    set!(
        "SNAPSHOT_QUOTA_ORG_MB",
        "`102400`",
        "disk the environment snapshots made in one organization may take together, in MiB (0: no limit)",
        |c, v| c.snapshot_quota_org_mb = number(v, "MiB")?
    ),
    set!("OUTPUT_CAP_BYTES", "`30000`", "a command's output returned to the agent", |c, v| c.output_cap_bytes = number(v, "bytes")?),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_specs_egress_is_a_class_or_a_policy_by_domain() {
        let text = r#"
[[specs]]
name = "open"

[[specs]]
name = "locked"
egress = { allow = ["registry.test", "*.corp.test"], mode = "read_only" }
"#;
        let c: SandboxConfig = toml::from_str(text).unwrap();
        let locked = c.spec("locked").unwrap();
        assert_eq!(locked.egress, "policy");
        assert_eq!(locked.egress.policy.as_ref().unwrap().allow, ["registry.test", "*.corp.test"]);
        assert_eq!(c.spec("open").unwrap().egress, "open");
        // Written back as it was read.
        let again: SandboxConfig = toml::from_str(&toml::to_string(&c).unwrap()).unwrap();
        assert_eq!(again.spec("locked").unwrap().egress, locked.egress);
        // A bad pattern is refused when the file is read, in words.
        let bad = "[[specs]]\nname = \"x\"\negress = { allow = [\"https://x.test\"] }\n";
        let Err(e) = toml::from_str::<SandboxConfig>(bad) else { panic!("a bad pattern was taken") };
        assert!(e.to_string().contains("egress"), "{e}");
    }
}
