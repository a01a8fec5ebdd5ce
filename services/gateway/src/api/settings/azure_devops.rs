//! Azure DevOps Services' REST API (7.1), for `azure_devops` git providers: a personal access
//! token as basic auth, repositories named `organization/project/repository`. The picker lists
//! the repositories of the organization the provider's `api_url` names
//! (`https://dev.azure.com/<organization>`); a repository's branches, a new pull request and a
//! comment (a new thread) are asked of its own URL.

use halyard_protocol::user::GitProvider;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::api::settings::forge::{BranchView, Branches, ForgeError, NewPullRequest, Repository, Target, repository, send_with};

/// The API version every call names.
const VERSION: &str = "api-version=7.1";

/// `scheme://host` of the provider's API, and the organization its `api_url` names, if any.
fn base(p: &GitProvider) -> (String, Option<String>) {
    let url = p.api_url.clone().unwrap_or_else(|| format!("https://{}", p.host));
    let (scheme, rest) = url.split_once("://").unwrap_or(("https", url.as_str()));
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let org = path.trim_matches('/').split('/').next().filter(|o| !o.is_empty()).map(str::to_owned);
    (format!("{scheme}://{host}"), org)
}

fn headers(p: &GitProvider, token: &str) -> Vec<(&'static str, String)> {
    use base64::Engine;
    let user = if p.username.is_empty() { "pat" } else { p.username.as_str() };
    vec![("Authorization", format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{user}:{token}"))))]
}

async fn call<T: serde::de::DeserializeOwned>(
    allow: &[String],
    p: &GitProvider,
    token: &str,
    method: reqwest::Method,
    url: &str,
    body: Option<&Value>,
) -> Result<T, ForgeError> {
    send_with(allow, headers(p, token), method, url, body).await
}

/// `organization/project/repository`, split.
fn parts(full_name: &str) -> Result<(&str, &str, &str), ForgeError> {
    let mut it = full_name.splitn(3, '/');
    match (it.next(), it.next(), it.next()) {
        (Some(o), Some(p), Some(r)) if !o.is_empty() && !p.is_empty() && !r.is_empty() => Ok((o, p, r)),
        _ => Err(ForgeError::NotFound(format!("{full_name:?} is not `organization/project/repository`"))),
    }
}

/// The repository's API URL.
fn repo_url(t: &Target<'_>) -> Result<String, ForgeError> {
    let (host, _) = base(t.provider);
    let (org, project, repo) = parts(t.full_name)?;
    Ok(format!("{host}/{org}/{project}/_apis/git/repositories/{repo}"))
}

fn short(branch: &str) -> String {
    branch.strip_prefix("refs/heads/").unwrap_or(branch).to_owned()
}

#[derive(Deserialize)]
struct List<T> {
    value: Vec<T>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Repo {
    name: String,
    project: Project,
    #[serde(default)]
    remote_url: String,
    #[serde(default)]
    default_branch: Option<String>,
}

#[derive(Deserialize)]
struct Project {
    name: String,
}

/// The repositories of the organization `p`'s `api_url` names whose full name contains `q`.
pub async fn repositories(allow: &[String], name: &str, p: &GitProvider, token: &str, q: &str) -> Result<Vec<Repository>, ForgeError> {
    let (host, Some(org)) = base(p) else {
        return Err(ForgeError::NotFound(
            "give the provider an api_url naming the organization: https://dev.azure.com/<organization>".into(),
        ));
    };
    let listed: List<Repo> =
        call(allow, p, token, reqwest::Method::GET, &format!("{host}/{org}/_apis/git/repositories?{VERSION}"), None).await?;
    let q = q.to_lowercase();
    Ok(listed
        .value
        .iter()
        .map(|r| (format!("{org}/{}/{}", r.project.name, r.name), r))
        .filter(|(full, _)| q.is_empty() || full.to_lowercase().contains(&q))
        .map(|(full, r)| {
            let branch = short(r.default_branch.as_deref().unwrap_or("refs/heads/main"));
            repository(name, &full, &r.remote_url, &branch, true, None)
        })
        .collect())
}

/// The repository's branches (the first hundred) and which is the default.
pub async fn branches(t: Target<'_>) -> Result<Branches, ForgeError> {
    #[derive(Deserialize)]
    struct Ref {
        name: String,
    }
    let url = repo_url(&t)?;
    let refs: List<Ref> =
        call(t.allow, t.provider, t.token, reqwest::Method::GET, &format!("{url}/refs?filter=heads/&$top=100&{VERSION}"), None).await?;
    let branches = refs.value.iter().map(|r| BranchView { name: short(&r.name), protected: false }).collect();
    Ok(Branches { repository: t.full_name.to_owned(), default_branch: default_branch(&t).await?, branches })
}

async fn default_branch(t: &Target<'_>) -> Result<String, ForgeError> {
    let url = repo_url(t)?;
    let repo: Value = call(t.allow, t.provider, t.token, reqwest::Method::GET, &format!("{url}?{VERSION}"), None).await?;
    Ok(short(repo["defaultBranch"].as_str().unwrap_or("refs/heads/main")))
}

/// Opens `pr`; `{number, url, head, base}`.
pub async fn create_pull_request(t: Target<'_>, pr: &NewPullRequest) -> Result<Value, ForgeError> {
    let target = match &pr.base {
        Some(b) => b.clone(),
        None => default_branch(&t).await?,
    };
    let request = json!({"sourceRefName": format!("refs/heads/{}", pr.head), "targetRefName": format!("refs/heads/{target}"),
                         "title": pr.title, "description": pr.body.as_deref().unwrap_or_default(), "isDraft": pr.draft});
    let url = repo_url(&t)?;
    let made: Value =
        call(t.allow, t.provider, t.token, reqwest::Method::POST, &format!("{url}/pullrequests?{VERSION}"), Some(&request)).await?;
    let id = made["pullRequestId"].as_u64().ok_or_else(|| ForgeError::Malformed("no pullRequestId".into()))?;
    let (host, _) = base(t.provider);
    let (org, project, repo) = parts(t.full_name)?;
    let web = format!("{host}/{org}/{project}/_git/{repo}/pullrequest/{id}");
    Ok(json!({"number": id, "url": web, "head": pr.head, "base": target}))
}

/// Comments `body` on pull request `number` (a thread of its own); `{id, url}`.
pub async fn comment(t: Target<'_>, number: u64, body: &str) -> Result<Value, ForgeError> {
    let url = repo_url(&t)?;
    let request = json!({"comments": [{"parentCommentId": 0, "content": body, "commentType": 1}], "status": "active"});
    let made: Value = call(
        t.allow,
        t.provider,
        t.token,
        reqwest::Method::POST,
        &format!("{url}/pullRequests/{number}/threads?{VERSION}"),
        Some(&request),
    )
    .await?;
    Ok(json!({"id": made["id"], "url": Value::Null}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_url_names_the_organization() {
        let p = |api: Option<&str>| GitProvider {
            kind: "azure_devops".into(),
            host: "dev.azure.com".into(),
            username: "pat".into(),
            token_sealed: String::new(),
            api_url: api.map(str::to_owned),
            created_ms: 0,
            updated_ms: 0,
        };
        assert_eq!(base(&p(None)), ("https://dev.azure.com".into(), None));
        assert_eq!(base(&p(Some("https://dev.azure.com/acme/"))), ("https://dev.azure.com".into(), Some("acme".into())));
        assert!(parts("acme/web").is_err());
        assert_eq!(parts("acme/web/site").unwrap(), ("acme", "web", "site"));
    }
}
