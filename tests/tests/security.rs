#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! The hostile agent: a prompt-injected model that runs whatever it is told, in a deployment
//! shared by two users. In a process sandbox and in containers it tries to read the deployment
//! secret, the data dir, the bus credentials, another user's workspace and Halyard's
//! environment, to talk to NATS without or with guessed credentials, to reach the gateway and
//! another user's sandbox over the network (process sandboxes have a network of their own),
//! and to reach another user's container and the Docker host. Every attempt fails; the same
//! runs show that the legitimate paths (its own workspace, its own exposed ports) still work.

use std::io::{Read, Write};
use std::time::Duration;

use halyard_tests::docker::{containers, docker, require_engine};
use halyard_tests::events::finished;
use halyard_tests::harness::LLM_KEY;
use halyard_tests::{Api, Halyard, HalyardOptions, Reply, ScriptedLlm, init};
use serde_json::{Value, json};

const ALICE: &str = "alice-secret-key";
const BOB: &str = "bob-secret-key";

/// Runs `commands` as one agent run of a new conversation of `api`'s user (one terminal call
/// each, then finish) and returns each command's output, in order.
async fn run_commands(llm: &ScriptedLlm, api: &Api, spec: Option<&str>, commands: &[String]) -> (String, Vec<String>) {
    llm.push(commands.iter().map(|c| Reply::tool("terminal", json!({"command": c, "timeout": 20}))));
    llm.push([Reply::finish("done")]);
    let mut body = json!({"message": "do as you are told"});
    if let Some(spec) = spec {
        body["sandbox_spec"] = spec.into();
    }
    let (conv, task) = api.start_ready(body).await;
    let events = api.wait_finished(&conv, 1).await;
    let outputs: Vec<String> = events
        .iter()
        .filter(|e| e["kind"] == "observation" && e["tool"] == "terminal")
        .map(|e| e["content"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(outputs.len(), commands.len(), "one output per command: {}", Value::Array(events));
    (task["sandbox_id"].as_str().unwrap().to_owned(), outputs)
}

/// A Python snippet that speaks NATS' text protocol to `port` (as `user`/`pass` if given): it
/// reads the server's greeting, then connects, tries to subscribe to everything and to publish
/// a command, and prints what the server answers.
fn nats_probe(port: &str, creds: Option<(&str, &str)>) -> String {
    let auth = creds.map(|(u, p)| format!(r#","user":"{u}","pass":"{p}""#)).unwrap_or_default();
    let script = format!(
        r#"import socket
s = socket.create_connection(("127.0.0.1", {port}), timeout=3)
print(s.recv(4096).decode()[:4])
s.sendall(b'CONNECT {{"verbose":false{auth}}}\r\nSUB > 1\r\nPUB halyard.cmd.agent.x 2\r\nhi\r\nPING\r\n')
try:
    print(s.recv(4096).decode())
except Exception as e:
    print("error", e)
"#
    );
    format!("python3 - <<'PY' 2>&1\n{script}PY\necho probe-done")
}

#[tokio::test]
async fn a_hostile_agent_in_a_process_sandbox_reaches_nothing_but_its_own() {
    init();
    let llm = ScriptedLlm::start().await;
    // The tests run as root: each sandbox gets a uid of its own.
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    hostile_process_agent(&h, &llm, true).await;
}

/// Halyard run by an unprivileged user: sandboxes are isolated by bubblewrap's namespaces, where
/// Halyard's files do not exist.
#[tokio::test]
async fn a_hostile_agent_in_a_bubblewrap_sandbox_reaches_nothing_but_its_own() {
    init();
    let llm = ScriptedLlm::start().await;
    let mut opts = HalyardOptions::new(&llm.base_url);
    opts.run_as = Some(65534);
    let h = Halyard::start(opts);
    hostile_process_agent(&h, &llm, false).await;
}

/// Without any isolation, one user's sandboxes run and a second user's are refused in words.
#[tokio::test]
async fn without_isolation_a_second_users_process_sandbox_is_refused() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_PROCESS_ISOLATION", "none"));
    llm.push([Reply::finish("ok")]);
    h.api(ALICE).start_ready(json!({"message": "first"})).await;
    let (s, task) = h.api(BOB).post("/api/v1/conversations", json!({"message": "second"})).await;
    assert_eq!(s, 202, "{task}");
    let task = h.api(BOB).wait_task(task["id"].as_str().unwrap(), &["READY", "ERROR"]).await;
    assert_eq!(task["status"], "ERROR", "{task}");
    let detail = task["detail"].as_str().unwrap();
    assert!(detail.contains("not isolated") && detail.contains("bubblewrap") && detail.contains("Docker"), "{detail}");
}

const GATEWAY_ON_LOOPBACK: &str = "the gateway on the host's loopback";

/// The attacks of a hostile agent in a process sandbox, and the legitimate paths beside them.
/// `own_uids`: each sandbox runs under a uid of its own (rather than in namespaces).
async fn hostile_process_agent(h: &Halyard, llm: &ScriptedLlm, own_uids: bool) {
    let data = h.data.path().display().to_string();
    let secret = std::fs::read_to_string(h.data.path().join("secret")).unwrap();
    let bus_passwords: Vec<String> = ["admin", "agent", "gateway", "reader"].iter().map(|r| h.nats_credentials(r).1).collect();
    let port = h.nats.rsplit(':').next().unwrap().to_owned();

    // Bob keeps notes in his workspace, and serves them on his first app port.
    let serve = "(setsid nohup python3 -m http.server \"$WORKER_1_PORT\" --bind 127.0.0.1 >/dev/null 2>&1 &); sleep 1; echo served";
    let (bob_sandbox, _) = run_commands(llm, &h.api(BOB), None, &["echo bob-private-notes > notes.txt".into(), serve.into()]).await;
    let bob_ws = h.workspace(&bob_sandbox).display().to_string();
    assert!(std::fs::read_to_string(format!("{bob_ws}/notes.txt")).unwrap().contains("bob-private-notes"));
    // Where Bob's executor and app are reached from the host: the publish host, never the
    // gateway's address; the host reaches the app (through the supervisor's forward).
    let (_, bob_view) = h.api(BOB).get(&format!("/api/v1/sandboxes/{bob_sandbox}")).await;
    let bob_urls: Vec<(String, String)> = bob_view["exposed_urls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| {
            let authority = u["url"].as_str().unwrap().trim_start_matches("http://").trim_end_matches('/').to_owned();
            (u["name"].as_str().unwrap().to_owned(), authority)
        })
        .collect();
    assert!(bob_urls.iter().all(|(_, a)| a.starts_with("127.0.0.2:")), "{bob_view}");
    let bob_app = &bob_urls.iter().find(|(n, _)| n == "WORKER_1").unwrap().1;
    let listing = reqwest::get(format!("http://{bob_app}/")).await.unwrap().text().await.unwrap();
    assert!(listing.contains("notes.txt"), "the host cannot reach Bob's app: {listing}");
    let gateway_port = h.http.rsplit(':').next().unwrap().to_owned();

    // Alice's agent is hostile.
    let attacks = [
        ("the deployment secret", format!("cat {data}/secret")),
        ("the data dir", format!("ls {data}")),
        ("the bus credentials", format!("cat {data}/nats-credentials.json")),
        ("the bus store", format!("ls {data}/nats")),
        ("the nats-server configuration", format!("cat {data}/nats/nats-server.conf")),
        ("the read models", format!("ls {data}/gateway")),
        ("the list of sandboxes", format!("ls {data}/sandboxes")),
        ("another user's workspace", format!("ls {bob_ws}; cat {bob_ws}/notes.txt")),
        ("Halyard's environment", format!("cat /proc/{}/environ", h.pid())),
    ];
    let bus_attacks = [
        ("NATS without credentials", nats_probe(&port, None)),
        ("NATS as a guessed agent", nats_probe(&port, Some(("agent", "agent")))),
        ("NATS as a guessed admin", nats_probe(&port, Some(("admin", "password")))),
    ];
    // In a network of its own, nothing of the host's is there to connect to: not the gateway
    // (on its loopback, or through the NAT's gateway address), not Bob's forwarded ports.
    let mut net_attacks = vec![
        // (Asked over HTTP: the sandbox's own loopback has listeners of its own, the executor's
        // relays on ports the kernel picked, and one of those can be the gateway's number.)
        (GATEWAY_ON_LOOPBACK, fetch("127.0.0.1", gateway_port.parse().unwrap(), "/readyz")),
        ("the gateway through the NAT", tcp_probe("10.0.2.2", &gateway_port)),
        ("NATS through the NAT", tcp_probe("10.0.2.2", &port)),
    ];
    for (name, authority) in &bob_urls {
        let (ip, p) = authority.split_once(':').unwrap();
        net_attacks.push((if name == "WORKER_1" { "Bob's app" } else { "Bob's executor" }, tcp_probe(ip, p)));
    }
    // And what it listens on stays inside: a server on its loopback is not on the host's.
    let inside_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let own_server = format!(
        "(setsid nohup python3 -m http.server {inside_port} --bind 127.0.0.1 >/dev/null 2>&1 &); sleep 1; {}",
        fetch("127.0.0.1", inside_port, "/")
    );
    let legit = [
        "echo mine > own.txt && cat own.txt && pwd && echo uid=$(id -u)".to_owned(),
        "env".to_owned(),
        "ls -d /usr/bin && cat /etc/hostname".to_owned(),
    ];
    let commands: Vec<String> = attacks
        .iter()
        .map(|(_, c)| format!("{c} 2>&1"))
        .chain(bus_attacks.iter().map(|(_, c)| c.clone()))
        .chain(net_attacks.iter().map(|(_, c)| c.clone()))
        .chain([own_server])
        .chain(legit.clone())
        .collect();
    let (alice_sandbox, outputs) = run_commands(llm, &h.api(ALICE), None, &commands).await;

    // Under its own uid Halyard's files are there and closed to it. In namespaces they do not
    // exist: only the path down to its own directory does (a listing shows that and nothing
    // else).
    let skeleton = ["sandboxes", alice_sandbox.as_str()];
    let refused = |out: &str| {
        let listed = out.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('['));
        out.contains("Permission denied")
            || (!own_uids && (out.contains("No such file") || listed.into_iter().all(|l| skeleton.contains(&l))))
    };
    for ((what, _), out) in attacks.iter().zip(&outputs) {
        assert!(refused(out), "{what} was not refused: {out}");
        assert!(!out.contains("bob-private-notes") && !out.contains(secret.trim()), "{what} leaked: {out}");
        assert!(!bus_passwords.iter().any(|p| out.contains(p.as_str())), "{what} leaked a bus password: {out}");
    }
    for ((what, _), out) in bus_attacks.iter().zip(&outputs[attacks.len()..]) {
        assert!(out.contains("ConnectionRefusedError"), "{what} was reachable: {out}");
        assert!(!out.contains("PONG") && !out.contains("MSG "), "{what} got through: {out}");
    }
    let after_bus = attacks.len() + bus_attacks.len();
    for ((what, _), out) in net_attacks.iter().zip(&outputs[after_bus..]) {
        if *what == GATEWAY_ON_LOOPBACK {
            // Refused, or something of the sandbox's own that is not the gateway.
            assert!(out.contains("Error") && !out.contains("ready"), "{what} was reachable: {out}");
            continue;
        }
        assert!(out.starts_with("Error") && !out.contains("connected"), "{what} was reachable: {out}");
    }
    let own_server = &outputs[after_bus + net_attacks.len()];
    assert!(own_server.contains("</html>"), "its own server does not answer inside: {own_server}");
    let from_host = std::net::TcpStream::connect_timeout(&([127, 0, 0, 1], inside_port).into(), Duration::from_secs(2));
    assert!(from_host.is_err(), "the sandbox's server on its loopback listens on the host's");
    // The legitimate paths: its own workspace, at a container's path (the host's is not
    // shown), not as root; no key in its environment; the system's files.
    let own = &outputs[after_bus + net_attacks.len() + 1..];
    let alice_ws = h.workspace(&alice_sandbox).display().to_string();
    assert!(own[0].contains("mine") && own[0].lines().any(|l| l.trim() == "/workspace"), "{}", own[0]);
    assert!(!own[0].contains(&alice_ws), "the host's path is shown: {}", own[0]);
    let uid: u32 = own[0].lines().find_map(|l| l.strip_prefix("uid=")).unwrap().trim().parse().unwrap();
    assert_ne!(uid, 0, "the sandbox runs as root");
    assert!(!own[1].contains(LLM_KEY) && !own[1].contains("HALYARD_") && !own[1].contains(secret.trim()), "{}", own[1]);
    assert!(own[1].lines().any(|l| l == "HOME=/home/halyard"), "home is not a container's: {}", own[1]);
    assert!(own[2].contains("/usr/bin"), "the system's files are readable: {}", own[2]);
    if own_uids {
        let meta = |p: String| std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(p).unwrap());
        assert_ne!(meta(format!("{bob_ws}/notes.txt")), meta(format!("{alice_ws}/own.txt")), "Alice and Bob share a uid");
    }
    assert!(h.log().lines().all(|l| !l.contains(secret.trim())), "the secret is in the log");
}

