//! `halyard automations ls|add|rm|runs`: a user's automations through the gateway's public API.
//! An automation is named by its id or by a prefix only it has, as conversations are.

use anyhow::{Context, Result, bail};
use clap::Subcommand;
use serde_json::{Value, json};

use crate::cli::Conn;
use crate::client::Client;

/// The automation commands.
#[derive(Subcommand, Debug)]
// Parsed once per process: the size of the one value made does not matter.
#[allow(clippy::large_enum_variant)]
pub enum AutomationCommand {
    /// Your automations: kind, state, last run and next tick.
    Ls {
        #[command(flatten)]
        conn: Conn,
    },
    /// Create an automation; prints its id, and its hook URL and secret (shown once) if it has
    /// a hook.
    Add {
        /// Its name.
        name: String,
        /// Started by requests signed as Standard Webhooks, posted to its hook URL.
        #[arg(long, group = "trigger")]
        webhook: bool,
        /// Started at each tick of this five-field cron expression (`"0 3 * * 1-5"`).
        #[arg(long, group = "trigger")]
        schedule: Option<String>,
        /// Started by a label or a mention on GitHub; answered with this git provider of yours.
        #[arg(long, group = "trigger", value_name = "PROVIDER")]
        github: Option<String>,
        /// Started by a label or a mention on GitLab; answered with this git provider of yours.
        #[arg(long, group = "trigger", value_name = "PROVIDER")]
        gitlab: Option<String>,
        /// Started by a label or a mention on Forgejo or Gitea; answered with this git provider.
        #[arg(long, group = "trigger", value_name = "PROVIDER")]
        forgejo: Option<String>,
        /// Started by a mention in a Bitbucket pull request; answered with this git provider.
        #[arg(long, group = "trigger", value_name = "PROVIDER")]
        bitbucket: Option<String>,
        /// Started by a mention in an Azure DevOps pull request or work item; answered with this
        /// git provider.
        #[arg(long, group = "trigger", value_name = "PROVIDER")]
        azure_devops: Option<String>,
        /// The label that starts work on a forge (`halyard` if absent).
        #[arg(long)]
        label: Option<String>,
        /// The mention that starts work on a forge (`@halyard` if absent).
        #[arg(long)]
        mention: Option<String>,
        /// The schedule's IANA time zone (UTC if absent).
        #[arg(long, requires = "schedule")]
        timezone: Option<String>,
        /// The first message of each run (a template: `{{title}}`, `{{body}}`, `{{payload}}`...).
        #[arg(long)]
        prompt: Option<String>,
        /// The repository its conversations clone: `PROVIDER:owner/name`, PROVIDER one of your
        /// git providers.
        #[arg(long)]
        repo: Option<String>,
        /// The branch of `--repo` (its default if absent).
        #[arg(long, requires = "repo")]
        branch: Option<String>,
        /// One of your LLM profiles (your default if absent).
        #[arg(long)]
        llm_profile: Option<String>,
        /// Create it disabled.
        #[arg(long)]
        disabled: bool,
        #[command(flatten)]
        conn: Conn,
    },
    /// Delete an automation.
    Rm {
        /// Its id, or a prefix only it has.
        automation: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// An automation's runs, newest first: what each started, or why nothing.
    Runs {
        /// Its id, or a prefix only it has.
        automation: String,
        #[command(flatten)]
        conn: Conn,
    },
}

/// Runs an automation command; the process's exit code.
pub async fn run(command: AutomationCommand) -> Result<i32> {
    match command {
        AutomationCommand::Ls { conn } => {
            let c = Client::new(conn.url, conn.api_key)?;
            for a in items(&c.get("/automations").await?) {
                println!("{}", line(&a));
            }
            Ok(0)
        }
        AutomationCommand::Add {
            name,
            webhook,
            schedule,
            github,
            gitlab,
            forgejo,
            bitbucket,
            azure_devops,
            label,
            mention,
            timezone,
            prompt,
            repo,
            branch,
            llm_profile,
            disabled,
            conn,
        } => {
            let c = Client::new(conn.url, conn.api_key)?;
            let forge =
                [("github", github), ("gitlab", gitlab), ("forgejo", forgejo), ("bitbucket", bitbucket), ("azure_devops", azure_devops)]
                    .into_iter()
                    .find_map(|(kind, provider)| provider.map(|p| (kind, p)));
            let trigger = match (schedule, forge) {
                (Some(cron), _) => json!({"kind": "schedule", "cron": cron, "timezone": timezone}),
                (None, Some((kind @ ("bitbucket" | "azure_devops"), provider))) => {
                    json!({"kind": kind, "provider": provider, "mention": mention})
                }
                (None, Some((kind, provider))) => json!({"kind": kind, "provider": provider, "label": label, "mention": mention}),
                (None, None) if webhook => json!({"kind": "webhook"}),
                (None, None) => {
                    bail!("say what starts it: --webhook, --schedule CRON, --github/--gitlab/--forgejo/--bitbucket/--azure-devops PROVIDER")
                }
            };
            let mut body = json!({"name": name, "trigger": trigger, "prompt": prompt, "llm_profile": llm_profile, "enabled": !disabled});
            if let Some(r) = repo {
                let (provider, full_name) =
                    r.split_once(':').context("--repo is PROVIDER:owner/name, PROVIDER one of your git providers")?;
                body["repository"] = json!({"provider": provider, "full_name": full_name, "branch": branch});
            }
            let a = c.post("/automations", body).await?;
            println!("{}", line(&a));
            if let Some(url) = a["hook_url"].as_str() {
                println!("hook URL: {url}");
            }
            if let Some(secret) = a["secret"].as_str() {
                println!("secret (shown once): {secret}");
            }
            Ok(0)
        }
        AutomationCommand::Rm { automation, conn } => {
            let c = Client::new(conn.url, conn.api_key)?;
            let id = resolve(&c, &automation).await?;
            c.call(reqwest::Method::DELETE, &format!("/automations/{id}"), None).await?;
            println!("deleted {id}");
            Ok(0)
        }
        AutomationCommand::Runs { automation, conn } => {
            let c = Client::new(conn.url, conn.api_key)?;
            let id = resolve(&c, &automation).await?;
            for r in items(&c.get(&format!("/automations/{id}/runs")).await?) {
                println!("{}", run_line(&r));
            }
            Ok(0)
        }
    }
}

fn items(list: &Value) -> Vec<Value> {
    list["items"].as_array().cloned().unwrap_or_default()
}

/// `id  name  kind  enabled|disabled  last: outcome time  next: time`.
fn line(a: &Value) -> String {
    let s = |v: &Value| v.as_str().unwrap_or("-").to_owned();
    let kind = match a["trigger"]["kind"].as_str() {
        Some("schedule") => format!("schedule {} {}", s(&a["trigger"]["cron"]), s(&a["trigger"]["timezone"])),
        Some(k) => k.to_owned(),
        None => "-".into(),
    };
    let state = if a["enabled"] == true { "enabled" } else { "disabled" };
    let last = match a["last_run"].as_object() {
        Some(r) => format!("last: {} {}", s(&r["outcome"]), s(&r["time"])),
        None => "never run".into(),
    };
    let mut out = format!("{}  {}  {kind}  {state}  {last}", s(&a["id"]), s(&a["name"]));
    if let Some(next) = a["next_run_at"].as_str() {
        out.push_str(&format!("  next: {next}"));
    }
    out
}

/// `time  outcome  trigger  conversation|reason`.
fn run_line(r: &Value) -> String {
    let s = |v: &Value| v.as_str().unwrap_or("-").to_owned();
    let what = r["conversation_id"].as_str().map(|c| format!("conversation {c}")).unwrap_or_else(|| s(&r["reason"]));
    format!("{}  {}  {}  {what}", s(&r["time"]), s(&r["outcome"]), s(&r["trigger"]))
}

/// The automation `given` names: a whole id, else the one whose id starts so.
async fn resolve(c: &Client, given: &str) -> Result<String> {
    if uuid::Uuid::parse_str(given).is_ok() {
        return Ok(given.to_owned());
    }
    let list = c.get("/automations").await?;
    let matching: Vec<String> =
        items(&list).iter().filter_map(|a| a["id"].as_str()).filter(|id| id.starts_with(given)).map(str::to_owned).collect();
    match matching.as_slice() {
        [one] => Ok(one.clone()),
        [] => bail!("no automation of yours has an id starting with {given:?} (see `halyard automations ls`)"),
        _ => bail!("{} of your automations have ids starting with {given:?}; give more of the id", matching.len()),
    }
}
