//! `halyard environments`: the environments you can start with (yours, the deployment's, an
//! organization's), defining one from a JSON file, and the snapshots made from them (listed
//! with their sizes against your quota, deleted so the next start sets up again).

use anyhow::{Context, Result};
use clap::Subcommand;

use crate::cli::Conn;
use crate::client::Client;

#[derive(Subcommand, Debug)]
pub enum EnvironmentCommand {
    /// Your environments and the deployment's, or an organization's (--org).
    List {
        #[arg(long)]
        org: Option<String>,
        #[command(flatten)]
        conn: Conn,
    },
    /// Create or replace one of yours (or an organization's, --org) from a JSON file with the
    /// API's fields (`setup`, `post_start`, `env`, `setup_secrets`, `cache_key`, `pool_size`...).
    Put {
        name: String,
        file: std::path::PathBuf,
        #[arg(long)]
        org: Option<String>,
        #[command(flatten)]
        conn: Conn,
    },
    /// Your snapshots (or an organization's, --org), newest first, with their sizes and pools.
    Snapshots {
        #[arg(long)]
        org: Option<String>,
        #[command(flatten)]
        conn: Conn,
    },
    /// Delete a snapshot of yours: the next start of its environment sets up again (a rebuild).
    Delete {
        id: String,
        #[command(flatten)]
        conn: Conn,
    },
}

fn org_path(org: &str) -> String {
    format!("/orgs/{}/environments", halyard_platform::net::percent_encode(org))
}

/// Runs `halyard environments ...`; the process's exit code.
pub async fn run(command: EnvironmentCommand) -> Result<i32> {
    match command {
        EnvironmentCommand::List { org, conn } => {
            let c = Client::new(conn.url, conn.api_key)?;
            let list = c.get(&org.as_deref().map_or_else(|| "/environments".to_owned(), org_path)).await?;
            println!("{:<32} {:<10} {:>5} {:>7} {:>4}  setup", "name", "scope", "pool", "default", "keys");
            for e in list["items"].as_array().into_iter().flatten() {
                println!(
                    "{:<32} {:<10} {:>5} {:>7} {:>4}  {}",
                    e["name"].as_str().unwrap_or_default(),
                    e["scope"].as_str().unwrap_or_default(),
                    e["pool_size"],
                    if e["default"].as_bool().unwrap_or(false) { "yes" } else { "" },
                    e["cache_key"].as_array().map_or(0, Vec::len),
                    e["setup"].as_array().map(|s| s.iter().filter_map(|c| c.as_str()).collect::<Vec<_>>().join(" && ")).unwrap_or_default(),
                );
            }
            Ok(0)
        }
        EnvironmentCommand::Put { name, file, org, conn } => {
            let c = Client::new(conn.url, conn.api_key)?;
            let text = std::fs::read_to_string(&file).with_context(|| format!("cannot read {}", file.display()))?;
            let body: serde_json::Value = serde_json::from_str(&text).with_context(|| format!("{} is not JSON", file.display()))?;
            let base = org.as_deref().map_or_else(|| "/environments".to_owned(), org_path);
            let path = format!("{base}/{}", halyard_platform::net::percent_encode(&name));
            let saved = c.call(reqwest::Method::PUT, &path, Some(body)).await?;
            println!("{}", saved["name"].as_str().unwrap_or(&name));
            Ok(0)
        }
        EnvironmentCommand::Snapshots { org, conn } => {
            let c = Client::new(conn.url, conn.api_key)?;
            let path = org.as_deref().map_or_else(|| "/environments/snapshots".to_owned(), |o| format!("{}/snapshots", org_path(o)));
            let list = c.get(&path).await?;
            println!("{:<36} {:<8} {:>9} {:>7} {:>5}  environment / repository", "id", "status", "MiB", "setup s", "pool");
            for s in list["items"].as_array().into_iter().flatten() {
                println!(
                    "{:<36} {:<8} {:>9} {:>7.1} {:>2}/{:<2}  {} {}",
                    s["id"].as_str().unwrap_or_default(),
                    s["status"].as_str().unwrap_or_default(),
                    s["size_bytes"].as_u64().unwrap_or(0).div_ceil(1 << 20),
                    s["setup_secs"].as_f64().unwrap_or(0.0),
                    s["pool_ready"],
                    s["pool_size"],
                    s["environment"].as_str().unwrap_or_default(),
                    s["repository"].as_str().unwrap_or("-"),
                );
                if let Some(why) = s["detail"].as_str() {
                    println!("    {why}");
                }
            }
            let quota = list["quota_bytes"].as_u64().map_or_else(|| "no quota".to_owned(), |q| format!("of {} MiB", q >> 20));
            println!("{} MiB used {quota}", list["used_bytes"].as_u64().unwrap_or(0).div_ceil(1 << 20));
            Ok(0)
        }
        EnvironmentCommand::Delete { id, conn } => {
            let c = Client::new(conn.url, conn.api_key)?;
            c.call(reqwest::Method::DELETE, &format!("/environments/snapshots/{}", halyard_platform::net::percent_encode(&id)), None)
                .await?;
            println!("deleted {id}: the next start of its environment sets up again");
            Ok(0)
        }
    }
}