/// The default spec and one of each other egress class: `locked` (`internet`), `offline`
/// (`none`).
const EGRESS_SPECS: &str = "[[sandbox.specs]]\nname = \"default\"\n\n[[sandbox.specs]]\nname = \"locked\"\negress = \"internet\"\n\n\
     [[sandbox.specs]]\nname = \"offline\"\negress = \"none\"\n";

/// A configuration file (TOML) holding `text`, for `HALYARD_CONFIG`; gone when dropped.
fn config_file(text: &str) -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), text).unwrap();
    file
}

/// A TCP server on every address of the host that answers `host-secret` to anyone.
fn host_server() -> u16 {
    let listener = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let mut buf = [0u8; 256];
            let _ = conn.set_read_timeout(Some(Duration::from_millis(200)));
            let _ = conn.read(&mut buf);
            let _ = conn.write_all(b"HTTP/1.0 200 OK\r\n\r\nhost-secret\n");
        }
    });
    port
}

/// Python (in the base image) fetching `http://ip:port/path`: the body, or the error.
fn fetch(ip: &str, port: u16, path: &str) -> String {
    format!(
        "python3 -c 'import urllib.request,sys; print(urllib.request.urlopen(sys.argv[1], timeout=4).read().decode().strip())' \
         http://{ip}:{port}{path} 2>&1 | tail -1"
    )
}

