//! Bitbucket's REST APIs: Cloud's 2.0 (`workspace/repository`) and Data Center's 1.0
//! (`PROJECT/repository`, its pull requests `pull-requests`).

use serde::Deserialize;
use serde_json::{Value, json};

use super::api::ForgeError;
use super::types::{Branch, Forge, ForgeKind, NewPullRequest, Place, Repository, escape};

fn data_center(f: &Forge) -> bool {
    f.kind == ForgeKind::BitbucketDataCenter
}

/// The repository's own path under the API.
fn repo_path(f: &Forge, repo: &str) -> Result<String, ForgeError> {
    if !data_center(f) {
        return Ok(format!("/repositories/{repo}"));
    }
    match repo.split_once('/') {
        Some((project, slug)) if !project.is_empty() && !slug.is_empty() && !slug.contains('/') => {
            Ok(format!("/projects/{project}/repos/{slug}"))
        }
        _ => Err(ForgeError::NotFound(format!("{repo:?} is not `PROJECT/repository`"))),
    }
}

fn pulls(f: &Forge) -> &'static str {
    if data_center(f) { "pull-requests" } else { "pullrequests" }
}

/// A page of either API.
#[derive(Deserialize)]
struct Page<T> {
    values: Vec<T>,
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
struct CloudRepo {
    full_name: String,
    #[serde(default)]
    is_private: bool,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    mainbranch: Option<Named>,
    #[serde(default)]
    links: Links,
}

#[derive(Deserialize)]
struct Named {
    name: String,
}

#[derive(Deserialize)]
struct DcRepo {
    slug: String,
    project: Key,
    #[serde(default)]
    public: bool,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    links: Links,
}

#[derive(Deserialize)]
struct Key {
    key: String,
}

pub(super) async fn repositories(f: &Forge, q: &str) -> Result<Vec<Repository>, ForgeError> {
    if !data_center(f) {
        let page: Page<CloudRepo> = f.api.get("/repositories?role=member&sort=-updated_on&pagelen=100").await?;
        return Ok(page
            .values
            .into_iter()
            .map(|r| Repository {
                provider: String::new(),
                clone_url: r.links.clone.iter().find(|c| c.name == "https").map(|c| c.href.clone()).unwrap_or_default(),
                default_branch: r.mainbranch.map_or_else(|| "main".into(), |b| b.name),
                full_name: r.full_name,
                private: r.is_private,
                description: r.description,
            })
            .collect());
    }
    let mut page: Page<DcRepo> = f.api.get("/repos?limit=100").await?;
    let q = q.to_lowercase();
    page.values.retain(|r| q.is_empty() || format!("{}/{}", r.project.key, r.slug).to_lowercase().contains(&q));
    // Data Center lists no default branches: each is asked for (a failure is `main`).
    let defaults = futures::future::join_all(
        page.values
            .iter()
            .map(|r| async move { default_branch(f, &format!("{}/{}", r.project.key, r.slug)).await.unwrap_or_else(|_| "main".into()) }),
    )
    .await;
    Ok(page
        .values
        .into_iter()
        .zip(defaults)
        .map(|(r, default_branch)| {
            let clone = r.links.clone.iter().find(|c| c.name == "http").map(|c| without_user(&c.href));
            let clone = clone.unwrap_or_else(|| format!("https://{}/scm/{}/{}.git", f.provider.host, r.project.key.to_lowercase(), r.slug));
            Repository {
                provider: String::new(),
                full_name: format!("{}/{}", r.project.key, r.slug),
                clone_url: clone,
                default_branch,
                private: !r.public,
                description: r.description,
            }
        })
        .collect())
}

/// A clone URL without the user name Data Center puts in it (the token's user is the caller's).
fn without_user(href: &str) -> String {
    match href.split_once("://") {
        Some((scheme, rest)) => {
            let rest = rest.split_once('@').filter(|(user, _)| !user.contains('/')).map_or(rest, |(_, r)| r);
            format!("{scheme}://{rest}")
        }
        None => href.to_owned(),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DcBranch {
    display_id: String,
    #[serde(default)]
    is_default: bool,
}

#[derive(Deserialize)]
struct CloudBranch {
    name: String,
}

pub(super) async fn branches(f: &Forge, repo: &str) -> Result<(Vec<Branch>, String), ForgeError> {
    let base = repo_path(f, repo)?;
    if !data_center(f) {
        let path = format!("{base}/refs/branches?pagelen=100");
        let (found, default): (Page<CloudBranch>, _) = futures::try_join!(f.api.get(&path), default_branch(f, repo))?;
        return Ok((found.values.into_iter().map(|b| Branch { name: b.name, protected: false }).collect(), default));
    }
    let page: Page<DcBranch> = f.api.get(&format!("{base}/branches?limit=100")).await?;
    let default = match page.values.iter().find(|b| b.is_default) {
        Some(b) => b.display_id.clone(),
        None => default_branch(f, repo).await?,
    };
    Ok((page.values.into_iter().map(|b| Branch { name: b.display_id, protected: false }).collect(), default))
}

pub(super) async fn default_branch(f: &Forge, repo: &str) -> Result<String, ForgeError> {
    let base = repo_path(f, repo)?;
    if data_center(f) {
        let b: DcBranch = f.api.get(&format!("{base}/default-branch")).await?;
        return Ok(b.display_id);
    }
    let v = f.api.send(reqwest::Method::GET, &base, None).await?;
    Ok(v["mainbranch"]["name"].as_str().unwrap_or("main").to_owned())
}

pub(super) async fn create_pull_request(f: &Forge, repo: &str, pr: &NewPullRequest, base: &str) -> Result<(u64, String), ForgeError> {
    let description = pr.body.as_deref().unwrap_or_default();
    let request = if data_center(f) {
        json!({"title": pr.title, "description": description, "draft": pr.draft,
               "fromRef": {"id": format!("refs/heads/{}", pr.head)}, "toRef": {"id": format!("refs/heads/{base}")}})
    } else {
        json!({"title": pr.title, "description": description, "draft": pr.draft,
               "source": {"branch": {"name": pr.head}}, "destination": {"branch": {"name": base}}})
    };
    let made = f.api.send(reqwest::Method::POST, &format!("{}/{}", repo_path(f, repo)?, pulls(f)), Some(&request)).await?;
    let number = made["id"].as_u64().ok_or_else(|| ForgeError::Malformed("the pull request has no id".into()))?;
    let url = if data_center(f) { &made["links"]["self"][0]["href"] } else { &made["links"]["html"]["href"] };
    Ok((number, url.as_str().unwrap_or_default().to_owned()))
}

/// A reply goes under the comment that asked (`discussion`: its id).
pub(super) async fn comment(f: &Forge, at: Place<'_>, body: &str) -> Result<Value, ForgeError> {
    let mut request = if data_center(f) { json!({"text": body}) } else { json!({"content": {"raw": body}}) };
    if let Some(parent) = at.discussion.and_then(|d| d.parse::<u64>().ok()) {
        request["parent"] = json!({"id": parent});
    }
    let path = format!("{}/{}/{}/comments", repo_path(f, at.repository)?, pulls(f), at.number);
    let made = f.api.send(reqwest::Method::POST, &path, Some(&request)).await?;
    Ok(json!({"id": made["id"], "url": made["html_url"]}))
}

/// Cloud: the account's permission on the repository. Data Center: whether the users with
/// REPO_WRITE on it (through groups and the project too) whose names start so include them.
pub(super) async fn can_write(f: &Forge, repo: &str, account: &str) -> Result<bool, ForgeError> {
    if !data_center(f) {
        let v = f.api.send(reqwest::Method::GET, &format!("/repositories/{repo}/permissions-config/users/{account}"), None).await?;
        return Ok(["write", "admin"].contains(&v["permission"].as_str().unwrap_or_default()));
    }
    let Some((project, slug)) = repo.split_once('/') else { return Ok(false) };
    let path = format!(
        "/users?filter={}&permission.1=REPO_WRITE&permission.1.projectKey={}&permission.1.repositorySlug={}&limit=100",
        escape(account),
        escape(project),
        escape(slug)
    );
    let v = f.api.send(reqwest::Method::GET, &path, None).await?;
    Ok(v["values"].as_array().into_iter().flatten().any(|u| u["name"].as_str().is_some_and(|n| n.eq_ignore_ascii_case(account))))
}

pub(super) async fn head(f: &Forge, repo: &str, id: u64) -> Result<Option<String>, ForgeError> {
    let v = f.api.send(reqwest::Method::GET, &format!("{}/{}/{id}", repo_path(f, repo)?, pulls(f)), None).await?;
    let name = if data_center(f) { &v["fromRef"]["displayId"] } else { &v["source"]["branch"]["name"] };
    Ok(name.as_str().map(str::to_owned))
}

#[cfg(test)]
mod tests {
    #[test]
    fn clone_urls_lose_their_user_name() {
        assert_eq!(super::without_user("https://sam@git.acme.com/scm/app/site.git"), "https://git.acme.com/scm/app/site.git");
        assert_eq!(super::without_user("https://git.acme.com/scm/app/site.git"), "https://git.acme.com/scm/app/site.git");
    }
}
