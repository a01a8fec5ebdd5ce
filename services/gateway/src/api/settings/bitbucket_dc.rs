//! Bitbucket Data Center's REST API (1.0), for `bitbucket` git providers on a host of their own
//! (the API at `https://<host>/rest/api/1.0`, or an `api_url` ending so): an HTTP access token
//! as a bearer token (or a user name and token as basic auth), repositories named
//! `PROJECT/repository` and cloned from `https://<host>/scm/<project>/<repository>.git`. The
//! picker lists what the token may read; a repository's branches, a new pull request and a
//! comment are asked of the repository's own URL.

use halyard_protocol::user::GitProvider;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::api::settings::forge::{
    BranchView, Branches, ForgeError, NewPullRequest, Repository, Target, api_base, provider_headers, repository, send_with,
};

/// Repositories and branches asked for (one page).
const PAGE: usize = 100;

async fn call<T: serde::de::DeserializeOwned>(
    allow: &[String],
    p: &GitProvider,
    token: &str,
    method: reqwest::Method,
    url: &str,
    body: Option<&Value>,
) -> Result<T, ForgeError> {
    // Bitbucket's credentials go as Cloud's do.
    send_with(allow, provider_headers(p, token), method, url, body).await
}

/// The repository's API URL (`.../projects/KEY/repos/slug`).
fn repo_url(t: &Target<'_>) -> Result<String, ForgeError> {
    let base = api_base(t.provider).ok_or_else(|| ForgeError::NoApi(t.provider.kind.clone()))?;
    match t.full_name.split_once('/') {
        Some((project, slug)) if !project.is_empty() && !slug.is_empty() && !slug.contains('/') => {
            Ok(format!("{base}/projects/{project}/repos/{slug}"))
        }
        _ => Err(ForgeError::NotFound(format!("{:?} is not `PROJECT/repository`", t.full_name))),
    }
}

/// A page of the API.
#[derive(Deserialize)]
struct Page<T> {
    values: Vec<T>,
}

#[derive(Deserialize)]
struct Repo {
    slug: String,
    project: Project,
    #[serde(default)]
    public: bool,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    links: Links,
}

#[derive(Deserialize)]
struct Project {
    key: String,
}

#[derive(Deserialize, Default)]
struct Links {
    #[serde(default)]
    clone: Vec<Href>,
}

#[derive(Deserialize)]
struct Href {
    href: String,
    #[serde(default)]
    name: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Branch {
    display_id: String,
    #[serde(default)]
    is_default: bool,
}

/// A clone URL without the user name Bitbucket writes into it (the git proxy adds credentials).
fn without_user(href: &str) -> String {
    match href.split_once("://") {
        Some((scheme, rest)) => {
            let rest = rest.split_once('@').filter(|(user, _)| !user.contains('/')).map_or(rest, |(_, r)| r);
            format!("{scheme}://{rest}")
        }
        None => href.to_owned(),
    }
}

/// The default branch of the repository `project/slug`.
async fn default_branch(t: Target<'_>) -> Result<String, ForgeError> {
    let b: Branch = call(t.allow, t.provider, t.token, reqwest::Method::GET, &format!("{}/default-branch", repo_url(&t)?), None).await?;
    Ok(b.display_id)
}

/// The repositories the token may read whose `PROJECT/repository` contains `q`.
pub async fn repositories(allow: &[String], name: &str, p: &GitProvider, token: &str, q: &str) -> Result<Vec<Repository>, ForgeError> {
    let base = api_base(p).ok_or_else(|| ForgeError::NoApi(p.kind.clone()))?;
    let page: Page<Repo> = call(allow, p, token, reqwest::Method::GET, &format!("{base}/repos?limit={PAGE}"), None).await?;
    let wanted: Vec<Repo> = page
        .values
        .into_iter()
        .filter(|r| q.is_empty() || format!("{}/{}", r.project.key, r.slug).to_lowercase().contains(&q.to_lowercase()))
        .collect();
    // Each repository's default branch is a call of its own; they go together.
    let defaults =
        futures::future::join_all(
            wanted.iter().map(|r| {
                let full_name = format!("{}/{}", r.project.key, r.slug);
                async move {
                    default_branch(Target { allow, provider: p, token, full_name: &full_name }).await.unwrap_or_else(|_| "main".into())
                }
            }),
        )
        .await;
    Ok(wanted
        .iter()
        .zip(defaults)
        .map(|(r, branch)| {
            let clone = r
                .links
                .clone
                .iter()
                .find(|c| c.name == "http")
                .map(|c| without_user(&c.href))
                .unwrap_or_else(|| format!("https://{}/scm/{}/{}.git", p.host, r.project.key.to_lowercase(), r.slug));
            repository(name, &format!("{}/{}", r.project.key, r.slug), &clone, &branch, !r.public, r.description.as_deref())
        })
        .collect())
}

/// The repository's branches (the first hundred) and which is the default.
pub async fn branches(t: Target<'_>) -> Result<Branches, ForgeError> {
    let url = format!("{}/branches?limit={PAGE}", repo_url(&t)?);
    let page: Page<Branch> = call(t.allow, t.provider, t.token, reqwest::Method::GET, &url, None).await?;
    let default = page.values.iter().find(|b| b.is_default).map(|b| b.display_id.clone());
    let default = match default {
        Some(d) => d,
        None => default_branch(t).await?,
    };
    // Data Center keeps branch permissions apart; none is reported protected here.
    let branches = page.values.into_iter().map(|b| BranchView { name: b.display_id, protected: false }).collect();
    Ok(Branches { repository: t.full_name.to_owned(), default_branch: default, branches })
}

/// Opens `pr`: `{number, url, head, base}`.
pub async fn create_pull_request(t: Target<'_>, pr: &NewPullRequest) -> Result<Value, ForgeError> {
    let base = match &pr.base {
        Some(b) => b.clone(),
        None => default_branch(t).await?,
    };
    let body = json!({
        "title": pr.title,
        "description": pr.body.as_deref().unwrap_or_default(),
        "draft": pr.draft,
        "fromRef": {"id": format!("refs/heads/{}", pr.head)},
        "toRef": {"id": format!("refs/heads/{base}")},
    });
    let made: Value =
        call(t.allow, t.provider, t.token, reqwest::Method::POST, &format!("{}/pull-requests", repo_url(&t)?), Some(&body)).await?;
    let number = made["id"].as_u64().ok_or_else(|| ForgeError::Malformed("the pull request has no id".into()))?;
    let url = made["links"]["self"][0]["href"].as_str().unwrap_or_default();
    Ok(json!({"number": number, "url": url, "head": pr.head, "base": base}))
}

/// Comments `text` on pull request `number`: `{id, url}`.
pub async fn comment(t: Target<'_>, number: u64, text: &str) -> Result<Value, ForgeError> {
    let url = format!("{}/pull-requests/{number}/comments", repo_url(&t)?);
    let made: Value = call(t.allow, t.provider, t.token, reqwest::Method::POST, &url, Some(&json!({"text": text}))).await?;
    Ok(json!({"id": made["id"], "url": Value::Null}))
}

#[cfg(test)]
mod tests {
    #[test]
    fn clone_urls_lose_their_user_name() {
        assert_eq!(super::without_user("https://sam@git.acme.com/scm/app/site.git"), "https://git.acme.com/scm/app/site.git");
        assert_eq!(super::without_user("https://git.acme.com/scm/app/site.git"), "https://git.acme.com/scm/app/site.git");
    }
}