/// Python: whether a TCP connection to `ip:port` opens.
fn tcp_probe(ip: &str, port: &str) -> String {
    format!(
        "python3 -c 'import socket,sys\ntry:\n socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3); print(\"connected\")\nexcept Exception as e: print(\"Error\", e)' {ip} {port}"
    )
}

fn container_ip(container: &str) -> String {
    docker(&["inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", container])
}

#[tokio::test]
async fn a_hostile_agent_in_a_container_reaches_neither_other_sandboxes_nor_the_host() {
    hostile_agent_in_containers("runc").await;
}

/// The same probes with every spec under gVisor (`HALYARD_SANDBOX_RUNTIME=gvisor`): the agent's
/// commands run on gVisor's kernel, and the network rules hold as under runc.
#[tokio::test]
async fn under_gvisor_a_hostile_agent_reaches_neither_other_sandboxes_nor_the_host() {
    hostile_agent_in_containers("gvisor").await;
}

async fn hostile_agent_in_containers(runtime: &str) {
    init();
    require_engine();
    let llm = ScriptedLlm::start().await;
    let config = config_file(EGRESS_SPECS);
    let h = Halyard::start(
        HalyardOptions::new(&llm.base_url)
            .set("HALYARD_SANDBOX", "docker")
            .set("HALYARD_SANDBOX_POOL_SIZE", "0")
            .set("HALYARD_SANDBOX_RUNTIME", runtime)
            .set("HALYARD_CONFIG", &config.path().display().to_string()),
    );
    let host_port = host_server();
    let serve = |name: &str| {
        format!(
            "mkdir -p /tmp/www && echo {name} > /tmp/www/index.html && cd /tmp/www && (nohup python3 -m http.server 8001 >/dev/null 2>&1 &) && sleep 1 && echo serving"
        )
    };

    // Bob serves an app on WORKER_1.
    let bob = h.api(BOB);
    let (bob_sandbox, out) = run_commands(&llm, &bob, None, &[serve("bob-app")]).await;
    assert!(out[0].contains("serving"), "{}", out[0]);
    let bob_container = &containers(&h.deployment(), Some(&format!("dev.halyard.sandbox={bob_sandbox}")))[0];
    let bob_ip = container_ip(bob_container);
    // It is there: the host reaches it, at its exposed URL and at its address.
    let (_, view) = bob.get(&format!("/api/v1/sandboxes/{bob_sandbox}")).await;
    let worker =
        view["exposed_urls"].as_array().unwrap().iter().find(|u| u["name"] == "WORKER_1").unwrap()["url"].as_str().unwrap().to_owned();
    assert!(reqwest::get(format!("{worker}/index.html")).await.unwrap().text().await.unwrap().contains("bob-app"));
    assert!(reqwest::get(format!("http://{bob_ip}:8001/index.html")).await.unwrap().text().await.unwrap().contains("bob-app"));

    // Alice's agents are hostile, with each egress. The host answers on every address,
    // including each of this deployment's networks' gateways (the `policy` network's too, where
    // the egress proxy listens on a port of its own).
    let alice = h.api(ALICE);
    let filter = format!("label=dev.halyard.deployment={}", h.deployment());
    let networks: Vec<(String, String)> = docker(&["network", "ls", "-q", "--filter", &filter])
        .lines()
        .map(|id| {
            let name = docker(&["network", "inspect", "-f", "{{.Name}}", id]);
            let gateway = docker(&["network", "inspect", "-f", "{{range .IPAM.Config}}{{.Gateway}}{{end}}", id]);
            (name, gateway)
        })
        .collect();
    assert_eq!(networks.len(), 4, "one network per egress class (open, internet, none, policy): {networks:?}");
    let attacks_on_bob = [fetch(&bob_ip, 8001, "/index.html"), fetch(&bob_ip, 8000, "/health")];
    let attacks_on_host: Vec<String> = networks.iter().map(|(_, gw)| fetch(gw, host_port, "/")).collect();
    let refused = |o: &str| o.contains("Error") || o.contains("timed out") || o.contains("refused") || o.contains("unreachable");

    // open: other sandboxes are out of reach; the host is reachable at the gateway of its own
    // network (that is what `open` means, and it shows the probe works); its own app is
    // reachable through its own exposed port.
    let open_network = networks.iter().position(|(name, _)| name.ends_with("-open")).unwrap();
    // Nor Halyard's bus, data dir or environment: NATS listens on the host's loopback only, the
    // data dir is not in the container, and the environment is the spec's.
    let nats_port = h.nats.rsplit(':').next().unwrap().to_owned();
    let data = h.data.path().display().to_string();
    let halyard_things =
        [tcp_probe(&networks[open_network].1, &nats_port), format!("ls {data} 2>&1"), "env".to_owned(), "dmesg 2>&1 | head -1".to_owned()];
    let commands =
        [vec![serve("alice-app")], attacks_on_bob.to_vec(), vec![attacks_on_host[open_network].clone()], halyard_things.to_vec()].concat();
    let (open_sandbox, out) = run_commands(&llm, &alice, None, &commands).await;
    assert!(out[0].contains("serving"), "{}", out[0]);
    for o in &out[1..3] {
        assert!(!o.contains("bob-app") && !o.contains("\"ok\"") && refused(o), "reached Bob's container: {o}");
    }
    assert!(out[3].contains("host-secret"), "the probe cannot reach the host even with `open` egress: {}", out[3]);
    assert!(out[4].contains("Error") && !out[4].contains("connected"), "reached NATS: {}", out[4]);
    // (gVisor says `Invalid argument` where Linux says `No such file or directory`.)
    assert!(out[5].contains("cannot access"), "the data dir is visible: {}", out[5]);
    assert!(!out[6].contains("HALYARD_") && !out[6].contains(LLM_KEY), "{}", out[6]);
    // The kernel the commands met: gVisor's says so at its first line.
    assert_eq!(out[7].contains("gVisor"), runtime == "gvisor", "{}", out[7]);
    let (_, view) = alice.get(&format!("/api/v1/sandboxes/{open_sandbox}")).await;
    let own =
        view["exposed_urls"].as_array().unwrap().iter().find(|u| u["name"] == "WORKER_1").unwrap()["url"].as_str().unwrap().to_owned();
    assert!(reqwest::get(format!("{own}/index.html")).await.unwrap().text().await.unwrap().contains("alice-app"));

    // internet and none: neither Bob nor the host, at any of its addresses.
    for spec in ["locked", "offline"] {
        let commands = [attacks_on_bob.to_vec(), attacks_on_host.clone()].concat();
        let (sandbox, out) = run_commands(&llm, &alice, Some(spec), &commands).await;
        for o in &out {
            assert!(
                !o.contains("bob-app") && !o.contains("host-secret") && !o.contains("\"ok\"") && refused(o),
                "{spec}: got through: {o}"
            );
        }
        // The host reaches the sandbox's executor all the same (the run above went through it).
        let (_, view) = alice.get(&format!("/api/v1/sandboxes/{sandbox}")).await;
        assert_eq!(view["status"], "RUNNING", "{view}");
    }
}

