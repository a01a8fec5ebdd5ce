//! The REST APIs of users' git providers, called with their stored tokens: GitHub's (github.com
//! and GitHub Enterprise, or any forge that speaks it) and GitLab's. What Halyard asks of them:
//! the repositories a token reaches (the picker), and for one repository its branches, a new
//! pull (merge) request and a comment on one (Halyard's own MCP tools). Each call checks the
//! API's address against the operator's network policy first, as webhooks do, so a provider
//! cannot turn the gateway against the operator's own network.

use std::time::Duration;

use halyard_platform::net;
use halyard_protocol::user::GitProvider;
use serde::Deserialize;
use serde_json::{Value, json};

/// Longest a forge may take to answer.
const TIMEOUT: Duration = Duration::from_secs(15);
/// Repositories asked for per provider (one page).
const PAGE: usize = 100;

/// An error calling a forge, in words for the user.
#[derive(Debug, thiserror::Error)]
pub enum ForgeError {
    #[error("`{0}` providers have no repository API; use a github or gitlab provider")]
    NoApi(String),
    #[error("the API cannot be called: {0}")]
    Destination(#[from] net::DestinationError),
    #[error("the API could not be reached: {0}")]
    Unreachable(String),
    #[error("the API refused the token (HTTP {0}); store a valid one with PUT /api/v1/git-providers/<name>")]
    Refused(u16),
    #[error("the API found no such thing (HTTP 404: {0}); check the repository's name and that the token reaches it")]
    NotFound(String),
    #[error("the API answered HTTP {0}: {1}")]
    Status(u16, String),
    #[error("the API answered something else than expected: {0}")]
    Malformed(String),
}

/// The REST API base URL of `p`, if its kind has one.
pub fn api_base(p: &GitProvider) -> Option<String> {
    if let Some(url) = &p.api_url {
        return Some(url.trim_end_matches('/').to_owned());
    }
    match (p.kind.as_str(), p.host.as_str()) {
        ("github", "github.com") => Some("https://api.github.com".into()),
        ("github", host) => Some(format!("https://{host}/api/v3")),
        ("gitlab", host) => Some(format!("https://{host}/api/v4")),
        // Forgejo and Gitea: GitHub's paths, under their own base.
        ("forgejo", host) => Some(format!("https://{host}/api/v1")),
        // Bitbucket Cloud's API is on its own host; any other host is a Data Center's.
        ("bitbucket", "bitbucket.org") => Some("https://api.bitbucket.org/2.0".into()),
        ("bitbucket", host) => Some(format!("https://{host}/rest/api/1.0")),
        // Azure DevOps: the host; an `api_url` may name the organization whose repositories
        // the picker lists (`https://dev.azure.com/<organization>`).
        ("azure_devops", host) => Some(format!("https://{host}")),
        _ => None,
    }
}

/// Whether `p` is a Bitbucket Data Center (its API is REST 1.0, not Cloud's 2.0).
pub fn is_bitbucket_data_center(p: &GitProvider) -> bool {
    p.is_bitbucket_data_center()
}

/// The repository a clone URL's `path` names on `p`: Data Center serves `PROJECT/repository`
/// under `/scm/`.
pub fn repository_name(p: &GitProvider, path: String) -> String {
    match path.strip_prefix("scm/") {
        Some(rest) if is_bitbucket_data_center(p) => rest.to_owned(),
        _ => path,
    }
}

/// A repository as the picker shows it.
pub fn repository(
    provider: &str,
    full_name: &str,
    clone_url: &str,
    default_branch: &str,
    private: bool,
    description: Option<&str>,
) -> Repository {
    Repository {
        provider: provider.to_owned(),
        full_name: full_name.to_owned(),
        clone_url: clone_url.to_owned(),
        default_branch: default_branch.to_owned(),
        private,
        description: description.map(str::to_owned),
    }
}

/// A repository a git provider's token reaches.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Repository {
    /// The user's git provider that reaches it.
    pub provider: String,
    /// `owner/name` (GitLab: `group/subgroup/name`).
    pub full_name: String,
    /// What a conversation's `repository.url` takes.
    pub clone_url: String,
    pub default_branch: String,
    pub private: bool,
    pub description: Option<String>,
}

