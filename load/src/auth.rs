//! What asking who you are costs on the event path (issue 9). Every NATS connection now
//! authenticates and every publish is checked against its role's permissions. Measured in one
//! run, the way events are appended (50 sequential writers, each publish naming its log's last
//! sequence with `Nats-Expected-Last-Subject-Sequence`, on `halyard.events.<conversation>.<kind>`):
//!
//! - on an open nats-server (no users): the baseline;
//! - on a nats-server with one user per role (the accounts configuration `nats/` documents,
//!   made by `nats/accounts-from-roles.py`) as `admin` (permissions `>`);
//! - on the same server as the `agent` role, with its real allow list and private inbox.
//!
//! Nothing else reads or writes either server, so the difference is what authentication and
//! permission checks cost. Rates and CPU time per message of nats-server and of this client;
//! `load/results/auth.json`.

use std::time::Instant;

use anyhow::Result;
use halyard_tests::NatsServer;
use serde_json::{Value, json};

use crate::{cpu_now, cpu_per_item};

/// Appends `writers` x `per` events through `client`, each writer to its own log, checked.
async fn checked_appends(client: async_nats::Client, stream: &str, writers: usize, per: usize, payload: &[u8]) -> Result<(f64, Value)> {
    let js = async_nats::jetstream::new(client);
    let cpu0 = cpu_now();
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..writers {
        let js = js.clone();
        let payload = payload.to_vec();
        let conversation = halyard_protocol::ConversationId::new();
        let log = format!("halyard.events.{conversation}.*");
        tasks.push(tokio::spawn(async move {
            let mut last = 0u64;
            for _ in 0..per {
                let msg = async_nats::jetstream::message::PublishMessage::build()
                    .payload(payload.clone().into())
                    .expected_last_subject_sequence(last)
                    .header("Nats-Expected-Last-Subject-Sequence-Subject", log.as_str());
                let ack = js.send_publish(format!("halyard.events.{conversation}.observation"), msg).await?.await?;
                last = ack.sequence;
            }
            Ok::<_, async_nats::Error>(())
        }));
    }
    for t in tasks {
        t.await?.map_err(|e| anyhow::anyhow!("{stream}: {e}"))?;
    }
    let rate = (writers * per) as f64 / t0.elapsed().as_secs_f64();
    Ok((rate, cpu_per_item(cpu0, cpu_now(), writers * per)))
}

pub async fn run(writers: usize, per: usize) -> Result<Value> {
    let payload = crate::bytes_of_event();
    let events_stream = async_nats::jetstream::stream::Config {
        name: "HALYARD_EVENTS".into(),
        subjects: vec!["halyard.events.>".into()],
        allow_direct: true,
        ..Default::default()
    };
    // Warm-up, then the measured run.
    async fn measure(client: async_nats::Client, name: &str, writers: usize, per: usize, payload: &[u8]) -> Result<(f64, Value)> {
        checked_appends(client.clone(), name, writers, (per / 10).max(1), payload).await?;
        let (rate, cpu) = checked_appends(client, name, writers, per, payload).await?;
        eprintln!("{name}: {rate:.0} appends/s, {cpu}");
        Ok((rate, cpu))
    }

    let open = NatsServer::start();
    let client = async_nats::connect(&open.url).await?;
    async_nats::jetstream::new(client.clone()).create_stream(events_stream.clone()).await?;
    let (open_rate, open_cpu) = measure(client, "open server", writers, per, &payload).await?;
    drop(open);

    let accounts = std::process::Command::new("python3").arg("nats/accounts-from-roles.py").output()?;
    anyhow::ensure!(accounts.status.success(), "nats/accounts-from-roles.py failed (run from the repository root)");
    // Every role the accounts file names, read from the same place it was made from.
    let declared: serde_json::Map<String, Value> = serde_json::from_str(&std::fs::read_to_string("nats/roles.json")?)?;
    let roles: Vec<&str> = declared.keys().map(String::as_str).collect();
    let password = |role: &str| format!("bench-{role}-password");
    let env: Vec<(String, String)> = roles.iter().map(|r| (format!("HALYARD_{}_PASSWORD", r.to_uppercase()), password(r))).collect();
    let secured = NatsServer::start_with_accounts(&String::from_utf8_lossy(&accounts.stdout), &env);
    let connect = |role: &'static str| {
        async_nats::ConnectOptions::with_user_and_password(role.into(), password(role))
            .custom_inbox_prefix(format!("_INBOX_{role}"))
            .connect(secured.url.clone())
    };
    let admin = connect("admin").await?;
    async_nats::jetstream::new(admin.clone()).create_stream(events_stream).await?;
    let (admin_rate, admin_cpu) = measure(admin, "as admin", writers, per, &payload).await?;
    let (agent_rate, agent_cpu) = measure(connect("agent").await?, "as the agent role", writers, per, &payload).await?;

    let total = |v: &Value| v["total_us"].as_f64().unwrap_or(0.0);
    Ok(json!({
        "benchmark": "NATS authentication and permissions on the event path (issue 9)",
        "machine": {"cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0)},
        "appends": writers * per,
        "writers": writers,
        "open_server": {"appends_per_sec": open_rate.round(), "cpu_per_append": open_cpu},
        "authenticated_as_admin": {"appends_per_sec": admin_rate.round(), "cpu_per_append": admin_cpu},
        "authenticated_as_agent_role": {"appends_per_sec": agent_rate.round(), "cpu_per_append": agent_cpu},
        "agent_role_vs_open": {
            "rate_ratio": ((agent_rate / open_rate) * 1000.0).round() / 1000.0,
            "cpu_ratio": ((total(&agent_cpu) / total(&open_cpu).max(0.1)) * 1000.0).round() / 1000.0,
        },
    }))
}
