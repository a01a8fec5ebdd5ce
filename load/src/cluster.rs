//! Takeover time of a run whose agent runner dies (issue 13): a three-node nats-server cluster,
//! every service its own `halyard serve` process, two agent runners. Each round starts a
//! conversation whose LLM call hangs, kills the runner holding its lease (SIGKILL, or SIGTERM
//! for a clean stop), and measures the time until the other runner has recorded the takeover
//! (`run_interrupted` in the log, as the gateway serves it); then the run finishes there, and the
//! killed runner is started again. p50 and max per signal, in milliseconds, with the lease time
//! the runners use (`HALYARD_LEASE_TTL_MS`); `load/results/cluster.json`. Target: under 5 s.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use halyard_tests::{Halyard, HalyardOptions, NatsCluster, Reply, ScriptedLlm};
use serde_json::{Value, json};

use crate::{KEY, percentile};

const LEASE_TTL_MS: &str = "2000";

pub async fn run(rounds: usize) -> Result<Value> {
    let llm = ScriptedLlm::start().await;
    let nats = NatsCluster::start(3).await;
    let service = |name: &str| {
        Halyard::start(
            HalyardOptions::new(&llm.base_url)
                .serve(&nats.url, &[name])
                .set("HALYARD_SECRET", "a-shared-deployment-secret")
                .set("HALYARD_LEASE_TTL_MS", LEASE_TTL_MS)
                .set("HALYARD_LOG", "warn"),
        )
    };
    let _sandbox = service("sandbox");
    let mut agents = [service("agent"), service("agent")];
    let _conversations = service("conversations");
    let gateway = service("gateway");
    let api = gateway.api(KEY);
    let client = async_nats::connect(nats.url.split(',').collect::<Vec<_>>()).await?;
    let leases = async_nats::jetstream::new(client).get_key_value("halyard_agent_leases").await?;

    let mut results = serde_json::Map::new();
    for signal in ["SIGKILL", "SIGTERM"] {
        let mut took = Vec::new();
        for round in 0..rounds {
            let asked = llm.requests().len();
            llm.push([Reply::Hang]);
            let (conv, _) = api.start_ready(json!({"message": format!("{signal} round {round}")})).await;
            let deadline = Instant::now() + Duration::from_secs(30);
            let holder = loop {
                anyhow::ensure!(Instant::now() < deadline, "no runner took the run");
                if llm.requests().len() > asked {
                    if let Some(value) = leases.get(&conv).await? {
                        let node = String::from_utf8_lossy(&value).split(' ').next().unwrap_or_default().to_owned();
                        if let Some(i) = agents.iter().position(|a| a.deployment() == node) {
                            break i;
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            };
            llm.push([Reply::finish("done")]);
            let t0 = Instant::now();
            if signal == "SIGKILL" {
                agents[holder].kill9();
            } else {
                std::process::Command::new("kill").args(["-TERM", &agents[holder].pid().to_string()]).status()?;
            }
            llm.release();
            loop {
                anyhow::ensure!(t0.elapsed() < Duration::from_secs(30), "the run was not taken over");
                let (_, page) = api.get(&format!("/api/v1/conversations/{conv}/events?limit=1000")).await;
                let items = page["items"].as_array().context("events")?;
                if items.iter().any(|e| e["code"] == "run_interrupted") {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            took.push(t0.elapsed().as_secs_f64() * 1000.0);
            api.wait_events(&conv, "the run to finish", |ev| ev.iter().any(|e| e["status"] == "finished")).await;
            agents[holder].stop();
            agents[holder].restart();
            eprintln!("{signal} round {round}: taken over after {:.0} ms", took.last().copied().unwrap_or_default());
        }
        took.sort_by(f64::total_cmp);
        results.insert(
            signal.to_lowercase(),
            json!({"rounds": rounds, "p50_ms": percentile(&took, 50.0).round(), "max_ms": took.last().copied().unwrap_or_default().round()}),
        );
    }
    Ok(json!({
        "what": "time from signalling the agent runner that holds a live run to the other runner's takeover record, as the gateway serves it",
        "cluster": "3 nats-server nodes (R3 streams), 2 agent runners, 1 of each other service, each its own process",
        "lease_ttl_ms": LEASE_TTL_MS.parse::<u64>()?,
        "takeover": results,
    }))
}
