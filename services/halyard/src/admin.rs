//! `halyard admin`: users, API keys and the start queue, through a running gateway's admin API
//! (so it works against any deployment it can reach, and every action is audited like any
//! other).

use anyhow::{Context, Result, bail};

use crate::client::Client;
use clap::Subcommand;
use serde_json::{Value, json};

/// What `halyard admin` can do.
#[derive(Subcommand, Debug)]
pub enum AdminCommand {
    /// Create, list, show, disable and enable users.
    Users {
        #[command(subcommand)]
        command: UsersCommand,
    },
    /// Issue, list and revoke API keys.
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// The start queue: who waits for a sandbox, in the order they will be placed, and each
    /// sandbox host's room.
    Queue,
}

#[derive(Subcommand, Debug)]
pub enum UsersCommand {
    /// Create a user (letters, digits, `-`, `_`).
    Create {
        name: String,
        /// May use the admin API.
        #[arg(long)]
        admin: bool,
    },
    /// Every user.
    Ls,
    /// One user.
    Show { name: String },
    /// Refuse every key of a user from now on.
    Disable { name: String },
    /// Accept a disabled user's keys again.
    Enable { name: String },
}

#[derive(Subcommand, Debug)]
pub enum KeysCommand {
    /// Issue a key for a user; it is printed once and cannot be shown again.
    Create {
        user: String,
        /// A label ("laptop", "ci").
        #[arg(long)]
        name: Option<String>,
        /// The key may only read.
        #[arg(long)]
        read_only: bool,
        /// Lifetime, like `3600s`, `12h`, `30d` (default: no expiry).
        #[arg(long)]
        expires_in: Option<String>,
    },
    /// A user's keys (never their secrets).
    Ls { user: String },
    /// Revoke a key by id, on every gateway at once.
    Revoke { id: String },
}

/// Runs `command` against the gateway at `url` with `key`.
pub async fn run(url: &str, key: Option<&str>, command: AdminCommand) -> Result<()> {
    let key = key.context("no API key: set HALYARD_API_KEY (or --api-key) to an administrator's key")?;
    let client = Client::with(url.to_owned(), key.to_owned());
    match command {
        AdminCommand::Users { command } => match command {
            UsersCommand::Create { name, admin } => {
                let user = client.call(reqwest::Method::POST, "/admin/users", Some(json!({"name": name, "admin": admin}))).await?;
                println!("created {}", user_line(&user));
            }
            UsersCommand::Ls => {
                let users = client.call(reqwest::Method::GET, "/admin/users", None).await?;
                for user in users["items"].as_array().into_iter().flatten() {
                    println!("{}", user_line(user));
                }
            }
            UsersCommand::Show { name } => {
                let user = client.call(reqwest::Method::GET, &format!("/admin/users/{name}"), None).await?;
                println!("{}", user_line(&user));
            }
            UsersCommand::Disable { name } => {
                let user = client.call(reqwest::Method::PATCH, &format!("/admin/users/{name}"), Some(json!({"disabled": true}))).await?;
                println!("disabled {}", user_line(&user));
            }
            UsersCommand::Enable { name } => {
                let user = client.call(reqwest::Method::PATCH, &format!("/admin/users/{name}"), Some(json!({"disabled": false}))).await?;
                println!("enabled {}", user_line(&user));
            }
        },
        AdminCommand::Keys { command } => match command {
            KeysCommand::Create { user, name, read_only, expires_in } => {
                let mut body = json!({"scope": if read_only { "read_only" } else { "full" }});
                if let Some(n) = name {
                    body["name"] = n.into();
                }
                if let Some(e) = expires_in {
                    body["expires_in_secs"] = parse_duration(&e)?.into();
                }
                let issued = client.call(reqwest::Method::POST, &format!("/admin/users/{user}/keys"), Some(body)).await?;
                eprintln!("issued {} (shown once; keep it somewhere safe):", key_line(&issued));
                println!("{}", issued["key"].as_str().unwrap_or_default());
            }
            KeysCommand::Ls { user } => {
                let keys = client.call(reqwest::Method::GET, &format!("/admin/users/{user}/keys"), None).await?;
                for key in keys["items"].as_array().into_iter().flatten() {
                    println!("{}", key_line(key));
                }
            }
            KeysCommand::Revoke { id } => {
                let key = client.call(reqwest::Method::DELETE, &format!("/admin/keys/{id}"), None).await?;
                println!("revoked {}", key_line(&key));
            }
        },
        AdminCommand::Queue => print!("{}", queue_text(&client.call(reqwest::Method::GET, "/admin/queue", None).await?)),
    }
    Ok(())
}