/// A repository's branches and which is the default.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Branches {
    pub repository: String,
    pub default_branch: String,
    /// The first hundred.
    pub branches: Vec<BranchView>,
}

#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct BranchView {
    pub name: String,
    pub protected: bool,
}

#[derive(Deserialize)]
struct GithubRepo {
    full_name: String,
    clone_url: String,
    #[serde(default)]
    default_branch: Option<String>,
    #[serde(default)]
    private: bool,
    #[serde(default)]
    description: Option<String>,
}

/// A page of Bitbucket's API.
#[derive(Deserialize)]
struct BitbucketPage<T> {
    values: Vec<T>,
}

#[derive(Deserialize)]
struct BitbucketRepo {
    full_name: String,
    #[serde(default)]
    is_private: bool,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    mainbranch: Option<BitbucketBranch>,
    links: BitbucketLinks,
}

#[derive(Deserialize)]
struct BitbucketBranch {
    name: String,
}

#[derive(Deserialize)]
struct BitbucketLinks {
    #[serde(default)]
    clone: Vec<BitbucketHref>,
}

#[derive(Deserialize)]
struct BitbucketHref {
    #[serde(default)]
    name: String,
    href: String,
}

#[derive(Deserialize)]
struct GitlabProject {
    path_with_namespace: String,
    http_url_to_repo: String,
    #[serde(default)]
    default_branch: Option<String>,
    #[serde(default)]
    visibility: Option<String>,
    #[serde(default)]
    description: Option<String>,
}

/// The repositories `name`'s token reaches whose full name contains `q` (any case), most
/// recently updated first.
pub async fn repositories(allow: &[String], name: &str, p: &GitProvider, token: &str, q: &str) -> Result<Vec<Repository>, ForgeError> {
    if p.kind == "azure_devops" {
        return crate::api::settings::azure_devops::repositories(allow, name, p, token, q).await;
    }
    if is_bitbucket_data_center(p) {
        return crate::api::settings::bitbucket_dc::repositories(allow, name, p, token, q).await;
    }
    let base = api_base(p).ok_or_else(|| ForgeError::NoApi(p.kind.clone()))?;
    let wanted = |full_name: &str| q.is_empty() || full_name.to_lowercase().contains(&q.to_lowercase());
    let headers = provider_headers(p, token);
    let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    match p.kind.as_str() {
        "bitbucket" => {
            let url = format!("{base}/repositories?role=member&sort=-updated_on&pagelen={PAGE}");
            let page: BitbucketPage<BitbucketRepo> = get(allow, &url, &headers).await?;
            Ok(page
                .values
                .iter()
                .filter(|r| wanted(&r.full_name))
                .map(|r| {
                    let clone = r.links.clone.iter().find(|c| c.name == "https").map(|c| c.href.as_str()).unwrap_or_default();
                    let branch = r.mainbranch.as_ref().map_or("main", |b| b.name.as_str());
                    repository(name, &r.full_name, clone, branch, r.is_private, r.description.as_deref())
                })
                .collect())
        }
        "gitlab" => {
            let url = format!("{base}/projects?membership=true&simple=true&order_by=last_activity_at&per_page={PAGE}");
            let url = if q.is_empty() { url } else { format!("{url}&search={}", halyard_platform::net::percent_encode(q)) };
            let projects: Vec<GitlabProject> = get(allow, &url, &headers).await?;
            Ok(projects
                .iter()
                .filter(|r| wanted(&r.path_with_namespace))
                .map(|r| {
                    let private = r.visibility.as_deref() != Some("public");
                    let branch = r.default_branch.as_deref().unwrap_or("main");
                    repository(name, &r.path_with_namespace, &r.http_url_to_repo, branch, private, r.description.as_deref())
                })
                .collect())
        }
        _ => {
            let url = format!("{base}/user/repos?per_page={PAGE}&sort=updated&affiliation=owner,collaborator,organization_member");
            let repos: Vec<GithubRepo> = get(allow, &url, &headers).await?;
            Ok(repos
                .iter()
                .filter(|r| wanted(&r.full_name))
                .map(|r| {
                    let branch = r.default_branch.as_deref().unwrap_or("main");
                    repository(name, &r.full_name, &r.clone_url, branch, r.private, r.description.as_deref())
                })
                .collect())
        }
    }
}

