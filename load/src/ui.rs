//! The web workspace's benchmark (issue 11): its JavaScript, gzipped, and the time from page
//! load to the first event shown (and to the whole log held) for a conversation with 10,000
//! events, in headless Chromium, against a real `halyard up` serving `web/dist`. The baseline,
//! from the same run, is the same page for a conversation of 10 events; the gateway's CPU per
//! page load is reported for both. Targets: JavaScript under 300 KB gzipped; first event under
//! 1 s. Needs the built app and Chromium (`./tests/run.sh` installs both).

use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, ensure};
use halyard_platform::bus::EventAppender;
use halyard_protocol::event::{EventBody, EventSource};
use halyard_protocol::{ConversationId, EventId};
use halyard_tests::{Halyard, HalyardOptions, ScriptedLlm};
use serde_json::{Value, json};

use crate::{KEY, cpu_now, percentile};

/// Fills a conversation up to `total` events: commands and their outputs, with a message now
/// and then, as a long agent run looks.
async fn fill(js: &async_nats::jetstream::Context, id: ConversationId, total: u64, have: u64) -> Result<()> {
    let mut appender = EventAppender::open(js.clone(), id).await?;
    for i in have..total {
        let call = format!("call_{}", i / 2);
        let body = if i % 50 == 0 {
            EventBody::AgentMessage { text: format!("Step {i}: **checking** the output of the last command.") }
        } else if i % 2 == 0 {
            EventBody::Action {
                tool_call_id: call,
                tool: "terminal".into(),
                arguments: json!({"command": format!("ls -la src/module_{i} && wc -l src/module_{i}/*.rs")}),
                thought: None,
                security_risk: None,
            }
        } else {
            EventBody::Observation {
                tool_call_id: call,
                tool: "terminal".into(),
                content: format!("total 24\n-rw-r--r-- 1 u u 4096 lib.rs\n  {i} src/module_{i}/lib.rs\n"),
                exit_code: Some(0),
                is_error: false,
                url: None,
                screenshot_id: None,
                image_ids: Vec::new(),
            }
        };
        let source = if matches!(body, EventBody::Observation { .. }) { EventSource::Environment } else { EventSource::Agent };
        if appender.append(EventId::new(), source, body.clone(), None).await.is_err() {
            // The conversation's own opening events may land meanwhile (another writer, and a
            // conflict here): go on after them, once.
            appender = EventAppender::open(js.clone(), id).await?;
            appender.append(EventId::new(), source, body, None).await?;
        }
    }
    Ok(())
}

pub async fn run() -> Result<Value> {
    let web = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../web").canonicalize()?;
    ensure!(web.join("dist/index.html").exists(), "web/dist is not built: bash infra/build-web.sh --require");
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(
        HalyardOptions::new(&llm.base_url)
            .set("HALYARD_LOG", "warn")
            .set("HALYARD_RATE_LIMIT_PER_MINUTE", "0")
            .set("HALYARD_WEB_DIR", &web.join("dist").display().to_string()),
    );
    let api = h.api(KEY);
    let js = async_nats::jetstream::new(h.nats_client("admin").await);

    // Page loads per conversation in one repetition.
    let runs = crate::scaled(5, 1);
    let mut convs = Vec::new();
    for total in [10u64, crate::scaled(10_000, 200)] {
        let (id, _) = api.start_ready(json!({})).await;
        let conv: ConversationId = id.parse()?;
        let have = api.get(&format!("/api/v1/conversations/{id}")).await.1["last_event_seq"].as_u64().unwrap_or(0);
        // A new conversation's own opening events may already pass the small size, and some
        // may still come while it is filled: the page is measured on whatever the log holds.
        let t0 = Instant::now();
        fill(&js, conv, total.max(have), have).await?;
        // Served once the gateway has projected it all.
        let view = api.wait_conversation(&id, "projected", |c| c["last_event_seq"].as_u64() >= Some(total.max(have))).await;
        let count = view["last_event_seq"].as_u64().unwrap_or(total);
        eprintln!("conversation of {count} events ready in {:?}", t0.elapsed());
        convs.push((id, total, count));
    }

    let mut out = json!({"runs_per_conversation": runs});
    let mut sizes = Value::Null;
    for (id, total, count) in &convs {
        let cpu0 = cpu_now();
        let node = Command::new("node")
            .arg(web.join("../load/ui-first-event.mjs"))
            .args([web.display().to_string(), h.http.clone(), KEY.to_owned(), runs.to_string(), format!("{id}={count}")])
            .output()
            .context("run node")?;
        let cpu1 = cpu_now();
        ensure!(node.status.success(), "the browser run failed: {}", String::from_utf8_lossy(&node.stderr));
        let r: Value = serde_json::from_slice(&node.stdout)?;
        sizes = json!({"js_gzip_kb_initial": r["js_gzip_bytes_initial"].as_f64().unwrap_or(0.0) / 1024.0,
                       "js_gzip_kb_all": r["js_gzip_bytes_all"].as_f64().unwrap_or(0.0) / 1024.0});
        let loads = r["runs"][count.to_string()].as_array().cloned().unwrap_or_default();
        let mut first: Vec<f64> = loads.iter().filter_map(|x| x["first_event_ms"].as_f64()).collect();
        let mut whole: Vec<f64> = loads.iter().filter_map(|x| x["all_events_ms"].as_f64()).collect();
        first.sort_by(f64::total_cmp);
        whole.sort_by(f64::total_cmp);
        out[format!("events_{total}")] = json!({
            "first_event_ms_p50": percentile(&first, 50.0),
            "first_event_ms_max": first.last().copied().unwrap_or(0.0),
            "all_events_held_ms_p50": percentile(&whole, 50.0),
            "halyard_cpu_ms_per_page_load": ((cpu1[1] - cpu0[1]) * 1000.0 / runs as f64 * 10.0).round() / 10.0,
            // Milliseconds from navigation start: the document, each request, the first paint.
            "timeline_of_first_run": loads.first().map(|r| r["timeline"].clone()).unwrap_or_default(),
        });
    }
    out["bundle"] = sizes;
    let ratio = |k: &str| {
        let a = out["events_10000"][k].as_f64().unwrap_or(0.0);
        let b = out["events_10"][k].as_f64().unwrap_or(1.0).max(1.0);
        (a / b * 100.0).round() / 100.0
    };
    out["ratio_10000_to_10"] = json!({"first_event": ratio("first_event_ms_p50"), "halyard_cpu": ratio("halyard_cpu_ms_per_page_load")});
    out["targets"] = json!({"js_gzip_kb_all_under": 300, "first_event_ms_at_10000_under": 1000});
    Ok(out)
}
