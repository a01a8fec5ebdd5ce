//! `halyard org ls|create|members|add|role|rm`: the organizations you are in and their members,
//! through the gateway's public API (every change is audited there).

use anyhow::Result;
use clap::Subcommand;
use serde_json::{Value, json};

use crate::cli::Conn;
use crate::client::Client;

/// The organization commands.
#[derive(Subcommand, Debug)]
pub enum OrgCommand {
    /// The organizations you are in, with your role in each.
    Ls {
        #[command(flatten)]
        conn: Conn,
    },
    /// Create an organization; you are its owner.
    Create {
        name: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// An organization's members and their roles.
    Members {
        org: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// Add a user (as `member` unless `--role admin` or `owner`, which only owners give).
    Add {
        org: String,
        user: String,
        #[arg(long, default_value = "member", value_parser = ["member", "admin", "owner"])]
        role: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// Change a member's role (owners only).
    Role {
        org: String,
        user: String,
        #[arg(value_parser = ["member", "admin", "owner"])]
        role: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// Remove a member (yourself: leave).
    Rm {
        org: String,
        user: String,
        #[command(flatten)]
        conn: Conn,
    },
}

fn print_members(v: &Value) {
    for m in v["items"].as_array().into_iter().flatten() {
        println!("{}  {}", m["user"].as_str().unwrap_or_default(), m["role"].as_str().unwrap_or_default());
    }
}

/// Runs `command`; the process's exit code.
pub async fn run(command: OrgCommand) -> Result<i32> {
    let path = |org: &str| format!("/orgs/{}", urlencode(org));
    match command {
        OrgCommand::Ls { conn } => {
            let c = Client::new(conn.url, conn.api_key)?;
            for o in c.get("/orgs").await?["items"].as_array().into_iter().flatten() {
                let (name, role) = (o["name"].as_str().unwrap_or_default(), o["role"].as_str().unwrap_or_default());
                println!("{name}  {role}  {} members", o["members"]);
            }
        }
        OrgCommand::Create { name, conn } => {
            let c = Client::new(conn.url, conn.api_key)?;
            let o = c.post("/orgs", json!({"name": name})).await?;
            println!("created {} (you are its owner)", o["name"].as_str().unwrap_or_default());
        }
        OrgCommand::Members { org, conn } => {
            let c = Client::new(conn.url, conn.api_key)?;
            print_members(&c.get(&format!("{}/members", path(&org))).await?);
        }
        OrgCommand::Add { org, user, role, conn } => {
            let c = Client::new(conn.url, conn.api_key)?;
            print_members(&c.post(&format!("{}/members", path(&org)), json!({"user": user, "role": role})).await?);
        }
        OrgCommand::Role { org, user, role, conn } => {
            let c = Client::new(conn.url, conn.api_key)?;
            let url = format!("{}/members/{}", path(&org), urlencode(&user));
            print_members(&c.call(reqwest::Method::PATCH, &url, Some(json!({"role": role}))).await?);
        }
        OrgCommand::Rm { org, user, conn } => {
            let c = Client::new(conn.url, conn.api_key)?;
            c.call(reqwest::Method::DELETE, &format!("{}/members/{}", path(&org), urlencode(&user)), None).await?;
            println!("removed {user} from {org}");
        }
    }
    Ok(0)
}

/// A path segment, escaped.
fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") })
        .collect()
}