/// The headers that carry `p`'s token, as its forge wants them.
pub(crate) fn provider_headers(p: &GitProvider, token: &str) -> Vec<(&'static str, String)> {
    if p.kind == "bitbucket" {
        // An app password or API token goes with the account's name as basic auth; a workspace or
        // repository access token (no name given) as a bearer token.
        if p.username.is_empty() || p.username == BITBUCKET_TOKEN_USER {
            return vec![("Authorization", format!("Bearer {token}"))];
        }
        use base64::Engine;
        let basic = base64::engine::general_purpose::STANDARD.encode(format!("{}:{token}", p.username));
        return vec![("Authorization", format!("Basic {basic}"))];
    }
    auth_headers(&p.kind, token)
}

/// The name git sends with a Bitbucket access token (and the API's sign that none was given).
pub const BITBUCKET_TOKEN_USER: &str = "x-token-auth";

/// The headers that carry `token` to a forge of `kind`, as it wants them.
fn auth_headers(kind: &str, token: &str) -> Vec<(&'static str, String)> {
    if kind == "gitlab" {
        vec![("PRIVATE-TOKEN", token.to_owned())]
    } else if kind == "forgejo" {
        vec![("Authorization", format!("token {token}")), ("Accept", "application/json".into())]
    } else {
        vec![
            ("Authorization", format!("Bearer {token}")),
            ("Accept", "application/vnd.github+json".into()),
            ("X-GitHub-Api-Version", "2022-11-28".into()),
        ]
    }
}

/// The client forge calls go through: it follows no redirect, which could lead past the
/// address check.
fn client(allow: &[String]) -> Result<&'static reqwest::Client, ForgeError> {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    if let Some(c) = CLIENT.get() {
        return Ok(c);
    }
    let built = halyard_platform::outbound::builder(allow)
        .connect_timeout(Duration::from_secs(5))
        .build()
        .map_err(|e| ForgeError::Unreachable(e.to_string()))?;
    Ok(CLIENT.get_or_init(|| built))
}

async fn get<T: serde::de::DeserializeOwned>(allow: &[String], url: &str, headers: &[(&str, &str)]) -> Result<T, ForgeError> {
    send(allow, reqwest::Method::GET, url, headers, None).await
}

/// [`send`] with owned headers (what a provider's credentials make).
pub(crate) async fn send_with<T: serde::de::DeserializeOwned>(
    allow: &[String],
    headers: Vec<(&'static str, String)>,
    method: reqwest::Method,
    url: &str,
    body: Option<&Value>,
) -> Result<T, ForgeError> {
    let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    send(allow, method, url, &h, body).await
}

pub(crate) async fn send<T: serde::de::DeserializeOwned>(
    allow: &[String],
    method: reqwest::Method,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> Result<T, ForgeError> {
    net::check_destination(url, allow).await?;
    let mut request = client(allow)?.request(method, url).timeout(TIMEOUT).header("User-Agent", "halyard");
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    if let Some(body) = body {
        request = request.json(body);
    }
    let resp = request.send().await.map_err(|e| ForgeError::Unreachable(e.without_url().to_string()))?;
    let status = resp.status().as_u16();
    if status == 401 || status == 403 {
        return Err(ForgeError::Refused(status));
    }
    if !resp.status().is_success() {
        let body: String = resp.text().await.unwrap_or_default().chars().take(300).collect();
        return Err(if status == 404 { ForgeError::NotFound(body) } else { ForgeError::Status(status, body) });
    }
    resp.json().await.map_err(|e| ForgeError::Malformed(e.without_url().to_string()))
}

/// One repository on a user's forge, and what to reach it with.
#[derive(Clone, Copy)]
pub struct Target<'a> {
    /// Destinations the operator allows (`gateway.git_api_allow`).
    pub allow: &'a [String],
    pub provider: &'a GitProvider,
    pub token: &'a str,
    /// `owner/name` (GitLab: `group/subgroup/name`).
    pub full_name: &'a str,
}

impl Target<'_> {
    fn is_gitlab(&self) -> bool {
        self.provider.kind == "gitlab"
    }

    fn is_bitbucket(&self) -> bool {
        self.provider.kind == "bitbucket"
    }

    /// The repository's own API URL.
    fn url(&self) -> Result<String, ForgeError> {
        let base = api_base(self.provider).ok_or_else(|| ForgeError::NoApi(self.provider.kind.clone()))?;
        Ok(if self.is_gitlab() {
            format!("{base}/projects/{}", halyard_platform::net::percent_encode(self.full_name))
        } else if self.is_bitbucket() {
            format!("{base}/repositories/{}", self.full_name)
        } else {
            format!("{base}/repos/{}", self.full_name)
        })
    }

    async fn call<T: serde::de::DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<T, ForgeError> {
        let headers = provider_headers(self.provider, self.token);
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        send(self.allow, method, &format!("{}{path}", self.url()?), &headers, body).await
    }
}

