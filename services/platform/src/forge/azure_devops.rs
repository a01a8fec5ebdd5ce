//! Azure DevOps' REST API: repositories are `organization/project/repository`, pull request
//! comments are threads, work items take comments of their own, and who may write is read from
//! the repository's access control lists (people are found on the identities host).

use serde::Deserialize;
use serde_json::{Value, json};

use super::api::ForgeError;
use super::types::{Branch, Forge, NewPullRequest, Place, Repository, escape};

const VERSION: &str = "api-version=7.1";
/// The Git security namespace (its ACL tokens are `repoV2/<project>/<repository>`).
const GIT_NAMESPACE: &str = "2e9eb7ed-3c0a-47d4-87c1-0ffdd275fd87";
/// The Git namespace's Contribute bit (push).
const CONTRIBUTE: u64 = 4;

/// The API's host (`scheme://host`) and the identities API's, from a provider's base URL, which
/// may name an organization after the host (what the picker lists).
pub(super) fn bases(base: &str) -> (String, Option<String>) {
    let host = host_of(base);
    let identities = match host.strip_prefix("https://dev.azure.com") {
        Some("") => "https://vssps.dev.azure.com".to_owned(),
        _ => host.clone(),
    };
    (host, Some(identities))
}

fn host_of(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("https", url));
    format!("{scheme}://{}", rest.split('/').next().unwrap_or_default())
}

/// The organization a provider's `api_url` names, if it does.
fn organization(f: &Forge) -> Option<String> {
    let url = f.provider.api_url.as_deref()?;
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split('/').nth(1).filter(|o| !o.is_empty()).map(str::to_owned)
}

fn parts(repo: &str) -> Result<(&str, &str, &str), ForgeError> {
    let mut it = repo.splitn(3, '/');
    match (it.next(), it.next(), it.next()) {
        (Some(o), Some(p), Some(r)) if !o.is_empty() && !p.is_empty() && !r.is_empty() => Ok((o, p, r)),
        _ => Err(ForgeError::NotFound(format!("{repo:?} is not `organization/project/repository`"))),
    }
}

fn repo_path(repo: &str) -> Result<String, ForgeError> {
    let (org, project, name) = parts(repo)?;
    Ok(format!("/{org}/{project}/_apis/git/repositories/{name}"))
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
    project: Named,
    #[serde(default)]
    remote_url: String,
    #[serde(default)]
    default_branch: Option<String>,
}

#[derive(Deserialize)]
struct Named {
    name: String,
}

pub(super) async fn repositories(f: &Forge) -> Result<Vec<Repository>, ForgeError> {
    let Some(org) = organization(f) else {
        return Err(ForgeError::NotFound(
            "give the provider an api_url naming the organization: https://dev.azure.com/<organization>".into(),
        ));
    };
    let listed: List<Repo> = f.api.get(&format!("/{org}/_apis/git/repositories?{VERSION}")).await?;
    Ok(listed
        .value
        .into_iter()
        .map(|r| Repository {
            provider: String::new(),
            full_name: format!("{org}/{}/{}", r.project.name, r.name),
            clone_url: r.remote_url,
            default_branch: short(r.default_branch.as_deref().unwrap_or("refs/heads/main")),
            private: true,
            description: None,
        })
        .collect())
}

pub(super) async fn branches(f: &Forge, repo: &str) -> Result<(Vec<Branch>, String), ForgeError> {
    let refs: List<Named> = f.api.get(&format!("{}/refs?filter=heads/&$top=100&{VERSION}", repo_path(repo)?)).await?;
    let branches = refs.value.iter().map(|r| Branch { name: short(&r.name), protected: false }).collect();
    Ok((branches, default_branch(f, repo).await?))
}

pub(super) async fn default_branch(f: &Forge, repo: &str) -> Result<String, ForgeError> {
    let v = f.api.send(reqwest::Method::GET, &format!("{}?{VERSION}", repo_path(repo)?), None).await?;
    Ok(short(v["defaultBranch"].as_str().unwrap_or("refs/heads/main")))
}