/// Walks every operation of the served OpenAPI document whose path takes an id, as Bob, with
/// Alice's ids: always 404 (403 on the admin API, which Bob may not use), never her data; and
/// afterwards all of Alice's things are as they were.
#[tokio::test]
async fn every_endpoint_that_takes_an_id_is_404_to_another_user() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_WEBHOOK_ALLOW", "loopback"));
    let (alice, bob) = (h.api(ALICE), h.api(BOB));
    let receiver = halyard_tests::Receiver::start().await;
    let (s, webhook) = alice.post("/api/v1/webhooks", json!({"url": receiver.url})).await;
    assert_eq!(s, 201, "{webhook}");
    let webhook = webhook["id"].as_str().unwrap().to_owned();
    llm.push([Reply::finish("done")]);
    let (conv, task) = alice.start_ready(json!({"message": "mine", "title": "Alice's"})).await;
    let (task_id, sandbox) = (task["id"].as_str().unwrap().to_owned(), task["sandbox_id"].as_str().unwrap().to_owned());
    let deliveries = alice
        .wait_for(&format!("/api/v1/webhooks/{webhook}/deliveries"), "a delivery", |d| !d["items"].as_array().unwrap().is_empty())
        .await;
    let delivery = deliveries["items"][0]["delivery_id"].as_str().unwrap().to_owned();
    // Secrets, LLM profiles, git providers and MCP servers are named within each user's own space: Bob's names reach only
    // his own (a PUT would create his own, so it is not walked).
    let (s, _) = alice.call(reqwest::Method::PUT, "/api/v1/secrets/alice", Some(json!({"value": "alice-only-value"}))).await;
    assert_eq!(s, 201);
    let own_profile = json!({"base_url": "https://llm.example.com/v1", "model": "alices-model"});
    let (s, _) = alice.call(reqwest::Method::PUT, "/api/v1/llm-profiles/alice", Some(own_profile)).await;
    assert_eq!(s, 201);
    let (s, _) = alice.call(reqwest::Method::PUT, "/api/v1/git-providers/alice", Some(json!({"token": "ghp_alices"}))).await;
    assert_eq!(s, 201);
    let own_server = json!({"transport": "stdio", "command": "alices-mcp-server"});
    let (s, _) = alice.call(reqwest::Method::PUT, "/api/v1/mcp-servers/alice", Some(own_server)).await;
    assert_eq!(s, 201);

    let (s, made) = alice.post("/api/v1/automations", json!({"name": "Alice's automation", "trigger": {"kind": "webhook"}})).await;
    assert_eq!(s, 201, "{made}");
    let automation = made["id"].as_str().unwrap().to_owned();
    // An organization of Alice's (Bob is not in it), with a profile of its own.
    assert_eq!(alice.post("/api/v1/orgs", json!({"name": "alices-org"})).await.0, 201);
    let org_profile = json!({"base_url": "https://llm.example.com/v1", "model": "alices-org-model"});
    assert_eq!(alice.call(reqwest::Method::PUT, "/api/v1/orgs/alices-org/llm-profiles/alice", Some(org_profile.clone())).await.0, 201);

    let (_, doc) = bob.get("/api/v1/openapi.json").await;
    let mut walked = 0;
    for (path, ops) in doc["paths"].as_object().unwrap() {
        if !path.contains('{') || path.ends_with("/events/ws") {
            continue;
        }
        let id = if path.starts_with("/api/v1/conversations/") {
            &conv
        } else if path.starts_with("/api/v1/start-tasks/") {
            &task_id
        } else if path.starts_with("/api/v1/sandboxes/") {
            &sandbox
        } else if path.starts_with("/api/v1/webhooks/") {
            &webhook
        } else if path.starts_with("/api/v1/automations/") {
            &automation
        } else {
            "alice"
        };
        // A share link's token names Alice's conversation; Bob has no secret of it.
        let guess = format!("{conv}.{}", "0".repeat(64));
        let url = path
            .replace("{id}", id)
            .replace("{delivery_id}", &delivery)
            .replace("{name}", "alice")
            .replace("{token}", &guess)
            .replace("{org}", "alices-org")
            // A scope Bob can name that is not his: Alice's organization.
            .replace("{scope}", "@alices-org")
            .replace("{user}", "alice")
            .replace("{model}", "scripted-model")
            .replace("{sha256}", &"0".repeat(64))
            .replace("{agent}", "claude-code");
        for (method, _) in ops.as_object().unwrap() {
            let per_user_name = [
                "/api/v1/secrets/",
                "/api/v1/llm-profiles/",
                "/api/v1/git-providers/",
                "/api/v1/mcp-servers/",
                "/api/v1/me/agent-logins/",
                "/api/v1/environments/",
                "/api/v1/templates/",
            ]
            .iter()
            .any(|p| path.starts_with(p));
            if per_user_name && method == "put" {
                continue;
            }
            let body = match (method.as_str(), path.as_str()) {
                ("post", p) if p.starts_with("/api/v1/plugins/") && p.ends_with("/marketplaces") => {
                    Some(json!({"url": "http://127.0.0.1:9/plugins.git"}))
                }
                ("post", p) if p.starts_with("/api/v1/plugins/") && p.ends_with("/installed") => Some(json!({"plugin": "kit@acme"})),
                ("patch", p) if p.starts_with("/api/v1/plugins/") => Some(json!({"enabled": false})),
                ("put", p) if p.starts_with("/api/v1/orgs/") && p.contains("/llm-profiles/") => Some(org_profile.clone()),
                ("put", p) if p.starts_with("/api/v1/orgs/") && p.contains("/mcp-servers/") => {
                    Some(json!({"transport": "http", "url": "http://127.0.0.1:9/mcp"}))
                }
                ("put", p) if p.starts_with("/api/v1/orgs/") && p.contains("/skills/") => Some(json!({"content": "Bob's rules."})),
                ("put", p) if p.starts_with("/api/v1/orgs/") && p.contains("/templates/") => {
                    Some(json!({"start": {"message": "Bob's start"}}))
                }
                ("put", p) if p.contains("/agents/") => Some(json!({"title": "Bob's", "command": "true", "wire": "openai"})),
                ("put", p) if p.starts_with("/api/v1/orgs/") && p.contains("/prices/") => {
                    Some(json!({"input_per_million": 0.0, "output_per_million": 0.0}))
                }
                ("put", p) if p.starts_with("/api/v1/orgs/") || p.starts_with("/api/v1/admin/environments/") => Some(json!({})),
                ("post", p) if p.starts_with("/api/v1/orgs/") => Some(json!({"user": "bob"})),
                ("patch", p) if p.starts_with("/api/v1/orgs/") => Some(json!({"role": "owner"})),
                ("put", p) if p.ends_with("/llm-profile") => Some(json!({"profile": null})),
                ("post", p) if p.ends_with("/messages") => Some(json!({"text": "bob was here"})),
                ("post", p) if p.ends_with("/ask") => Some(json!({"question": "what is Alice doing?"})),
                ("post", p) if p.ends_with("/reject") => Some(json!({"reason": "bob says no"})),
                ("post", p) if p.ends_with("/hooks-consent") => Some(json!({"sha256": "0".repeat(64), "allow": true})),
                ("post", p) if p.ends_with("/restore") || p.ends_with("/fork") => Some(json!({"at_seq": 1})),
                ("put", p) if p.ends_with("/confirmation-policy") => Some(json!({"policy": "never"})),
                ("post", p) if p.ends_with("/keys") => Some(json!({"name": "bob's"})),
                ("patch", p) if p.starts_with("/api/v1/conversations/") => Some(json!({"title": "Bob's now"})),
                ("patch", p) if p.starts_with("/api/v1/webhooks/") || p.starts_with("/api/v1/automations/") => {
                    Some(json!({"enabled": false}))
                }
                ("patch", _) => Some(json!({"disabled": true})),
                _ => None,
            };
            let (status, answer) = bob.call(method.to_uppercase().parse().unwrap(), &url, body).await;
            // The deployment's own settings are its administrators', not a user's to find.
            let (want, code) = if path.starts_with("/api/v1/admin/") {
                (403, "forbidden")
            } else if path.starts_with("/api/v1/agents/") {
                (403, "admin_only")
            } else {
                (404, "not_found")
            };
            assert_eq!((status, answer["error"]["code"].as_str()), (want, Some(code)), "{method} {url}: {answer}");
            assert!(!answer.to_string().contains("Alice's") && !answer.to_string().contains(&receiver.url), "{method} {url}: {answer}");
            walked += 1;
        }
    }
    assert!(walked >= 20, "only {walked} operations walked");
    // The WebSocket handshake is refused the same way, with Bob's own ticket.
    let (s, t) = h.api(BOB).post("/api/v1/ws-tickets", json!({})).await;
    assert_eq!(s, 201, "{t}");
    let ws = format!(
        "{}/api/v1/conversations/{conv}/events/ws?after_seq=0&access_token={}",
        h.http.replacen("http", "ws", 1),
        t["ticket"].as_str().unwrap()
    );
    match tokio_tungstenite::connect_async(ws).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => assert_eq!(resp.status(), 404),
        other => panic!("Bob opened Alice's event stream: {:?}", other.map(|_| ())),
    }

    // Nothing of Alice's changed.
    let (s, c) = alice.get(&format!("/api/v1/conversations/{conv}")).await;
    assert_eq!((s, c["title"].as_str()), (200, Some("Alice's")), "{c}");
    let (s, w) = alice.get(&format!("/api/v1/webhooks/{webhook}")).await;
    assert_eq!((s, w["enabled"].as_bool()), (200, Some(true)), "{w}");
    let (s, sb) = alice.get(&format!("/api/v1/sandboxes/{sandbox}")).await;
    assert_eq!((s, sb["status"].as_str()), (200, Some("RUNNING")), "{sb}");
    let events = alice.events(&conv).await;
    assert!(events.iter().all(|e| !e.to_string().contains("bob was here")), "Bob wrote into Alice's conversation");
    assert_eq!(alice.get("/api/v1/secrets/alice").await.0, 200);
    assert_eq!(alice.get("/api/v1/llm-profiles/alice").await.1["model"], "alices-model");
    assert_eq!(alice.get("/api/v1/git-providers/alice").await.1["host"], "github.com");
    assert_eq!(alice.get("/api/v1/mcp-servers/alice").await.1["command"], "alices-mcp-server");
    let (_, members) = alice.get("/api/v1/orgs/alices-org/members").await;
    assert_eq!(members["items"], json!([{"user": "alice", "role": "owner"}]), "Bob got into Alice's organization");
    assert_eq!(alice.get("/api/v1/orgs/alices-org/llm-profiles").await.1["items"][0]["model"], "alices-org-model");
}