#[derive(Deserialize)]
struct Branch {
    name: String,
    #[serde(default)]
    protected: bool,
}

/// The repository's branches (the first hundred), each `{name, protected}`, and which is the
/// default.
pub async fn branches(t: Target<'_>) -> Result<Branches, ForgeError> {
    if t.provider.kind == "azure_devops" {
        return crate::api::settings::azure_devops::branches(t).await;
    }
    if is_bitbucket_data_center(t.provider) {
        return crate::api::settings::bitbucket_dc::branches(t).await;
    }
    if t.is_bitbucket() {
        let (found, default): (BitbucketPage<Branch>, _) =
            futures::try_join!(t.call(reqwest::Method::GET, "/refs/branches?pagelen=100", None), default_branch(t))?;
        let branches = found.values.into_iter().map(|b| BranchView { name: b.name, protected: b.protected }).collect();
        return Ok(Branches { repository: t.full_name.to_owned(), default_branch: default, branches });
    }
    let path = if t.is_gitlab() { "/repository/branches?per_page=100" } else { "/branches?per_page=100" };
    let (found, default): (Vec<Branch>, _) = futures::try_join!(t.call(reqwest::Method::GET, path, None), default_branch(t))?;
    let branches = found.into_iter().map(|b| BranchView { name: b.name, protected: b.protected }).collect();
    Ok(Branches { repository: t.full_name.to_owned(), default_branch: default, branches })
}

async fn default_branch(t: Target<'_>) -> Result<String, ForgeError> {
    #[derive(Deserialize)]
    struct Repo {
        #[serde(default)]
        default_branch: Option<String>,
        /// Bitbucket's name for it.
        #[serde(default)]
        mainbranch: Option<BitbucketBranch>,
    }
    let repo: Repo = t.call(reqwest::Method::GET, "", None).await?;
    Ok(repo.default_branch.or(repo.mainbranch.map(|b| b.name)).unwrap_or_else(|| "main".into()))
}

/// A pull (merge) request to open.
#[derive(Debug, Deserialize)]
pub struct NewPullRequest {
    pub title: String,
    /// The branch with the changes.
    pub head: String,
    /// The branch to merge into (default: the repository's default branch).
    #[serde(default)]
    pub base: Option<String>,
    #[serde(default)]
    pub body: Option<String>,
    #[serde(default)]
    pub draft: bool,
}