pub(super) async fn create_pull_request(f: &Forge, repo: &str, pr: &NewPullRequest, base: &str) -> Result<(u64, String), ForgeError> {
    let request = json!({"sourceRefName": format!("refs/heads/{}", pr.head), "targetRefName": format!("refs/heads/{base}"),
                         "title": pr.title, "description": pr.body.as_deref().unwrap_or_default(), "isDraft": pr.draft});
    let made = f.api.send(reqwest::Method::POST, &format!("{}/pullrequests?{VERSION}", repo_path(repo)?), Some(&request)).await?;
    let id = made["pullRequestId"].as_u64().ok_or_else(|| ForgeError::Malformed("no pullRequestId".into()))?;
    let (org, project, name) = parts(repo)?;
    let (host, _) = bases(&f.provider.api_url.clone().unwrap_or_else(|| format!("https://{}", f.provider.host)));
    Ok((id, format!("{host}/{org}/{project}/_git/{name}/pullrequest/{id}")))
}

/// On a pull request, a new thread (or a reply in the thread that asked); on a work item, a
/// comment of its own.
pub(super) async fn comment(f: &Forge, at: Place<'_>, body: &str) -> Result<Value, ForgeError> {
    if !at.is_pull {
        let (org, project, _) = parts(at.repository)?;
        let url = format!("/{org}/{project}/_apis/wit/workItems/{}/comments?api-version=7.1-preview.4", at.number);
        let made = f.api.send(reqwest::Method::POST, &url, Some(&json!({"text": body}))).await?;
        return Ok(json!({"id": made["id"], "url": Value::Null}));
    }
    let threads = format!("{}/pullRequests/{}/threads", repo_path(at.repository)?, at.number);
    let made = match at.discussion {
        Some(id) => {
            let request = json!({"content": body, "parentCommentId": 1, "commentType": 1});
            f.api.send(reqwest::Method::POST, &format!("{threads}/{id}/comments?{VERSION}"), Some(&request)).await?
        }
        None => {
            let request = json!({"comments": [{"parentCommentId": 0, "content": body, "commentType": 1}], "status": "active"});
            f.api.send(reqwest::Method::POST, &format!("{threads}?{VERSION}"), Some(&request)).await?
        }
    };
    Ok(json!({"id": made["id"], "url": Value::Null}))
}

/// Whether the identity `id` (a GUID, or an e-mail searched for) is allowed Contribute on the
/// repository, through any group.
pub(super) async fn can_write(f: &Forge, repo: &str, id: &str) -> Result<bool, ForgeError> {
    if id.is_empty() {
        return Ok(false);
    }
    let (organization, _, _) = parts(repo)?;
    let found = f.api.send(reqwest::Method::GET, &format!("{}?{VERSION}", repo_path(repo)?), None).await?;
    let (Some(repo_id), Some(project_id)) = (found["id"].as_str(), found["project"]["id"].as_str()) else {
        return Err(ForgeError::Malformed("the repository has no id or project id".into()));
    };
    let by = if id.contains('@') { "searchFilter=General&filterValue" } else { "identityIds" };
    let path = format!("/{organization}/_apis/identities?{by}={}&{VERSION}", escape(id));
    let identities = f.identities.as_ref().unwrap_or(&f.api);
    let found = identities.send(reqwest::Method::GET, &path, None).await?;
    let Some(descriptor) = found["value"][0]["descriptor"].as_str() else { return Ok(false) };
    let token = format!("repoV2/{project_id}/{repo_id}");
    let query = format!("token={}&descriptors={}&includeExtendedInfo=true", escape(&token), escape(descriptor));
    let acl = f
        .api
        .send(reqwest::Method::GET, &format!("/{organization}/_apis/accesscontrollists/{GIT_NAMESPACE}?{query}&{VERSION}"), None)
        .await?;
    Ok(acl["value"].as_array().into_iter().flatten().filter_map(|list| list["acesDictionary"].as_object()).any(|aces| {
        aces.values()
            .any(|ace| ace["descriptor"] == descriptor && ace["extendedInfo"]["effectiveAllow"].as_u64().unwrap_or(0) & CONTRIBUTE != 0)
    }))
}

pub(super) async fn head(f: &Forge, repo: &str, id: u64) -> Result<Option<String>, ForgeError> {
    let v = f.api.send(reqwest::Method::GET, &format!("{}/pullrequests/{id}?{VERSION}", repo_path(repo)?), None).await?;
    Ok(v["sourceRefName"].as_str().map(short))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_url_names_the_organization() {
        assert_eq!(bases("https://dev.azure.com/acme/"), ("https://dev.azure.com".into(), Some("https://vssps.dev.azure.com".into())));
        assert_eq!(bases("http://127.0.0.1:9/acme").0, "http://127.0.0.1:9");
        assert!(parts("acme/web").is_err());
        assert_eq!(parts("acme/web/site").unwrap(), ("acme", "web", "site"));
    }
}
