//! The command-line client: `halyard login`, `run`, `chat`, `send`, `ls`, `show`, `events`,
//! `pause`, `resume`, `interrupt`, `confirm`, `reject`, `rm`, all through the gateway's public
//! API (so they work against any deployment the user can reach, with the user's own key,
//! exactly as any other client would). A conversation is named by its id or, as git names
//! commits, by a prefix of it that only one of the user's conversations has.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use crate::client::{self, Client};
use crate::render::{self, Style};

/// Where the gateway is and which key to use (else what `halyard login` saved).
#[derive(Args, Debug, Clone)]
pub struct Conn {
    /// The gateway (HALYARD_URL).
    #[arg(long, env = "HALYARD_URL")]
    pub url: Option<String>,
    /// Your API key (HALYARD_API_KEY).
    #[arg(long, env = "HALYARD_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
}

/// The client's commands.
#[derive(Subcommand, Debug)]
pub enum ClientCommand {
    /// Check a key against a gateway and save both for the other commands (0600).
    Login {
        #[command(flatten)]
        conn: Conn,
    },
    /// Start a conversation on a task and follow it until the agent is done (exit 0), fails
    /// (1) or waits for a confirmation (2). Ctrl-C pauses it.
    Run {
        /// What the agent should do.
        task: String,
        /// Start from this repository (URL or path).
        #[arg(long)]
        repo: Option<String>,
        /// The branch of `--repo` to check out (its default if absent).
        #[arg(long, requires = "repo")]
        branch: Option<String>,
        /// Sandbox spec (see GET /api/v1/sandbox-specs).
        #[arg(long)]
        spec: Option<String>,
        /// The environment its sandbox is set up with (`halyard environments list`); absent:
        /// the repository's dev container, else the defaults.
        #[arg(long)]
        environment: Option<String>,
        /// The conversation's title (else the agent gives it one).
        #[arg(long)]
        title: Option<String>,
        /// A JSON Schema file: the agent finishes with a result that matches it, printed as JSON
        /// on standard output (the transcript goes to standard error).
        #[arg(long)]
        result_schema: Option<std::path::PathBuf>,
        /// A check run when the agent finishes (a shell command in the workspace that must exit
        /// 0; repeatable): a failing one sends the agent back with its output.
        #[arg(long = "verify")]
        verify: Vec<String>,
        /// One JSON event a line instead of a transcript.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        conn: Conn,
    },
    /// Continue a conversation interactively (a line is a message; Ctrl-D ends).
    Chat {
        /// The conversation's id, or a prefix only it has.
        conversation: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// Send a message and follow the run it starts, with `run`'s exit codes.
    Send {
        /// The conversation's id, or a prefix only it has.
        conversation: String,
        /// What to tell the agent.
        message: String,
        /// Return once the message is accepted instead of following the run.
        #[arg(long)]
        detach: bool,
        /// One JSON event a line instead of a transcript.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        conn: Conn,
    },
    /// Your conversations, newest first.
    Ls {
        #[command(flatten)]
        conn: Conn,
    },
    /// One conversation: status, sandbox, totals, and the agent's plan.
    Show {
        /// The conversation's id, or a prefix only it has.
        conversation: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// A conversation's events (a transcript, or `--json` lines for pipes).
    Events {
        /// The conversation's id, or a prefix only it has.
        conversation: String,
        /// Only events after this sequence number.
        #[arg(long, default_value_t = 0)]
        after_seq: u64,
        /// Keep following new events.
        #[arg(long)]
        follow: bool,
        /// One JSON event a line instead of a transcript.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        conn: Conn,
    },
    /// Export a conversation: every event as JSON lines, or a Markdown transcript.
    Export {
        /// The conversation's id, or a prefix only it has.
        conversation: String,
        /// `jsonl` or `md`.
        #[arg(long, default_value = "jsonl", value_parser = ["jsonl", "md"])]
        format: String,
        /// Write to this file instead of standard output.
        #[arg(long, short)]
        output: Option<std::path::PathBuf>,
        #[command(flatten)]
        conn: Conn,
    },
    /// Pause a conversation (its run stops at the next step; its sandbox is frozen).
    Pause {
        /// The conversation's id, or a prefix only it has.
        conversation: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// Resume a paused conversation.
    Resume {
        /// The conversation's id, or a prefix only it has.
        conversation: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// Stop what the agent is doing now: the running command ends and the agent waits for you.
    Interrupt {
        /// The conversation's id, or a prefix only it has.
        conversation: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// Run the actions that wait for your confirmation.
    Confirm {
        /// The conversation's id, or a prefix only it has.
        conversation: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// Refuse the actions that wait for your confirmation; the agent is told why.
    Reject {
        /// The conversation's id, or a prefix only it has.
        conversation: String,
        /// Why, for the agent.
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        conn: Conn,
    },
    /// Serve an editor over the Agent Client Protocol on standard input and output (Zed,
    /// JetBrains, Neovim): each session is a conversation started with these settings.
    Acp {
        /// Start sessions from this repository (URL or path).
        #[arg(long)]
        repo: Option<String>,
        /// The branch of `--repo`.
        #[arg(long)]
        branch: Option<String>,
        /// The agent that works in them (`halyard`, `claude-code`, ...; GET /api/v1/agents).
        #[arg(long)]
        agent: Option<String>,
        /// One of your LLM profiles.
        #[arg(long)]
        llm_profile: Option<String>,
        /// When actions wait for the editor's permission: `never`, `always` or `risky`.
        #[arg(long)]
        confirmation_policy: Option<String>,
        #[command(flatten)]
        conn: Conn,
    },
    /// Delete a conversation and its sandbox.
    Rm {
        /// The conversation's id, or a prefix only it has.
        conversation: String,
        #[command(flatten)]
        conn: Conn,
    },
}

/// Statuses that end a run.
const RUN_ENDS: &[&str] = &["idle", "finished", "error", "stuck", "waiting_for_confirmation", "paused"];

/// Runs a client command; the process's exit code.
pub async fn run(command: ClientCommand) -> Result<i32> {
    match command {
        ClientCommand::Login { conn } => login(conn).await,
        ClientCommand::Acp { repo, branch, agent, llm_profile, confirmation_policy, conn } => {
            let c = Client::new(conn.url, conn.api_key)?;
            crate::acp::serve(c, crate::acp::Defaults { repo, branch, agent, llm_profile, confirmation_policy }).await
        }
        ClientCommand::Run { task, repo, branch, spec, environment, title, result_schema, verify, json, conn } => {
            let c = Client::new(conn.url, conn.api_key)?;
            let mut body = json!({"message": task});
            if let Some(url) = repo {
                body["repository"] = json!({"url": url, "branch": branch});
            }
            if let Some(s) = spec {
                body["sandbox_spec"] = s.into();
            }
            if let Some(e) = environment {
                body["environment"] = e.into();
            }
            if let Some(t) = title {
                body["title"] = t.into();
            }
            if let Some(path) = &result_schema {
                let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
                body["result_schema"] = serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
            }
            if !verify.is_empty() {
                body["verify"] = verify.iter().map(|c| json!({"command": c})).collect();
            }
            let started = c.post("/conversations", body).await?;
            let conv = started["conversation_id"].as_str().context("the gateway answered without a conversation id")?.to_owned();
            eprintln!("conversation {conv}");
            wait_ready(&c, started["id"].as_str().unwrap_or_default()).await?;
            let style = Style { stderr: result_schema.is_some(), ..Style::detect(json) };
            let (code, _) = follow_run(&c, &conv, 0, style).await?;
            if result_schema.is_some() {
                return print_result(&c, &conv, code).await;
            }
            Ok(code)
        }
        ClientCommand::Chat { conversation, conn } => {
            let c = Client::new(conn.url, conn.api_key)?;
            let conv = resolve(&c, &conversation).await?;
            chat(&c, &conv).await
        }
        ClientCommand::Send { conversation, message, detach, json, conn } => {
            let c = Client::new(conn.url, conn.api_key)?;
            let conv = resolve(&c, &conversation).await?;
            let after = last_seq(&c, &conv).await?;
            c.post(&format!("/conversations/{conv}/messages"), json!({"text": message})).await?;
            if detach {
                println!("sent to {conv}");
                return Ok(0);
            }
            Ok(follow_run(&c, &conv, after, Style::detect(json)).await?.0)
        }
        ClientCommand::Ls { conn } => {
            let c = Client::new(conn.url, conn.api_key)?;
            for conv in conversations(&c).await? {
                println!("{}", conversation_line(&conv));
            }
            Ok(0)
        }
        ClientCommand::Show { conversation, conn } => show(conn, &conversation).await,
        ClientCommand::Events { conversation, after_seq, follow, json, conn } => events(conn, &conversation, after_seq, follow, json).await,
        ClientCommand::Export { conversation, format, output, conn } => export(conn, &conversation, &format, output).await,
        ClientCommand::Pause { conversation, conn } => control(conn, &conversation, "pause", json!({}), "paused").await,
        ClientCommand::Resume { conversation, conn } => control(conn, &conversation, "resume", json!({}), "resumed").await,
        ClientCommand::Interrupt { conversation, conn } => control(conn, &conversation, "interrupt", json!({}), "interrupted").await,
        ClientCommand::Confirm { conversation, conn } => {
            control(conn, &conversation, "confirm", json!({}), "confirmed the actions of").await
        }
        ClientCommand::Reject { conversation, reason, conn } => {
            control(conn, &conversation, "reject", json!({"reason": reason}), "rejected the actions of").await
        }
        ClientCommand::Rm { conversation, conn } => {
            let c = Client::new(conn.url, conn.api_key)?;
            let conversation = resolve(&c, &conversation).await?;
            c.call(reqwest::Method::DELETE, &format!("/conversations/{conversation}"), None).await?;
            println!("deleted {conversation}");
            Ok(0)
        }
    }
}

/// `halyard login`: checks the key and saves it with the gateway's URL.
async fn login(conn: Conn) -> Result<i32> {
    let url = conn.url.unwrap_or_else(|| "http://127.0.0.1:3000".into());
    let key = match conn.api_key {
        Some(k) => k,
        None => {
            eprint!("API key: ");
            let mut line = String::new();
            tokio::io::BufReader::new(tokio::io::stdin()).read_line(&mut line).await?;
            line.trim().to_owned()
        }
    };
    let c = Client::with(url.clone(), key.clone());
    let me = c.get("/me").await?;
    let path = client::save_login(&c.url, &key)?;
    println!("logged in to {} as {} (saved in {})", c.url, me["user"].as_str().unwrap_or("?"), path.display());
    Ok(0)
}

/// `halyard show`: a conversation, its metrics, helpers, pull requests and plan.
async fn show(conn: Conn, conversation: &str) -> Result<i32> {
    let c = Client::new(conn.url, conn.api_key)?;
    let conversation = resolve(&c, conversation).await?;
    let v = c.get(&format!("/conversations/{conversation}")).await?;
    println!("{}", conversation_line(&v));
    let m = &v["metrics"];
    println!(
        "sandbox {} ({})  policy {}  llm calls {}  tokens {} in / {} out  cost ${}",
        v["sandbox_id"].as_str().unwrap_or("-"),
        v["sandbox_status"].as_str().unwrap_or("-"),
        v["confirmation_policy"].as_str().unwrap_or("never"),
        m["llm_calls"],
        m["prompt_tokens"],
        m["completion_tokens"],
        m["cost_usd"]
    );
    if let Some(detail) = v["error_detail"].as_str() {
        println!("error: {detail}");
    }
    if let Some(parent) = v["parent_conversation_id"].as_str() {
        println!("helper of {parent}");
    }
    for helper in v["sub_conversation_ids"].as_array().into_iter().flatten() {
        println!("helper {}", helper.as_str().unwrap_or_default());
    }
    for pr in v["pull_requests"].as_array().into_iter().flatten() {
        println!("pull request #{} {}", pr["number"], pr["url"].as_str().unwrap_or_default());
    }
    let tasks = c.get(&format!("/conversations/{conversation}/tasks")).await?;
    if tasks["items"].as_array().is_some_and(|t| !t.is_empty()) {
        println!("{}", render::plan(&Style::detect(false), &tasks["items"]));
    }
    Ok(0)
}

/// `halyard events`: JSON lines of a conversation's events, followed with `--follow`.
async fn events(conn: Conn, conversation: &str, after_seq: u64, follow: bool, json: bool) -> Result<i32> {
    let c = Client::new(conn.url, conn.api_key)?;
    let conversation = resolve(&c, conversation).await?;
    let style = Style::detect(json);
    let mut after = print_events(&c, &conversation, after_seq, &style).await?.0;
    if !follow {
        return Ok(0);
    }
    loop {
        tokio::time::sleep(POLL).await;
        after = print_events(&c, &conversation, after, &style).await?.0;
    }
}

/// `halyard export`: the whole conversation, streamed to a file or standard output.
async fn export(conn: Conn, conversation: &str, format: &str, output: Option<std::path::PathBuf>) -> Result<i32> {
    let c = Client::new(conn.url, conn.api_key)?;
    let conversation = resolve(&c, conversation).await?;
    let path = format!("/conversations/{conversation}/export?format={format}");
    match output {
        Some(file) => {
            let mut out = std::fs::File::create(&file).with_context(|| format!("cannot write {}", file.display()))?;
            let bytes = c.download(&path, &mut out).await?;
            eprintln!("wrote {bytes} bytes to {}", file.display());
        }
        None => {
            c.download(&path, &mut std::io::stdout()).await?;
        }
    }
    Ok(0)
}

/// How often new events are fetched while following.
const POLL: Duration = Duration::from_millis(150);

async fn control(conn: Conn, conv: &str, verb: &str, body: Value, done: &str) -> Result<i32> {
    let c = Client::new(conn.url, conn.api_key)?;
    let conv = resolve(&c, conv).await?;
    c.post(&format!("/conversations/{conv}/{verb}"), body).await?;
    println!("{done} {conv}");
    Ok(0)
}

/// The conversation `given` names: a whole id as it is, else the one of the user's
/// conversations whose id starts so (as git takes a commit's prefix).
async fn resolve(c: &Client, given: &str) -> Result<String> {
    if uuid::Uuid::parse_str(given).is_ok() {
        return Ok(given.to_owned());
    }
    let prefix = given.to_ascii_lowercase();
    if prefix.is_empty() || !prefix.chars().all(|ch| ch.is_ascii_hexdigit() || ch == '-') {
        bail!("`{given}` is no conversation id; `halyard ls` lists yours");
    }
    let found: Vec<String> = conversations(c)
        .await?
        .iter()
        .filter_map(|conv| conv["id"].as_str())
        .filter(|id| id.starts_with(&prefix))
        .map(str::to_owned)
        .collect();
    match found.as_slice() {
        [one] => Ok(one.clone()),
        [] => bail!("none of your conversations starts with `{given}`; `halyard ls` lists them"),
        many => bail!("`{given}` starts {} of your conversations ({}); give more of the id", many.len(), many.join(", ")),
    }
}

/// All of the user's conversations, newest first (every page).
async fn conversations(c: &Client) -> Result<Vec<Value>> {
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(cur) => format!("/conversations?limit=100&cursor={cur}"),
            None => "/conversations?limit=100".into(),
        };
        let page = c.get(&path).await?;
        all.extend(page["items"].as_array().into_iter().flatten().cloned());
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return Ok(all),
        }
    }
}

/// The newest event's seq of a conversation (0 if none).
async fn last_seq(c: &Client, conv: &str) -> Result<u64> {
    let v = c.get(&format!("/conversations/{conv}")).await?;
    Ok(v["last_event_seq"].as_u64().unwrap_or(0))
}

fn conversation_line(c: &Value) -> String {
    let status = match c["execution_status"].as_str() {
        Some(exec) if c["status"] == "READY" => exec.to_owned(),
        _ => c["status"].as_str().unwrap_or("?").to_lowercase(),
    };
    format!(
        "{}  {:<24}  {}  {}",
        c["id"].as_str().unwrap_or("?"),
        status,
        c["updated_at"].as_str().unwrap_or("-"),
        c["title"].as_str().unwrap_or("(untitled)")
    )
}

/// Shows the start task's phases until READY (a queued start with its place in line, as it
/// moves up); an ERROR is an error in the task's words.
async fn wait_ready(c: &Client, task: &str) -> Result<()> {
    use std::io::IsTerminal;
    let spinner = std::io::stderr().is_terminal();
    let frames = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
    let mut last = String::new();
    for tick in 0usize.. {
        let t = c.get(&format!("/start-tasks/{task}")).await?;
        let status = t["status"].as_str().unwrap_or("?").to_owned();
        let phase = phase(&t);
        if phase != last {
            if spinner && !last.is_empty() {
                eprint!("\r\x1b[2K");
            }
            if !spinner || status == "READY" || status == "ERROR" || status == "QUEUED" {
                eprintln!("  {phase}");
            }
            last = phase.clone();
        }
        match status.as_str() {
            "READY" => return Ok(()),
            "ERROR" => bail!("the conversation could not start: {}", t["detail"].as_str().unwrap_or("no detail")),
            "CANCELLED" => bail!("the start was cancelled while it waited for a sandbox"),
            _ => {}
        }
        if spinner {
            eprint!("\r\x1b[2K  {} {phase}", frames[tick % frames.len()]);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// A start task's phase in words: its status, and for a queued start its place in line and the
/// wait the recent pace suggests (`QUEUED: 3rd in line (about 40 s)`).
fn phase(t: &Value) -> String {
    let status = t["status"].as_str().unwrap_or("?");
    let Some(place) = t["position"].as_u64().filter(|_| status == "QUEUED") else { return status.to_owned() };
    let about = t["estimate_secs"].as_u64().map(|s| format!(" (about {s} s)")).unwrap_or_default();
    format!("QUEUED: {} in line{about}", halyard_protocol::queue::ordinal(u32::try_from(place).unwrap_or(u32::MAX)))
}

/// Prints the events after `after`; the last seq printed (or `after`) and the latest status
/// among them.
async fn print_events(c: &Client, conv: &str, mut after: u64, style: &Style) -> Result<(u64, Vec<String>)> {
    let mut statuses = Vec::new();
    loop {
        let page = c.get(&format!("/conversations/{conv}/events?after_seq={after}&limit=1000")).await?;
        let items = page["items"].as_array().cloned().unwrap_or_default();
        for ev in &items {
            if let Some(line) = render::event(style, ev) {
                style.out(&format!("{line}\n"));
            }
            if ev["kind"] == "execution_status" {
                statuses.push(ev["status"].as_str().unwrap_or_default().to_owned());
            }
            after = ev["seq"].as_u64().unwrap_or(after);
        }
        if page["has_more"] != true {
            return Ok((after, statuses));
        }
    }
}

/// Prints the conversation's result as JSON on standard output (the run ended with `code`);
/// the exit code: 1 if the agent finished without one.
async fn print_result(c: &Client, conv: &str, code: i32) -> Result<i32> {
    // The conversation's view takes in the `result` event a moment after the run's end may
    // have been seen.
    let tries = if code == 0 { 50 } else { 1 };
    for _ in 0..tries {
        let view = c.get(&format!("/conversations/{conv}")).await?;
        if let Some(result) = view.get("result").filter(|r| !r.is_null()) {
            println!("{result}");
            return Ok(code);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("the agent did not finish with a result");
    Ok(if code == 0 { 1 } else { code })
}

/// Follows a conversation from `after` until its run ends; Ctrl-C pauses it. The exit code
/// (0 when the agent finished or waits for the user, 1 on error or stuck, 2 when actions wait
/// for confirmation, 130 when paused) and the last seq shown.
async fn follow_run(c: &Client, conv: &str, after: u64, style: Style) -> Result<(i32, u64)> {
    let follow = async {
        // Over the event WebSocket, with the answer as it is written; by polling where no socket
        // opens.
        let mut running = false;
        let followed = crate::follow::run(c, conv, after, &style, |s| {
            running |= s == "running";
            running && RUN_ENDS.contains(&s)
        })
        .await?;
        let mut after = match followed {
            Some((status, last)) if status != "closed" => return Ok((status, last)),
            Some((_, last)) => last,
            None => after,
        };
        loop {
            let (last, statuses) = print_events(c, conv, after, &style).await?;
            after = last;
            for s in statuses {
                if s == "running" {
                    running = true;
                } else if running && RUN_ENDS.contains(&s.as_str()) {
                    return Ok::<_, anyhow::Error>((s, after));
                }
            }
            tokio::time::sleep(POLL).await;
        }
    };
    let (ended, last) = tokio::select! {
        s = follow => s?,
        _ = tokio::signal::ctrl_c() => {
            c.post(&format!("/conversations/{conv}/pause"), json!({})).await?;
            eprintln!("\npaused; resume with `halyard resume {conv}`, or continue with `halyard chat {conv}`");
            return Ok((130, after));
        }
    };
    let code = match ended.as_str() {
        "finished" => 0,
        "idle" => {
            eprintln!("the agent waits for you: `halyard chat {conv}`");
            0
        }
        "waiting_for_confirmation" => {
            eprintln!("actions wait for your confirmation: `halyard chat {conv}`");
            2
        }
        "paused" => 130,
        _ => 1,
    };
    Ok((code, last))
}

/// The interactive loop: the history, then a line is a message; while actions wait, a line
/// confirms (`y`) or rejects them (anything else is the reason).
async fn chat(c: &Client, conv: &str) -> Result<i32> {
    let style = Style::detect(false);
    let (mut after, _) = print_events(c, conv, 0, &style).await?;
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut stdout = tokio::io::stdout();
    loop {
        let waiting = c.get(&format!("/conversations/{conv}")).await?["execution_status"] == "waiting_for_confirmation";
        let prompt = if waiting { "run the waiting actions? [y, or a reason to refuse] › " } else { "you › " };
        stdout.write_all(prompt.as_bytes()).await?;
        stdout.flush().await?;
        let Some(line) = lines.next_line().await? else { return Ok(0) };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        match (waiting, line) {
            (true, "y" | "yes") => c.post(&format!("/conversations/{conv}/confirm"), json!({})).await?,
            (true, reason) => c.post(&format!("/conversations/{conv}/reject"), json!({"reason": reason})).await?,
            (false, text) => c.post(&format!("/conversations/{conv}/messages"), json!({"text": text})).await?,
        };
        let (code, last) = follow_run(c, conv, after, style).await?;
        after = last;
        if code == 130 {
            return Ok(code);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queued_start_says_its_place_in_line() {
        assert_eq!(phase(&json!({"status": "QUEUED", "position": 1, "estimate_secs": 4})), "QUEUED: 1st in line (about 4 s)");
        assert_eq!(phase(&json!({"status": "QUEUED", "position": 2})), "QUEUED: 2nd in line");
        assert_eq!(phase(&json!({"status": "QUEUED", "position": 13})), "QUEUED: 13th in line");
        assert_eq!(phase(&json!({"status": "QUEUED", "position": 23})), "QUEUED: 23rd in line");
        // Before the gateway's copy of the queue has it, and in every other phase: the status.
        assert_eq!(phase(&json!({"status": "QUEUED", "position": null})), "QUEUED");
        assert_eq!(phase(&json!({"status": "WAITING_FOR_SANDBOX", "position": 1})), "WAITING_FOR_SANDBOX");
    }
}
