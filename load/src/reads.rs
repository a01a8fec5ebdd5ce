//! Reads as the deployment grows (issue 58: "no read scans"). One organization's answers stay
//! the same size (its 100 audit records, its 20 shared conversations, its members' usage this
//! month) while the deployment around them grows to 1x, 10x and 100x a base of 1,000
//! conversations and 1,000 audit records: records of other organizations and of nobody's,
//! conversations of the organization's members that are not shared and of 100 other users, over
//! 30, 300 and 3,000 days of history. Each read's time should follow its answer, not the growth.
//!
//! The rows are published onto the bus as the services publish them (`ConversationCreated` and
//! audit records, through the admin role), so the projection folds them as it would the real
//! ones; no sandbox is made. At each size, each repetition times, as the client sees them:
//! - `org_audit_page`: `GET /orgs/acme/audit?limit=100` (its owner);
//! - `org_audit_export`: the same as JSON Lines, the whole body read;
//! - `org_conversations`: `GET /orgs/acme/conversations`;
//! - `my_usage`: a member's `GET /me/usage` (this month);
//! - `org_usage`: `GET /orgs/acme/usage?group_by=user` (this month);
//! - `admin_usage_today`: `GET /admin/usage?group_by=model` from today;
//!
//! the median of 20 of each, and the gateway's CPU per read (all six kinds together). The
//! baseline is another build (`--baseline-bin`, the commit before the change) with the same
//! rows in a deployment of its own, measured in turns with this one.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use async_nats::jetstream;
use futures::StreamExt;
use halyard_platform::bus;
use halyard_protocol::accounts::AuditRecord;
use halyard_protocol::org::Visibility;
use halyard_protocol::system::{StartRequest, SystemRecord};
use halyard_protocol::{ConversationId, Envelope, SandboxId, TaskId, UserId, subjects};
use halyard_tests::{Api, Halyard, HalyardOptions, ScriptedLlm};
use serde_json::{Value, json};

use crate::record::{Context, spread};

const DAY_MS: i64 = 86_400_000;
/// The organization's members besides its owner, who own most of its conversations.
const MEMBERS: [(&str, &str); 4] =
    [("bob", "bob-bench-key"), ("carol", "carol-bench-key"), ("dave", "dave-bench-key"), ("erin", "erin-bench-key")];
const READS: [&str; 6] = ["org_audit_page", "org_audit_export", "org_conversations", "my_usage", "org_usage", "admin_usage_today"];

/// One deployment under measurement, and how much it holds so far.
struct Deployment {
    h: Halyard,
    js: jetstream::Context,
    alice: Api,
    bob: Api,
    root: Api,
    conversations: usize,
    audit: usize,
    is_base: bool,
}

fn halyard(llm: &ScriptedLlm, bin: Option<&std::path::Path>) -> Halyard {
    let mut opts = HalyardOptions::new(&llm.base_url)
        .set("HALYARD_LOG", "warn")
        .set("HALYARD_RATE_LIMIT_PER_MINUTE", "0")
        .set("HALYARD_ADMINS", "root");
    opts.api_keys = format!(
        "alice:alice-bench-key,root:root-bench-key,{}",
        MEMBERS.iter().map(|(u, k)| format!("{u}:{k}")).collect::<Vec<_>>().join(",")
    );
    opts.bin = bin.map(std::path::Path::to_path_buf);
    Halyard::start(opts)
}

/// Publishes `records` (subject, record) with 256 acknowledgements in flight.
async fn publish(js: &jetstream::Context, records: Vec<(String, SystemRecord)>) -> Result<()> {
    let now = halyard_platform::now_ms();
    let mut acks = futures::stream::iter(records.into_iter().map(|(subject, r)| {
        let js = js.clone();
        async move { bus::publish(&js, subject, &Envelope::new(r, now)).await }
    }))
    .buffer_unordered(256);
    while let Some(ack) = acks.next().await {
        ack?;
    }
    Ok(())
}

fn created(owner: &str, created_ms: i64, org: Option<&str>, shared: bool) -> (String, SystemRecord) {
    let id = ConversationId::new();
    let request = StartRequest {
        org: org.map(str::to_owned),
        visibility: if shared { Visibility::Org } else { Visibility::Private },
        ..StartRequest::default()
    };
    let record = SystemRecord::ConversationCreated {
        conversation_id: id,
        owner: UserId(owner.to_owned()),
        task_id: TaskId::new(),
        sandbox_id: SandboxId::new(),
        title: Some("bench".into()),
        repository: None,
        created_ms,
        request: Some(Box::new(request)),
    };
    (subjects::conversation_record(id), record)
}

