//! GitLab's REST API (v4): projects are named by their escaped path, issues and merge requests
//! by their `iid`, and replies go into the discussion the mention was in.

use serde::Deserialize;
use serde_json::{Value, json};

use super::api::ForgeError;
use super::types::{Branch, Forge, NewPullRequest, Place, ReactTo, Repository};
use crate::net::percent_encode;

/// Developer access: who may push.
const DEVELOPER: u64 = 30;

fn project(repo: &str) -> String {
    format!("/projects/{}", percent_encode(repo))
}

fn noun(is_pull: bool) -> &'static str {
    if is_pull { "merge_requests" } else { "issues" }
}

#[derive(Deserialize)]
struct Project {
    path_with_namespace: String,
    http_url_to_repo: String,
    #[serde(default)]
    default_branch: Option<String>,
    #[serde(default)]
    visibility: Option<String>,
    #[serde(default)]
    description: Option<String>,
}

/// GitLab searches on its side too (a user may reach thousands of projects).
pub(super) async fn repositories(f: &Forge, q: &str) -> Result<Vec<Repository>, ForgeError> {
    let path = "/projects?membership=true&simple=true&order_by=last_activity_at&per_page=100";
    let path = if q.is_empty() { path.to_owned() } else { format!("{path}&search={}", percent_encode(q)) };
    let projects: Vec<Project> = f.api.get(&path).await?;
    Ok(projects
        .into_iter()
        .map(|p| Repository {
            provider: String::new(),
            full_name: p.path_with_namespace,
            clone_url: p.http_url_to_repo,
            default_branch: p.default_branch.unwrap_or_else(|| "main".into()),
            private: p.visibility.as_deref() != Some("public"),
            description: p.description,
        })
        .collect())
}

pub(super) async fn branches(f: &Forge, repo: &str) -> Result<(Vec<Branch>, String), ForgeError> {
    let path = format!("{}/repository/branches?per_page=100", project(repo));
    let (found, default): (Vec<Branch>, _) = futures::try_join!(f.api.get(&path), default_branch(f, repo))?;
    Ok((found, default))
}

pub(super) async fn default_branch(f: &Forge, repo: &str) -> Result<String, ForgeError> {
    let v = f.api.send(reqwest::Method::GET, &project(repo), None).await?;
    Ok(v["default_branch"].as_str().unwrap_or("main").to_owned())
}

/// A draft is a title starting with `Draft:`.
pub(super) async fn create_pull_request(f: &Forge, repo: &str, pr: &NewPullRequest, base: &str) -> Result<(u64, String), ForgeError> {
    let title = if pr.draft { format!("Draft: {}", pr.title) } else { pr.title.clone() };
    let request =
        json!({"source_branch": pr.head, "target_branch": base, "title": title, "description": pr.body.as_deref().unwrap_or_default()});
    let made = f.api.send(reqwest::Method::POST, &format!("{}/merge_requests", project(repo)), Some(&request)).await?;
    let number = made["iid"].as_u64().ok_or_else(|| ForgeError::Malformed("the merge request has no iid".into()))?;
    Ok((number, made["web_url"].as_str().unwrap_or_default().to_owned()))
}

pub(super) async fn comment(f: &Forge, at: Place<'_>, body: &str) -> Result<Value, ForgeError> {
    let base = format!("{}/{}/{}", project(at.repository), noun(at.is_pull), at.number);
    let path = match at.discussion {
        Some(d) => format!("{base}/discussions/{d}/notes"),
        None => format!("{base}/notes"),
    };
    let made = f.api.send(reqwest::Method::POST, &path, Some(&json!({"body": body}))).await?;
    Ok(json!({"id": made["id"], "url": made["html_url"]}))
}

pub(super) async fn can_write(f: &Forge, repo: &str, user_id: u64) -> Result<bool, ForgeError> {
    let v = f.api.send(reqwest::Method::GET, &format!("{}/members/all/{user_id}", project(repo)), None).await?;
    Ok(v["access_level"].as_u64().unwrap_or_default() >= DEVELOPER)
}

pub(super) async fn head(f: &Forge, repo: &str, iid: u64) -> Result<Option<String>, ForgeError> {
    let v = f.api.send(reqwest::Method::GET, &format!("{}/merge_requests/{iid}", project(repo)), None).await?;
    Ok(v["source_branch"].as_str().map(str::to_owned))
}

/// Award emoji: on the note that asked, or on the issue or merge request.
pub(super) async fn react(f: &Forge, repo: &str, number: u64, is_pull: bool, to: ReactTo) -> Result<(), ForgeError> {
    let base = format!("{}/{}/{number}", project(repo), noun(is_pull));
    let path = match to {
        ReactTo::Note { note } => format!("{base}/notes/{note}/award_emoji"),
        ReactTo::Issue(_) => format!("{base}/award_emoji"),
        _ => return Ok(()),
    };
    f.api.send(reqwest::Method::POST, &path, Some(&json!({"name": "eyes"}))).await.map(|_| ())
}
