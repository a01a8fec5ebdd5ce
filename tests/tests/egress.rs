#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! Outbound access by domain, in container and process sandboxes: an environment's policy
//! (allowed names, a denied wildcard), setup's wider one, the deployment's denied wildcard, an
//! operator's spec with a read-only policy of its own (under gVisor for containers), and an
//! organization's that holds over a member's wider list. The destination is a real HTTP and TLS
//! server in a container of its own network (`registry.test` and other names, resolved by the
//! proxy through `HALYARD_EGRESS_RESOLVE`); the agent's command probes it with Python's urllib
//! as a tool would (the proxy variables are exported for it), and once around the proxy. Each
//! refusal is a `network_blocked` event that the model reads; what was reached, with its bytes,
//! is the owner's summary and, for the organization, in its audit trail.

use halyard_tests::docker::require_engine;
use halyard_tests::registry::Registry;
use halyard_tests::{Api, Halyard, HalyardOptions, Reply, ScriptedLlm, init};
use reqwest::Method;
use serde_json::{Value, json};

const ALICE: &str = "alice-secret-key";

/// The agent's probes: one line each, `name OK body`, `name HTTP status body` or `name ERR why`.
fn probes(registry: &Registry, extra: &[(&str, &str)]) -> String {
    let mut calls = vec![
        ("http".to_owned(), "http://registry.test:8080/simple".to_owned(), true),
        ("https".to_owned(), "https://registry.test:8443/simple".to_owned(), true),
        ("other".to_owned(), "http://other.test:8080/".to_owned(), true),
        ("raw".to_owned(), format!("http://{}:8080/", registry.ip), true),
        ("loop".to_owned(), "http://loop.test:8080/".to_owned(), true),
        ("direct".to_owned(), format!("http://{}:8080/", registry.ip), false),
    ];
    calls.extend(extra.iter().map(|(n, u)| ((*n).to_owned(), (*u).to_owned(), true)));
    let lines: Vec<String> = calls.iter().map(|(n, u, p)| format!("probe({n:?}, {u:?}, {})", if *p { "True" } else { "False" })).collect();
    format!(
        r#"cat setup-reached.txt 2>/dev/null; python3 - <<'PY'
import ssl, urllib.request, urllib.error
ctx = ssl.create_default_context(cadata="""{cert}""")
def probe(name, url, proxy):
    handlers = [urllib.request.HTTPSHandler(context=ctx)]
    if not proxy:
        handlers.append(urllib.request.ProxyHandler({{}}))
    data = b"x" if name.startswith("post") else None
    try:
        r = urllib.request.build_opener(*handlers).open(url, data=data, timeout=8)
        print(name, "OK", r.read().decode())
    except urllib.error.HTTPError as e:
        print(name, "HTTP", e.code, e.read().decode().strip())
    except Exception as e:
        print(name, "ERR", e)
{calls}
PY"#,
        cert = registry.cert,
        calls = lines.join("\n")
    )
}

fn line<'a>(out: &'a str, name: &str) -> &'a str {
    out.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap_or_else(|| panic!("no line {name} in:\n{out}"))
}

/// Runs `command` in a conversation started with `body`, then one more step (so notes of
/// refusals that came after the command's result are read too); its events and output.
async fn run(llm: &ScriptedLlm, api: &Api, body: Value, command: &str) -> (String, Vec<Value>, String) {
    let terminal = |c: &str| Reply::tool("terminal", json!({"command": c, "security_risk": "low"}));
    llm.push([terminal(command), terminal("sleep 2; echo waited"), Reply::finish("done")]);
    let (conv, _) = api.start_ready(body).await;
    let events = api.wait_finished(&conv, 1).await;
    let out = events.iter().find(|e| e["kind"] == "observation" && e["tool"] == "terminal").unwrap()["content"].as_str().unwrap();
    (conv.clone(), events.clone(), out.to_owned())
}