fn audit(actor: &str, org: Option<&str>, at_ms: i64) -> (String, SystemRecord) {
    let record = AuditRecord {
        actor: UserId(actor.to_owned()),
        action: "secret.put".into(),
        target: "BENCH_TOKEN".into(),
        detail: None,
        org: org.map(str::to_owned),
        client: None,
        at_ms,
    };
    (subjects::audit_record("secret"), SystemRecord::Audit(record))
}

impl Deployment {
    async fn start(llm: &ScriptedLlm, bin: Option<&std::path::Path>, is_base: bool) -> Result<Self> {
        let h = halyard(llm, bin);
        let js = jetstream::new(h.nats_client("admin").await);
        let (alice, bob, root) = (h.api("alice-bench-key"), h.api("bob-bench-key"), h.api("root-bench-key"));
        let (s, e) = alice.post("/api/v1/orgs", json!({"name": "acme"})).await;
        ensure!(s == 201, "the organization: {e}");
        for (_, key) in MEMBERS {
            alice.add_to_org("acme", &h.api(key), None).await;
        }
        // What the organization's reads answer, the same at every size: its 100 records and
        // 20 conversations shared with it (this month, so its usage has them too).
        let now = halyard_platform::now_ms();
        let mut own: Vec<_> = (0..100).map(|i| audit("alice", Some("acme"), now - 1_000 * i)).collect();
        own.extend((0..20).map(|i| created(MEMBERS[i % 4].0, now - 60_000 * i as i64, Some("acme"), true)));
        publish(&js, own).await?;
        Ok(Self { h, js, alice, bob, root, conversations: 0, audit: 0, is_base })
    }