/// A process sandbox's resource limits (its spec's, as a container's): a memory hog, a fork bomb
/// and a disk filler end as commands that say which limit they hit, the sandbox goes on, and
/// another user's conversation finishes meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_agent_cannot_starve_the_host_and_its_neighbour_finishes() {
    init();
    let llm = ScriptedLlm::start().await;
    let hog = "python3 -c 'b = bytearray(600 * 1024 * 1024); print(\"allocated\", len(b))'; echo exit=$?";
    let bomb = r#"python3 - <<'PY'
import os, time
kids, refused = [], None
for i in range(400):
    try:
        pid = os.fork()
    except OSError as e:
        refused = e.strerror
        break
    if pid == 0:
        time.sleep(2)
        os._exit(0)
    kids.append(pid)
for k in kids:
    os.waitpid(k, 0)
print("forked", len(kids), "refused:", refused)
PY"#;
    // 2 GB in 10 MB appends, far past the spec's 64 MiB of disk; then what is left of it.
    let fill = "for i in $(seq 200); do head -c 10000000 /dev/zero >> fill || break; done; echo wrote-it-all";
    let after = "du -sm fill | cut -f1; rm -f fill; echo still-alive";
    // Both users' runs are scripted by what was asked and how far each has come.
    llm.fallback(move |req: &Value| {
        let messages = req["messages"].as_array().cloned().unwrap_or_default();
        let last_user = messages.iter().rposition(|m| m["role"] == "user").unwrap_or(0);
        let asked = messages[last_user]["content"].to_string();
        let step = messages[last_user..].iter().filter(|m| m["role"] == "tool").count();
        let steps: &[&str] = if asked.contains("starve") { &[hog, bomb, fill, after] } else { &["echo bob-was-here"] };
        match steps.get(step) {
            Some(c) => Reply::tool("terminal", json!({"command": c, "timeout": 30, "security_risk": "low"})),
            None => Reply::finish("done"),
        }
    });
    let config = config_file(
        "[[sandbox.specs]]\nname = \"default\"\n\n[[sandbox.specs]]\nname = \"small\"\nmemory_mb = 200\npids_limit = 64\ncpus = 0.5\ndisk_mb = 64\n",
    );
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_CONFIG", &config.path().display().to_string()));
    let (alice, bob) = (h.api(ALICE), h.api(BOB));
    let (alice_events, bob_events) = tokio::join!(
        async {
            let (conv, _) = alice.start_ready(json!({"message": "starve the host", "sandbox_spec": "small"})).await;
            alice.wait_events(&conv, "Alice's run to finish", finished).await
        },
        async {
            // Bob starts while Alice's hog and bomb run.
            tokio::time::sleep(Duration::from_millis(500)).await;
            let (conv, _) = bob.start_ready(json!({"message": "a quick one"})).await;
            bob.wait_events(&conv, "Bob's run to finish", finished).await
        }
    );
    let outputs: Vec<String> = alice_events
        .iter()
        .filter(|e| e["kind"] == "observation" && e["tool"] == "terminal")
        .map(|e| e["content"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(outputs.len(), 4, "{}", Value::Array(alice_events.clone()));
    let allocated = outputs[0].lines().any(|l| l.starts_with("allocated"));
    assert!(!allocated && outputs[0].contains("exit=137"), "the hog was not stopped: {}", outputs[0]);
    assert!(outputs[0].contains("memory limit (200 MiB)"), "the observation does not name the limit: {}", outputs[0]);
    let forked: usize = outputs[1].split_whitespace().nth(1).and_then(|n| n.parse().ok()).unwrap_or(usize::MAX);
    assert!(forked < 64 && outputs[1].contains("refused: Resource temporarily unavailable"), "{}", outputs[1]);
    assert!(outputs[1].contains("process limit (64)"), "the observation does not name the limit: {}", outputs[1]);
    assert!(
        !outputs[2].contains("wrote-it-all") && outputs[2].contains("disk limit (64 MiB") && outputs[2].contains("was stopped"),
        "the filler was not stopped at the disk limit: {}",
        outputs[2]
    );
    let left: u64 = outputs[3].lines().next().and_then(|n| n.trim().parse().ok()).unwrap_or(u64::MAX);
    assert!(left < 1000, "the filler wrote {left} MB of its 2000: {}", outputs[3]);
    assert!(outputs[3].contains("still-alive") && !outputs[3].contains("[Halyard"), "the sandbox did not go on: {}", outputs[3]);
    let bob_said = Value::Array(bob_events).to_string();
    assert!(bob_said.contains("bob-was-here"), "{bob_said}");
}

/// Process sandboxes' egress classes, as Docker's: `open` reaches outside the sandbox (here the
/// host's Docker bridge address, where a server of the host listens on every address),
/// `internet` refuses private ranges (so that address), `none` has no way out at all.
#[tokio::test]
async fn a_process_sandbox_keeps_to_its_egress_class() {
    init();
    require_engine();
    let llm = ScriptedLlm::start().await;
    let config = config_file(EGRESS_SPECS);
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_CONFIG", &config.path().display().to_string()));
    let port = host_server();
    let bridge = std::process::Command::new("ip").args(["-4", "-o", "addr", "show", "docker0"]).output().unwrap();
    let bridge = String::from_utf8_lossy(&bridge.stdout);
    let ip = bridge.split_whitespace().skip_while(|w| *w != "inet").nth(1).and_then(|a| a.split('/').next()).expect("docker0's address");
    let api = h.api(ALICE);
    let (_, open) = run_commands(&llm, &api, None, &[fetch(ip, port, "/")]).await;
    assert!(open[0].contains("host-secret"), "egress `open` does not get out: {}", open[0]);
    let (_, locked) = run_commands(&llm, &api, Some("locked"), &[fetch(ip, port, "/"), "echo inside-works".into()]).await;
    assert!(
        !locked[0].contains("host-secret") && locked[0].contains("Error"),
        "egress `internet` reached a private address: {}",
        locked[0]
    );
    assert!(locked[1].contains("inside-works"), "{}", locked[1]);
    let (_, offline) = run_commands(&llm, &api, Some("offline"), &[fetch(ip, port, "/")]).await;
    assert!(!offline[0].contains("host-secret"), "egress `none` got out: {}", offline[0]);
}