/// `GET /admin/queue` in lines: the hosts, then one line per waiting start (its place first).
fn queue_text(q: &Value) -> String {
    let or_dash = |v: &Value| v.as_str().unwrap_or("-").to_owned();
    let mut out = String::from("hosts:\n");
    for h in q["hosts"].as_array().into_iter().flatten() {
        let slots = match h["slots"].as_u64() {
            Some(0) | None => "no limit".to_owned(),
            Some(n) => n.to_string(),
        };
        let alive = if h["alive"] == true { "alive" } else { "silent" };
        out.push_str(&format!("  {}  busy {} of {slots}  {alive}\n", or_dash(&h["node"]), h["busy"]));
    }
    let waiting = q["waiting"].as_array().map(Vec::as_slice).unwrap_or_default();
    let pace = q["per_place_ms"].as_i64().map(|ms| format!(" (one placed every {:.1} s lately)", ms as f64 / 1000.0)).unwrap_or_default();
    out.push_str(&format!("waiting: {}{pace}\n", waiting.len()));
    for w in waiting {
        let taken = w["taken_by"].as_str().map(|n| format!("  being made on {n}")).unwrap_or_default();
        // (A wake waits for the host holding its workspace.)
        let what = w["wake_on"].as_str().map_or_else(|| or_dash(&w["class"]), |host| format!("wake-on-{host}"));
        out.push_str(&format!(
            "  {:>3}  {}  {}  org={}  waited {}s  deadline {}  conversation {}{taken}\n",
            w["position"].as_u64().unwrap_or_default(),
            or_dash(&w["owner"]),
            what,
            or_dash(&w["org"]),
            w["waited_secs"],
            or_dash(&w["deadline_at"]),
            or_dash(&w["conversation_id"]),
        ));
    }
    out
}

fn user_line(u: &Value) -> String {
    let mut flags = Vec::new();
    for (flag, on) in [("admin", u["admin"] == true), ("disabled", u["disabled"] == true), ("bootstrap", u["managed"] == false)] {
        if on {
            flags.push(flag);
        }
    }
    format!("{}  keys={}  {}", u["name"].as_str().unwrap_or_default(), u["keys"], flags.join(","))
}

fn key_line(k: &Value) -> String {
    let or_dash = |v: &Value| v.as_str().unwrap_or("-").to_owned();
    format!(
        "{}  user={}  scope={}  name={}  expires={}  revoked={}",
        or_dash(&k["id"]),
        or_dash(&k["user"]),
        or_dash(&k["scope"]),
        or_dash(&k["name"]),
        or_dash(&k["expires_at"]),
        or_dash(&k["revoked_at"])
    )
}

/// `3600s`, `90m`, `12h`, `30d` (a bare number is seconds).
fn parse_duration(s: &str) -> Result<u64> {
    let s = s.trim();
    let (digits, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = digits.parse().with_context(|| format!("`{s}` is not a duration like 3600s, 90m, 12h or 30d"))?;
    let factor = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => bail!("`{s}` is not a duration like 3600s, 90m, 12h or 30d"),
    };
    Ok(n * factor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_reads_in_lines_place_first() {
        let q = json!({
            "hosts": [{"node": "a", "slots": 2, "busy": 2, "alive": true}, {"node": "b", "slots": 0, "busy": 1, "alive": false}],
            "waiting": [
                {"position": 1, "owner": "ann", "class": "interactive", "org": null, "waited_secs": 3, "deadline_at": "t1", "conversation_id": "c1", "taken_by": "a"},
                {"position": 2, "owner": "bob", "class": "automation", "org": "acme", "waited_secs": 1, "deadline_at": "t2", "conversation_id": "c2", "taken_by": null},
                {"position": 3, "owner": "cy", "class": "interactive", "org": null, "waited_secs": 0, "deadline_at": "t3", "conversation_id": "c3", "taken_by": null, "wake_on": "b"}
            ],
            "per_place_ms": 1500
        });
        let text = queue_text(&q);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[1], "  a  busy 2 of 2  alive");
        assert_eq!(lines[2], "  b  busy 1 of no limit  silent");
        assert_eq!(lines[3], "waiting: 3 (one placed every 1.5 s lately)");
        assert_eq!(lines[4], "    1  ann  interactive  org=-  waited 3s  deadline t1  conversation c1  being made on a");
        assert_eq!(lines[5], "    2  bob  automation  org=acme  waited 1s  deadline t2  conversation c2");
        assert_eq!(lines[6], "    3  cy  wake-on-b  org=-  waited 0s  deadline t3  conversation c3");
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("3600").unwrap(), 3600);
        assert_eq!(parse_duration("90m").unwrap(), 5400);
        assert_eq!(parse_duration("30d").unwrap(), 2_592_000);
        assert!(parse_duration("soon").is_err() && parse_duration("5y").is_err());
    }
}
