//! GitHub's REST API (github.com and Enterprise), and Forgejo's and Gitea's, which have its
//! paths under their own base.

use serde::Deserialize;
use serde_json::{Value, json};

use super::api::ForgeError;
use super::types::{Branch, Forge, NewPullRequest, Place, ReactTo, Repository};

/// Permissions that let a sender ask for work.
const WRITERS: [&str; 3] = ["admin", "maintain", "write"];

#[derive(Deserialize)]
struct Repo {
    full_name: String,
    clone_url: String,
    #[serde(default)]
    default_branch: Option<String>,
    #[serde(default)]
    private: bool,
    #[serde(default)]
    description: Option<String>,
}

pub(super) async fn repositories(f: &Forge) -> Result<Vec<Repository>, ForgeError> {
    let repos: Vec<Repo> = f.api.get("/user/repos?per_page=100&sort=updated&affiliation=owner,collaborator,organization_member").await?;
    Ok(repos
        .into_iter()
        .map(|r| Repository {
            provider: String::new(),
            full_name: r.full_name,
            clone_url: r.clone_url,
            default_branch: r.default_branch.unwrap_or_else(|| "main".into()),
            private: r.private,
            description: r.description,
        })
        .collect())
}

pub(super) async fn branches(f: &Forge, repo: &str) -> Result<(Vec<Branch>, String), ForgeError> {
    let path = format!("/repos/{repo}/branches?per_page=100");
    let (found, default): (Vec<Branch>, _) = futures::try_join!(f.api.get(&path), default_branch(f, repo))?;
    Ok((found, default))
}

pub(super) async fn default_branch(f: &Forge, repo: &str) -> Result<String, ForgeError> {
    let v = f.api.send(reqwest::Method::GET, &format!("/repos/{repo}"), None).await?;
    Ok(v["default_branch"].as_str().unwrap_or("main").to_owned())
}

pub(super) async fn create_pull_request(f: &Forge, repo: &str, pr: &NewPullRequest, base: &str) -> Result<(u64, String), ForgeError> {
    let request =
        json!({"title": pr.title, "head": pr.head, "base": base, "body": pr.body.as_deref().unwrap_or_default(), "draft": pr.draft});
    let made = f.api.send(reqwest::Method::POST, &format!("/repos/{repo}/pulls"), Some(&request)).await?;
    let number = made["number"].as_u64().ok_or_else(|| ForgeError::Malformed("the pull request has no number".into()))?;
    Ok((number, made["html_url"].as_str().unwrap_or_default().to_owned()))
}

/// Pull requests are issues for comments.
pub(super) async fn comment(f: &Forge, at: Place<'_>, body: &str) -> Result<Value, ForgeError> {
    let path = format!("/repos/{}/issues/{}/comments", at.repository, at.number);
    let made = f.api.send(reqwest::Method::POST, &path, Some(&json!({"body": body}))).await?;
    Ok(json!({"id": made["id"], "url": made["html_url"]}))
}

pub(super) async fn can_write(f: &Forge, repo: &str, login: &str) -> Result<bool, ForgeError> {
    let v = f.api.send(reqwest::Method::GET, &format!("/repos/{repo}/collaborators/{login}/permission"), None).await?;
    Ok(WRITERS.contains(&v["permission"].as_str().unwrap_or_default()) || v["role_name"] == "maintain")
}

pub(super) async fn head(f: &Forge, repo: &str, number: u64) -> Result<Option<String>, ForgeError> {
    let v = f.api.send(reqwest::Method::GET, &format!("/repos/{repo}/pulls/{number}"), None).await?;
    Ok(v["head"]["ref"].as_str().map(str::to_owned))
}

pub(super) async fn react(f: &Forge, repo: &str, to: ReactTo) -> Result<(), ForgeError> {
    let path = match to {
        ReactTo::Issue(n) => format!("/repos/{repo}/issues/{n}/reactions"),
        ReactTo::IssueComment(id) => format!("/repos/{repo}/issues/comments/{id}/reactions"),
        ReactTo::ReviewComment(id) => format!("/repos/{repo}/pulls/comments/{id}/reactions"),
        ReactTo::Note { .. } | ReactTo::Nothing => return Ok(()),
    };
    f.api.send(reqwest::Method::POST, &path, Some(&json!({"content": "eyes"}))).await.map(|_| ())
}
