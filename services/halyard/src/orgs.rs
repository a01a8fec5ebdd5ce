//! `halyard org ls|create|members|add|invitations|accept|decline|role|rm|budget|prices|price`:
//! the organizations you are in, their members and invitations, this month's spending against their budgets and their prices, through the
//! gateway's public API (every change is audited there).

use anyhow::Result;
use clap::Subcommand;
use serde_json::{Value, json};

use halyard_platform::net::percent_encode;

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
    /// Invite a user (as `member` unless `--role admin` or `owner`, which only owners give); they
    /// join when they accept.
    Add {
        org: String,
        user: String,
        #[arg(long, default_value = "member", value_parser = ["member", "admin", "owner"])]
        role: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// The invitations waiting for your answer.
    Invitations {
        #[command(flatten)]
        conn: Conn,
    },
    /// Join an organization that invited you.
    Accept {
        org: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// Decline an organization's invitation.
    Decline {
        org: String,
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
    /// This month's spending against the organization's budgets (and, for owners and admins,
    /// each member's).
    Budget {
        org: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// The prices its conversations' calls are charged at (USD per million tokens).
    Prices {
        org: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// Set a model's price in the organization (owners and admins).
    Price {
        org: String,
        model: String,
        #[arg(long)]
        input: f64,
        #[arg(long)]
        output: f64,
        #[arg(long)]
        cached: Option<f64>,
        #[command(flatten)]
        conn: Conn,
    },
}

fn budget_line(what: &str, b: &Value) {
    let budget = b["budget_usd"].as_f64().map_or("no budget".to_owned(), |v| format!("of ${v:.2}"));
    let percent = b["percent"].as_f64().map_or(String::new(), |p| format!(" ({p:.0} %)"));
    let spent = if b["exhausted"] == true { ", spent" } else { "" };
    println!("{what}: ${:.2} {budget}{percent}{spent}", b["spent_usd"].as_f64().unwrap_or(0.0));
}

fn print_members(v: &Value) {
    for m in v["items"].as_array().into_iter().flatten() {
        println!("{}  {}", m["user"].as_str().unwrap_or_default(), m["role"].as_str().unwrap_or_default());
    }
    for m in v["invited"].as_array().into_iter().flatten() {
        println!("{}  {} (invited)", m["user"].as_str().unwrap_or_default(), m["role"].as_str().unwrap_or_default());
    }
}

/// Runs `command`; the process's exit code.
pub async fn run(command: OrgCommand) -> Result<i32> {
    let path = |org: &str| format!("/orgs/{}", percent_encode(org));
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
            println!("invited {user} to {org}: they join when they accept (halyard org accept {org})");
        }
        OrgCommand::Invitations { conn } => {
            let c = Client::new(conn.url, conn.api_key)?;
            for i in c.get("/me/invitations").await?["items"].as_array().into_iter().flatten() {
                let s = |k: &str| i[k].as_str().unwrap_or_default().to_owned();
                println!("{}  as {}  from {}  {}", s("org"), s("role"), s("invited_by"), s("invited_at"));
            }
        }
        OrgCommand::Accept { org, conn } => {
            let c = Client::new(conn.url, conn.api_key)?;
            let o = c.post(&format!("/me/invitations/{}/accept", percent_encode(&org)), json!({})).await?;
            println!("joined {org} as {}", o["role"].as_str().unwrap_or_default());
        }
        OrgCommand::Decline { org, conn } => {
            let c = Client::new(conn.url, conn.api_key)?;
            c.post(&format!("/me/invitations/{}/decline", percent_encode(&org)), json!({})).await?;
            println!("declined {org}'s invitation");
        }
        OrgCommand::Role { org, user, role, conn } => {
            let c = Client::new(conn.url, conn.api_key)?;
            let url = format!("{}/members/{}", path(&org), percent_encode(&user));
            print_members(&c.call(reqwest::Method::PATCH, &url, Some(json!({"role": role}))).await?);
        }
        OrgCommand::Rm { org, user, conn } => {
            let c = Client::new(conn.url, conn.api_key)?;
            c.call(reqwest::Method::DELETE, &format!("{}/members/{}", path(&org), percent_encode(&user)), None).await?;
            println!("removed {user} from {org}");
        }
        OrgCommand::Budget { org, conn } => {
            let c = Client::new(conn.url, conn.api_key)?;
            let b = c.get(&format!("{}/budget", path(&org))).await?;
            println!("{} {}", b["org"].as_str().unwrap_or_default(), b["month"].as_str().unwrap_or_default());
            budget_line("organization", &b["org_budget"]);
            budget_line("you", &b["you"]);
            for m in b["members"].as_array().into_iter().flatten() {
                budget_line(m["user"].as_str().unwrap_or_default(), m);
            }
        }
        OrgCommand::Prices { org, conn } => {
            let c = Client::new(conn.url, conn.api_key)?;
            for p in c.get(&format!("{}/prices", path(&org))).await?["items"].as_array().into_iter().flatten() {
                let cached = p["cached_per_million"].as_f64().map_or("-".to_owned(), |v| v.to_string());
                println!(
                    "{}  in {}  out {}  cached {cached}  ({})",
                    p["model"].as_str().unwrap_or_default(),
                    p["input_per_million"].as_f64().unwrap_or_default(),
                    p["output_per_million"].as_f64().unwrap_or_default(),
                    p["source"].as_str().unwrap_or_default()
                );
            }
        }
        OrgCommand::Price { org, model, input, output, cached, conn } => {
            let c = Client::new(conn.url, conn.api_key)?;
            let body = json!({"input_per_million": input, "output_per_million": output, "cached_per_million": cached});
            c.call(reqwest::Method::PUT, &format!("{}/prices/{}", path(&org), percent_encode(&model)), Some(body)).await?;
            println!("{model} in {org}: ${input} in, ${output} out per million tokens");
        }
    }
    Ok(0)
}