/// Opens `pr`; what the forge made: `{number, url, head, base}`.
pub async fn create_pull_request(t: Target<'_>, pr: &NewPullRequest) -> Result<Value, ForgeError> {
    if t.provider.kind == "azure_devops" {
        return crate::api::settings::azure_devops::create_pull_request(t, pr).await;
    }
    if is_bitbucket_data_center(t.provider) {
        return crate::api::settings::bitbucket_dc::create_pull_request(t, pr).await;
    }
    let base = match &pr.base {
        Some(b) => b.clone(),
        None => default_branch(t).await?,
    };
    let body = pr.body.as_deref().unwrap_or_default();
    if t.is_gitlab() {
        #[derive(Deserialize)]
        struct Made {
            iid: u64,
            web_url: String,
        }
        let title = if pr.draft { format!("Draft: {}", pr.title) } else { pr.title.clone() };
        let request = json!({"source_branch": pr.head, "target_branch": base, "title": title, "description": body});
        let made: Made = t.call(reqwest::Method::POST, "/merge_requests", Some(&request)).await?;
        return Ok(json!({"number": made.iid, "url": made.web_url, "head": pr.head, "base": base}));
    }
    if t.is_bitbucket() {
        #[derive(Deserialize)]
        struct Made {
            id: u64,
            links: MadeLinks,
        }
        #[derive(Deserialize)]
        struct MadeLinks {
            html: BitbucketHref,
        }
        let request = json!({"title": pr.title, "description": body, "draft": pr.draft,
                             "source": {"branch": {"name": pr.head}}, "destination": {"branch": {"name": base}}});
        let made: Made = t.call(reqwest::Method::POST, "/pullrequests", Some(&request)).await?;
        return Ok(json!({"number": made.id, "url": made.links.html.href, "head": pr.head, "base": base}));
    }
    #[derive(Deserialize)]
    struct Made {
        number: u64,
        html_url: String,
    }
    let request = json!({"title": pr.title, "head": pr.head, "base": base, "body": body, "draft": pr.draft});
    let made: Made = t.call(reqwest::Method::POST, "/pulls", Some(&request)).await?;
    Ok(json!({"number": made.number, "url": made.html_url, "head": pr.head, "base": base}))
}

/// Comments `body` on pull (merge) request `number`; `{id, url}` of the comment.
pub async fn comment(t: Target<'_>, number: u64, body: &str) -> Result<Value, ForgeError> {
    if t.provider.kind == "azure_devops" {
        return crate::api::settings::azure_devops::comment(t, number, body).await;
    }
    if is_bitbucket_data_center(t.provider) {
        return crate::api::settings::bitbucket_dc::comment(t, number, body).await;
    }
    #[derive(Deserialize)]
    struct Made {
        id: u64,
        #[serde(default)]
        html_url: Option<String>,
    }
    if t.is_bitbucket() {
        let made: Made =
            t.call(reqwest::Method::POST, &format!("/pullrequests/{number}/comments"), Some(&json!({"content": {"raw": body}}))).await?;
        return Ok(json!({"id": made.id, "url": made.html_url}));
    }
    let path = if t.is_gitlab() { format!("/merge_requests/{number}/notes") } else { format!("/issues/{number}/comments") };
    let made: Made = t.call(reqwest::Method::POST, &path, Some(&json!({"body": body}))).await?;
    Ok(json!({"id": made.id, "url": made.html_url}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provider(kind: &str, host: &str, api_url: Option<&str>) -> GitProvider {
        GitProvider {
            kind: kind.into(),
            host: host.into(),
            username: "x".into(),
            token_sealed: String::new(),
            api_url: api_url.map(str::to_owned),
            created_ms: 0,
            updated_ms: 0,
        }
    }

    #[test]
    fn api_bases_follow_the_kind_and_host_unless_given() {
        assert_eq!(api_base(&provider("github", "github.com", None)).as_deref(), Some("https://api.github.com"));
        assert_eq!(api_base(&provider("github", "ghe.corp.example", None)).as_deref(), Some("https://ghe.corp.example/api/v3"));
        assert_eq!(api_base(&provider("gitlab", "gitlab.com", None)).as_deref(), Some("https://gitlab.com/api/v4"));
        assert_eq!(api_base(&provider("forgejo", "codeberg.org", None)).as_deref(), Some("https://codeberg.org/api/v1"));
        assert_eq!(api_base(&provider("bitbucket", "bitbucket.org", None)).as_deref(), Some("https://api.bitbucket.org/2.0"));
        let dc = provider("bitbucket", "git.acme.com", None);
        assert_eq!(api_base(&dc).as_deref(), Some("https://git.acme.com/rest/api/1.0"));
        assert!(is_bitbucket_data_center(&dc) && !is_bitbucket_data_center(&provider("bitbucket", "bitbucket.org", None)));
        assert_eq!(repository_name(&dc, "scm/APP/site".into()), "APP/site");
        assert_eq!(repository_name(&provider("gitlab", "gitlab.com", None), "scm/sub/app".into()), "scm/sub/app");
        assert_eq!(api_base(&provider("generic", "git.example", None)), None);
        assert_eq!(api_base(&provider("github", "x", Some("http://forge.example/api/"))).as_deref(), Some("http://forge.example/api"));
    }
}
