//! `halyard batch`: many tasks run as one batch (`run` a JSON Lines file of starts, a few at a
//! time, with a progress bar and the results table at the end), its table (`show`, as text or
//! CSV), its failed items run again (`rerun`), and two batches compared item by item.

use std::io::Write;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Subcommand;
use serde_json::{Value, json};

use crate::cli::Conn;
use crate::client::Client;

#[derive(Subcommand, Debug)]
pub enum BatchCommand {
    /// Run the tasks of a JSON Lines file (each line a start: `{"message": ...}`, with
    /// `title`, `repository`, `environment`, `sandbox_spec`, `llm_profile` if wanted), a few at
    /// a time; a progress bar on standard error, the results table on standard output. Exit 0
    /// when every item passed, 1 otherwise.
    Run {
        file: std::path::PathBuf,
        #[arg(long)]
        name: Option<String>,
        /// The LLM profile every item uses unless its line names one.
        #[arg(long)]
        profile: Option<String>,
        #[arg(long, default_value_t = 4)]
        concurrency: u32,
        /// Run each task this many times side by side; its row is the best attempt's.
        #[arg(long, default_value_t = 1)]
        attempts: u32,
        /// A check every item's work must pass (a shell command in its workspace; repeatable).
        #[arg(long = "verify")]
        verify: Vec<String>,
        #[arg(long)]
        max_verify_attempts: Option<u32>,
        #[command(flatten)]
        conn: Conn,
    },
    /// A batch's results table (--csv: as CSV).
    Show {
        id: String,
        #[arg(long)]
        csv: bool,
        #[command(flatten)]
        conn: Conn,
    },
    /// Run a batch's failed items again, and follow it.
    Rerun {
        id: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// Compare two batches item by item (what the second passes that the first failed...).
    Compare {
        first: String,
        second: String,
        #[command(flatten)]
        conn: Conn,
    },
}

/// Runs `halyard batch ...`; the process's exit code.
pub async fn run(command: BatchCommand) -> Result<i32> {
    match command {
        BatchCommand::Run { file, name, profile, concurrency, attempts, verify, max_verify_attempts, conn } => {
            let c = Client::new(conn.url, conn.api_key)?;
            let text = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
            let mut items = Vec::new();
            for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
                let item: Value = serde_json::from_str(line).with_context(|| format!("{}:{}: not JSON", file.display(), n + 1))?;
                items.push(item);
            }
            let mut body = json!({"items": items, "concurrency": concurrency, "attempts": attempts, "name": name, "llm_profile": profile});
            if !verify.is_empty() {
                body["verify"] = verify.iter().map(|v| json!({"command": v})).collect();
            }
            if let Some(n) = max_verify_attempts {
                body["max_verify_attempts"] = n.into();
            }
            let batch = c.post("/batches", body).await?;
            let id = batch["id"].as_str().context("the gateway answered without a batch id")?.to_owned();
            eprintln!("batch {id}");
            follow(&c, &id).await
        }
        BatchCommand::Show { id, csv, conn } => {
            let c = Client::new(conn.url, conn.api_key)?;
            if csv {
                let mut out = std::io::stdout();
                c.download(&format!("/batches/{id}?format=csv"), &mut out).await?;
                return Ok(0);
            }
            let batch = c.get(&format!("/batches/{id}")).await?;
            print!("{}", table(&batch));
            Ok(0)
        }
        BatchCommand::Rerun { id, conn } => {
            let c = Client::new(conn.url, conn.api_key)?;
            let batch = c.post(&format!("/batches/{id}/rerun"), json!({})).await?;
            eprintln!("{} items run again", batch["counts"]["waiting"]);
            follow(&c, &id).await
        }
        BatchCommand::Compare { first, second, conn } => {
            let c = Client::new(conn.url, conn.api_key)?;
            let cmp = c.get(&format!("/batches/{first}/compare/{second}")).await?;
            println!("{}", cmp["summary"].as_str().unwrap_or_default());
            println!("fixed: {}\nbroken: {}", cmp["fixed"], cmp["broken"]);
            println!("both passed: {}, both failed: {}, undecided: {}", cmp["both_passed"], cmp["both_failed"], cmp["undecided"]);
            Ok(0)
        }
    }
}

/// Shows the batch's progress until it is done (or paused or cancelled), then its table: 0 if
/// every item passed.
async fn follow(c: &Client, id: &str) -> Result<i32> {
    loop {
        let batch = c.get(&format!("/batches/{id}")).await?;
        let counts = &batch["counts"];
        let n = |k: &str| counts[k].as_u64().unwrap_or(0);
        let total = batch["items"].as_array().map_or(0, Vec::len) as u64;
        let done = n("passed") + n("failed");
        eprint!(
            "\r{} {done}/{total} done: {} passed, {} failed, {} running ",
            bar(done, total, 30),
            n("passed"),
            n("failed"),
            n("running")
        );
        let _ = std::io::stderr().flush();
        match batch["status"].as_str() {
            Some("running") => tokio::time::sleep(Duration::from_secs(1)).await,
            Some(status) => {
                eprintln!("\nbatch {status}");
                print!("{}", table(&batch));
                return Ok(if n("failed") == 0 && done == total { 0 } else { 1 });
            }
            None => bail!("the gateway answered without a status"),
        }
    }
}

/// A progress bar `width` wide.
fn bar(done: u64, total: u64, width: usize) -> String {
    let filled = if total == 0 { width } else { (done as usize * width) / total as usize };
    format!("[{}{}]", "#".repeat(filled), "-".repeat(width - filled.min(width)))
}

/// The results table as text.
fn table(batch: &Value) -> String {
    let mut out = format!(
        "{:>4}  {:<8} {:<8} {:>6} {:>8} {:>10} {:>8}  conversation\n",
        "item", "status", "verdict", "score", "tokens", "cost", "secs"
    );
    for r in batch["items"].as_array().into_iter().flatten() {
        let num = |k: &str| r[k].as_f64().map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"));
        out.push_str(&format!(
            "{:>4}  {:<8} {:<8} {:>6} {:>8} {:>10} {:>8}  {}\n",
            r["index"],
            r["status"].as_str().unwrap_or_default(),
            r["verdict"].as_str().unwrap_or("-"),
            num("score"),
            r["tokens"],
            format!("${:.4}", r["cost_usd"].as_f64().unwrap_or(0.0)),
            num("duration_secs"),
            r["conversation_id"].as_str().unwrap_or("-"),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_bar_fills_with_the_items_done() {
        assert_eq!(super::bar(0, 4, 8), "[--------]");
        assert_eq!(super::bar(2, 4, 8), "[####----]");
        assert_eq!(super::bar(4, 4, 8), "[########]");
    }
}