/// The conversation's network summary once `done` holds of it (the proxy reports traffic every
/// few seconds, so a connection's bytes may come in more than one report).
async fn summary_when(api: &Api, conv: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (s, summary) = api.get(&format!("/api/v1/conversations/{conv}/network")).await;
        assert_eq!(s, 200, "{summary}");
        if done(&summary) {
            return summary;
        }
        assert!(std::time::Instant::now() < deadline, "the traffic was not reported: {summary}");
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

/// What the summary says of `host`:`port`, if it was reached: (connections, sent, received).
fn destination(summary: &Value, host: &str, port: u16) -> Option<(u64, u64, u64)> {
    let d = summary["reached"].as_array()?.iter().find(|d| d["host"] == host && d["port"] == port)?;
    Some((d["connections"].as_u64()?, d["bytes_sent"].as_u64()?, d["bytes_received"].as_u64()?))
}

fn blocked(events: &[Value]) -> Vec<(String, String)> {
    events
        .iter()
        .filter(|e| e["kind"] == "network_blocked")
        .map(|e| (e["host"].as_str().unwrap().to_owned(), e["rule"].as_str().unwrap().to_owned()))
        .collect()
}

#[tokio::test]
async fn a_container_reaches_only_what_its_policies_allow_and_every_refusal_is_on_the_record() {
    policies_hold("docker").await;
}

/// The same in a process sandbox: its network namespace has no way out but its executor's
/// relay to the proxy's socket (its spec's `open` NAT ends when the policy comes).
#[tokio::test]
async fn a_process_sandbox_reaches_only_what_its_policies_allow_and_every_refusal_is_on_the_record() {
    policies_hold("process").await;
}

/// A spec of the operator's held to its own read-only policy, beside the default; for
/// containers, run under gVisor (`runtime` is `gvisor`, or nothing for process sandboxes).
fn specs(runtime: &str) -> String {
    format!(
        "[[sandbox.specs]]\nname = \"default\"\n\n[[sandbox.specs]]\nname = \"locked\"\n{runtime}\
         egress = {{ allow = [\"registry.test\"], mode = \"read_only\" }}\n"
    )
}

async fn policies_hold(kind: &str) {
    init();
    require_engine();
    let registry = Registry::start();
    let llm = ScriptedLlm::start().await;
    let config = tempfile::NamedTempFile::new().unwrap();
    let runtime = if kind == "docker" { "runtime = \"gvisor\"\n" } else { "" };
    std::fs::write(config.path(), specs(runtime)).unwrap();
    let h = Halyard::start(
        HalyardOptions::new(&llm.base_url)
            .set("HALYARD_CONFIG", &config.path().display().to_string())
            // The deployment's own layer: a denied wildcard no environment can open.
            .set("HALYARD_EGRESS_DENY", "*.deploy.test")
            .set("HALYARD_SANDBOX", kind)
            .set("HALYARD_SANDBOX_POOL_SIZE", "0")
            .set("HALYARD_EGRESS_RESOLVE", &registry.resolve())
            // The registry's container is on a private network, as a company's would be.
            .set("HALYARD_EGRESS_ADDRESS_ALLOW", "private"),
    );
    let api = h.api(ALICE);

    // Bad policies are refused in words.
    let (s, e) = api.call(Method::PUT, "/api/v1/environments/bad", Some(json!({"egress": {"allow": ["https://x.test"]}}))).await;
    assert!(s == 400 && e["error"]["message"].as_str().unwrap().contains("`egress.allow`"), "{e}");

    // The environment: the registry, a wildcard with a denied wildcard below it, and a name that
    // resolves to loopback. Setup may also reach other.test.
    let egress = json!({"allow": ["registry.test", "*.corp.test", "loop.test"], "deny": ["*.bad.corp.test"]});
    let setup = "python3 -c \"import urllib.request; print('setup', urllib.request.urlopen('http://other.test:8080/setup', timeout=8).read().decode())\" > setup-reached.txt";
    let env = json!({"egress": egress, "setup_egress_policy": {"allow": ["registry.test", "other.test"]}, "setup": [setup]});
    let (s, v) = api.call(Method::PUT, "/api/v1/environments/web", Some(env)).await;
    assert_eq!((s, &v["egress"]["deny"][0]), (201, &json!("*.bad.corp.test")), "{v}");

    let extra = [
        ("wildcard", "https://api.corp.test:8443/ok"),
        ("denied", "http://x.bad.corp.test:8080/"),
        ("deployment", "http://a.deploy.test:8080/"),
        ("post", "http://registry.test:8080/upload"),
    ];
    let (conv, events, out) = run(&llm, &api, json!({"message": "probe", "environment": "web"}), &probes(&registry, &extra)).await;
    // Setup reached what the agent may not.
    assert!(out.contains("setup registry-http GET /setup"), "{out}");
    assert_eq!(line(&out, "http"), "http OK registry-http GET /simple");
    assert_eq!(line(&out, "https"), "https OK registry-tls GET /simple");
    assert_eq!(line(&out, "wildcard"), "wildcard OK registry-tls GET /ok");
    let refused = |name: &str, words: &str| {
        let l = line(&out, name);
        assert!(l.starts_with(&format!("{name} HTTP 403")) && l.contains(words), "{l}");
    };
    refused("other", "may not reach other.test:8080: not in the allow list (environment web)");
    refused("denied", "denied by `*.bad.corp.test` (environment web)");
    refused("raw", "a raw address");
    refused("loop", "resolves to 127.0.0.1");
    refused("deployment", "denied by `*.deploy.test` (deployment)");
    // Not read-only here: a POST goes through.
    assert_eq!(line(&out, "post"), "post OK registry-http POST /upload");
    // Around the proxy, there is no way out at all.
    assert!(line(&out, "direct").starts_with("direct ERR"), "{out}");

    let refusals = blocked(&events);
    for (host, rule) in [
        ("other.test", "not in the allow list (environment web)"),
        ("x.bad.corp.test", "denied by `*.bad.corp.test` (environment web)"),
        (registry.ip.as_str(), "a raw address (outbound policies name hosts)"),
    ] {
        assert!(refusals.iter().any(|(h, r)| h == host && r == rule), "{host}: {refusals:?}");
    }
    assert!(refusals.iter().any(|(h, r)| h == "loop.test" && r.contains("127.0.0.1")), "{refusals:?}");
    // The model read them (the step after the probes is asked with them in its context).
    let last = llm.requests().last().cloned().unwrap().to_string();
    assert!(last.contains("The sandbox may not reach other.test:8080: not in the allow list (environment web)."), "{last}");

    // What it reached, with what it carried, and what it was refused: the owner's summary.
    // A plain GET and a POST with their answers (`registry-http GET /simple`, with headers); TLS
    // counted as it passes, the handshake and the certificate included; setup's other.test.
    let summary = summary_when(&api, &conv, |s| {
        destination(s, "registry.test", 8080).is_some_and(|(n, sent, got)| n == 2 && sent > 120 && got > 120)
            && destination(s, "registry.test", 8443).is_some_and(|(n, _, got)| n == 1 && got > 500)
            && destination(s, "api.corp.test", 8443).is_some_and(|(n, _, got)| n == 1 && got > 500)
            && destination(s, "other.test", 8080).is_some_and(|(n, _, got)| n == 1 && got > 60)
    })
    .await;
    let total: u64 = summary["reached"].as_array().unwrap().iter().map(|d| d["bytes_received"].as_u64().unwrap()).sum();
    assert_eq!(summary["bytes_received"].as_u64(), Some(total), "{summary}");
    let refused = summary["refused"].as_array().unwrap();
    assert!(refused.iter().any(|r| r["host"] == "other.test" && r["count"] == 1), "{summary}");
    // Only the owner reads it.
    let (s, _) = h.api("bob-secret-key").get(&format!("/api/v1/conversations/{conv}/network")).await;
    assert_eq!(s, 404);

    // The operator's spec: its own list, read-only (plain HTTP may only GET or HEAD; a TLS
    // tunnel is not decrypted, so it goes through), with no environment at all; a container of
    // it runs under gVisor, whose sandbox is held the same (no way around the proxy either).
    let body = json!({"message": "probe", "sandbox_spec": "locked"});
    let command = format!("dmesg 2>&1 | head -1; {}", probes(&registry, &[("post", "http://registry.test:8080/upload")]));
    let (_, events, out) = run(&llm, &api, body, &command).await;
    assert_eq!(out.contains("Starting gVisor"), kind == "docker", "{out}");
    assert_eq!(line(&out, "http"), "http OK registry-http GET /simple");
    assert_eq!(line(&out, "https"), "https OK registry-tls GET /simple");
    let l = line(&out, "post");
    assert!(l.starts_with("post HTTP 403") && l.contains("read-only: POST is not allowed (spec locked)"), "{l}");
    let l = line(&out, "other");
    assert!(l.contains("not in the allow list (spec locked)"), "{l}");
    assert!(line(&out, "direct").starts_with("direct ERR"), "{out}");
    assert!(
        blocked(&events).iter().any(|(h, r)| h == "registry.test" && r == "read-only: POST is not allowed (spec locked)"),
        "{events:?}"
    );

    // An organization's list holds over its member's wider one, and its deny wins.
    assert_eq!(api.post("/api/v1/orgs", json!({"name": "acme"})).await.0, 201);
    let (s, e) = api.call(Method::PUT, "/api/v1/orgs/acme/settings", Some(json!({"egress": {"allow": ["*"]}}))).await;
    assert!(s == 400 && e["error"]["message"].as_str().unwrap().contains("`egress.allow`"), "{e}");
    let policy = json!({"egress": {"allow": ["registry.test", "api.corp.test"], "deny": ["loop.test"]}});
    let (s, settings) = api.call(Method::PUT, "/api/v1/orgs/acme/settings", Some(policy)).await;
    assert_eq!((s, &settings["egress"]["allow"][0]), (200, &json!("registry.test")), "{settings}");
    let (s, v) = api.call(Method::PUT, "/api/v1/environments/wide", Some(json!({"egress": {"allow": ["*.test"]}}))).await;
    assert_eq!(s, 201, "{v}");
    let body = json!({"message": "probe", "org": "acme", "environment": "wide"});
    let (org_conv, events, out) = run(&llm, &api, body, &probes(&registry, &[("wildcard", "https://api.corp.test:8443/ok")])).await;
    assert_eq!(line(&out, "http"), "http OK registry-http GET /simple");
    assert_eq!(line(&out, "wildcard"), "wildcard OK registry-tls GET /ok");
    let l = line(&out, "other");
    assert!(l.contains("not in the allow list (organization acme)"), "{l}");
    let l = line(&out, "loop");
    assert!(l.contains("denied by `loop.test` (organization acme)"), "{l}");
    assert!(blocked(&events).iter().any(|(h, r)| h == "other.test" && r == "not in the allow list (organization acme)"), "{events:?}");

    // The organization's audit trail holds what its conversation reached.
    summary_when(&api, &org_conv, |s| destination(s, "registry.test", 8080).is_some()).await;
    let (s, audit) = api.get("/api/v1/orgs/acme/audit?limit=100").await;
    assert_eq!(s, 200, "{audit}");
    let used: Vec<&Value> = audit["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["action"] == "conversation.network_used" && r["target"] == org_conv.as_str())
        .collect();
    assert!(!used.is_empty(), "{audit}");
    assert!(used.iter().all(|r| r["actor"] == "alice"), "{used:?}");
    let hosts: Vec<&Value> = used.iter().flat_map(|r| r["detail"]["destinations"].as_array().unwrap()).map(|d| &d["host"]).collect();
    assert!(hosts.contains(&&json!("registry.test")), "{used:?}");
}