    /// Grows the deployment to `conversations` and as many audit records, over `days` of history.
    async fn grow(&mut self, conversations: usize, days: i64) -> Result<()> {
        let now = halyard_platform::now_ms();
        let mut records = Vec::new();
        for i in self.conversations..conversations {
            let at = now - (i as i64 % days) * DAY_MS - 1_000;
            // Half the organization's members' (in it, but not shared), half 100 others'.
            records.push(if i % 2 == 0 {
                created(MEMBERS[(i / 2) % 4].0, at, Some("acme"), false)
            } else {
                created(&format!("user{:03}", (i / 2) % 100), at, None, false)
            });
        }
        for i in self.audit..conversations {
            let org = (i % 3 != 0).then(|| format!("org{}", i % 50));
            records.push(audit(&format!("user{:03}", i % 100), org.as_deref(), now - (i as i64 % days) * DAY_MS - 2_000));
        }
        // The marker: the last record; once the projection shows it, it has folded the rest.
        let (subject, marker) = created("bob", now - 10 * DAY_MS, None, false);
        let SystemRecord::ConversationCreated { conversation_id: marker_id, .. } = &marker else { unreachable!() };
        let marker_id = *marker_id;
        records.push((subject, marker));
        publish(&self.js, records).await?;
        let deadline = Instant::now() + Duration::from_secs(600);
        while self.bob.get(&format!("/api/v1/conversations/{marker_id}")).await.0 != 200 {
            ensure!(Instant::now() < deadline, "the projection never folded the grown rows");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.conversations = conversations;
        self.audit = conversations;
        Ok(())
    }

    /// One read of `what`: its time in ms and the size of its answer (items, lines or rows).
    async fn read(&self, what: &str, today: &str) -> Result<(f64, usize)> {
        let t = Instant::now();
        let count = |v: &Value, key: &str| v[key].as_array().map_or(0, Vec::len);
        let size = match what {
            "org_audit_export" => {
                let url = format!("{}/api/v1/orgs/acme/audit?format=jsonl", self.h.http);
                let body = reqwest::Client::new().get(url).bearer_auth("alice-bench-key").send().await?.text().await?;
                body.lines().count()
            }
            _ => {
                let (api, path, key) = match what {
                    "org_audit_page" => (&self.alice, "/api/v1/orgs/acme/audit?limit=100".to_owned(), "items"),
                    "org_conversations" => (&self.alice, "/api/v1/orgs/acme/conversations".to_owned(), "items"),
                    "my_usage" => (&self.bob, "/api/v1/me/usage".to_owned(), "rows"),
                    "org_usage" => (&self.alice, "/api/v1/orgs/acme/usage?group_by=user".to_owned(), "rows"),
                    _ => (&self.root, format!("/api/v1/admin/usage?group_by=model&from={today}"), "rows"),
                };
                let (s, v) = api.get(&path).await;
                ensure!(s == 200, "{what}: {s} {v}");
                count(&v, key)
            }
        };
        Ok((t.elapsed().as_secs_f64() * 1000.0, size))
    }

    /// A repetition at the current size: the median time of `samples` of each read, their
    /// answers' sizes, and the gateway's CPU per read.
    async fn measure(&self, samples: usize) -> Result<Value> {
        let today = &halyard_protocol::rfc3339(halyard_platform::now_ms())[..10];
        let [_, cpu0] = crate::cpu_of_tree(self.h.pid());
        let mut out = serde_json::Map::new();
        for what in READS {
            let mut times = Vec::new();
            let mut size = 0;
            for _ in 0..samples {
                let (ms, n) = self.read(what, today).await?;
                times.push(ms);
                size = n;
            }
            times.sort_by(f64::total_cmp);
            out.insert(what.into(), json!({"ms": (crate::percentile(&times, 50.0) * 1000.0).round() / 1000.0, "answer_size": size}));
        }
        let [_, cpu1] = crate::cpu_of_tree(self.h.pid());
        let cpu_us = (cpu1 - cpu0) * 1e6 / (samples * READS.len()) as f64;
        out.insert("halyard_cpu_us_per_read".into(), json!(cpu_us.round()));
        Ok(Value::Object(out))
    }
}

/// Each read's spread over `runs` (and the CPU's).
fn summary(runs: &[Value]) -> Value {
    let mut out = serde_json::Map::new();
    for what in READS {
        out.insert(what.into(), spread(runs.iter().filter_map(|r| r[what]["ms"].as_f64())));
    }
    out.insert("halyard_cpu_us_per_read".into(), spread(runs.iter().filter_map(|r| r["halyard_cpu_us_per_read"].as_f64())));
    Value::Object(out)
}

pub async fn run(reps: usize, baseline: Option<&std::path::Path>) -> Result<Value> {
    let context = Context::now();
    let scales: Vec<usize> = crate::scaled(vec![1, 10, 100], vec![1, 2]);
    let base_size = crate::scaled(1_000, 100);
    let samples = crate::scaled(20, 3);
    let llm = ScriptedLlm::start().await;
    let mut deployments = vec![Deployment::start(&llm, None, false).await?];
    if let Some(bin) = baseline {
        deployments.push(Deployment::start(&llm, Some(bin), true).await?);
    }
    let mut sizes = Vec::new();
    for scale in scales {
        for d in &mut deployments {
            d.grow(base_size * scale, 30 * scale as i64).await.with_context(|| format!("growing to {scale}x"))?;
        }
        let (mut runs, mut base_runs) = (Vec::new(), Vec::new());
        for rep in 0..reps {
            crate::record::settle(Duration::from_secs(20));
            // Which goes first alternates.
            let order: Vec<&Deployment> = if rep % 2 == 0 { deployments.iter().collect() } else { deployments.iter().rev().collect() };
            for d in order {
                let r = d.measure(samples).await?;
                eprintln!("reads at {scale}x{}: {r}", if d.is_base { " (baseline)" } else { "" });
                if d.is_base { base_runs.push(r) } else { runs.push(r) }
            }
        }
        let now = summary(&runs);
        let base = baseline.map(|_| summary(&base_runs));
        let over = base.as_ref().map(|b| {
            let ratio = |k: &str| now[k]["median"].as_f64().zip(b[k]["median"].as_f64()).map(|(a, b)| (a / b * 100.0).round() / 100.0);
            READS.iter().map(|k| ((*k).to_owned(), json!(ratio(k)))).collect::<serde_json::Map<_, _>>()
        });
        sizes.push(json!({
            "scale": scale,
            "conversations": base_size * scale + 20,
            "audit_records": base_size * scale + 100,
            "days_of_history": 30 * scale,
            "figures": now,
            "baseline": base.map(|b| json!({"figures": b, "runs": base_runs})),
            "this_build_over_baseline": over,
            "runs": runs,
        }));
    }
    Ok(json!({
        "suite": "reads",
        "context": context,
        "repetitions": reps,
        "reads_per_figure": samples,
        "baseline_binary": baseline.map(|p| p.display().to_string()),
        "sizes": sizes,
        "target": "each read's time flat from 1x to 100x (its answer does not grow)",
        "reproduce": "cargo run --release -p halyard-load -- --suite reads [--baseline-bin PATH] (writes load/results/reads.json)",
    }))
}
