//! `halyard usage`: what LLM calls, conversations and sandboxes used, yours (`/me/usage`), an
//! organization's (`--org`, owners and admins) or everyone's (`--all`, operators), as a table
//! or as the API's CSV.

use anyhow::Result;
use clap::Args;

use crate::cli::Conn;
use crate::client::Client;

#[derive(Args, Debug)]
pub struct UsageArgs {
    /// An organization's usage instead of yours.
    #[arg(long, conflicts_with = "all")]
    org: Option<String>,
    /// Everyone's (operators only).
    #[arg(long)]
    all: bool,
    /// Rows by `day`, `model` or `user` (`user` for --org and --all).
    #[arg(long, default_value = "day", value_parser = ["day", "model", "user"])]
    group_by: String,
    /// From this day or time on (RFC 3339 or YYYY-MM-DD; default: the start of this month).
    #[arg(long)]
    from: Option<String>,
    /// Up to this day or time (default: now).
    #[arg(long)]
    to: Option<String>,
    /// The API's CSV, as it comes.
    #[arg(long)]
    csv: bool,
    #[command(flatten)]
    conn: Conn,
}

/// Runs `halyard usage`; the process's exit code.
pub async fn run(args: UsageArgs) -> Result<i32> {
    let c = Client::new(args.conn.url, args.conn.api_key)?;
    let base = match (&args.org, args.all) {
        (Some(org), _) => format!("/orgs/{}/usage", halyard_platform::net::percent_encode(org)),
        (None, true) => "/admin/usage".to_owned(),
        (None, false) => "/me/usage".to_owned(),
    };
    let mut query = vec![format!("group_by={}", args.group_by)];
    query.extend(args.from.iter().map(|f| format!("from={}", halyard_platform::net::percent_encode(f))));
    query.extend(args.to.iter().map(|t| format!("to={}", halyard_platform::net::percent_encode(t))));
    if args.csv {
        query.push("format=csv".into());
        c.download(&format!("{base}?{}", query.join("&")), &mut std::io::stdout()).await?;
        return Ok(0);
    }
    let report = c.get(&format!("{base}?{}", query.join("&"))).await?;
    println!("{} to {}", report["from"].as_str().unwrap_or_default(), report["to"].as_str().unwrap_or_default());
    println!(
        "{:<24} {:>12} {:>12} {:>10} {:>6} {:>6} {:>9}",
        args.group_by, "tokens in", "tokens out", "cost USD", "convs", "calls", "sandbox s"
    );
    let line = |name: &str, r: &serde_json::Value| {
        println!(
            "{:<24} {:>12} {:>12} {:>10.4} {:>6} {:>6} {:>9}",
            name,
            r["tokens_in"],
            r["tokens_out"],
            r["cost_usd"].as_f64().unwrap_or(0.0),
            r["conversations"],
            r["llm_calls"],
            r["sandbox_seconds"]
        )
    };
    for r in report["rows"].as_array().into_iter().flatten() {
        let name = r[args.group_by.as_str()].as_str().filter(|s| !s.is_empty()).unwrap_or("(none)");
        line(name, r);
    }
    line("total", &report["total"]);
    Ok(0)
}
