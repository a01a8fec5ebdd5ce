//! The REST APIs of the forges users keep their repositories on, called with a user's stored
//! token: GitHub's (github.com, Enterprise, and Forgejo and Gitea, which speak its paths), GitLab's,
//! Bitbucket's (Cloud, and Data Center's REST 1.0) and Azure DevOps'. One client for everything
//! Halyard asks of a forge, whoever asks:
//!
//! - the gateway: the repositories a token reaches (the picker), a repository's branches, a new
//!   pull (merge) request and a comment on one (Halyard's own MCP tools);
//! - the automations service: whether the person who asked may write to the repository (never
//!   assumed), a pull request's head branch, 👀 on what asked, and replies on the thread (marked
//!   as Halyard's, so that a quote of the mention in them never triggers again).
//!
//! A forge's kind is a [`ForgeKind`]; each kind's calls are in its own module, over one checked
//! client ([`api`]). What a mention is ([`mentions`]) is decided here once for every forge.

mod api;
mod azure_devops;
mod bitbucket;
mod github;
mod gitlab;
mod types;

use serde_json::Value;

use halyard_protocol::automation::Thread;
use halyard_protocol::user::GitProvider;

pub use api::{Api, ForgeError};
pub use types::{BITBUCKET_TOKEN_USER, Branch, Branches, Forge, ForgeKind, MARKER, NewPullRequest, ReactTo, Repository, Sender};

use types::Place;

/// The REST API base URL of `p`, if its kind has one.
pub fn api_base(p: &GitProvider) -> Option<String> {
    if let Some(url) = &p.api_url {
        return Some(url.trim_end_matches('/').to_owned());
    }
    let host = p.host.as_str();
    Some(match ForgeKind::of(p)? {
        ForgeKind::Github if host == "github.com" => "https://api.github.com".into(),
        ForgeKind::Github => format!("https://{host}/api/v3"),
        ForgeKind::Gitlab => format!("https://{host}/api/v4"),
        ForgeKind::Forgejo => format!("https://{host}/api/v1"),
        // Bitbucket Cloud's API is on its own host; any other host is a Data Center's.
        ForgeKind::BitbucketCloud => "https://api.bitbucket.org/2.0".into(),
        ForgeKind::BitbucketDataCenter => format!("https://{host}/rest/api/1.0"),
        // Azure DevOps: the host; an `api_url` may name the organization whose repositories the
        // picker lists (`https://dev.azure.com/<organization>`).
        ForgeKind::AzureDevops => format!("https://{host}"),
    })
}

/// The repository a clone URL's `path` names on `p`: Data Center serves `PROJECT/repository`
/// under `/scm/`.
pub fn repository_name(p: &GitProvider, path: String) -> String {
    match path.strip_prefix("scm/") {
        Some(rest) if ForgeKind::of(p) == Some(ForgeKind::BitbucketDataCenter) => rest.to_owned(),
        _ => path,
    }
}

impl Forge {
    /// The client of `provider`'s forge, with `token`, reaching only what `allow` lets through.
    pub fn new(provider: &GitProvider, token: &str, allow: &[String]) -> Result<Self, ForgeError> {
        let kind = ForgeKind::of(provider).ok_or_else(|| ForgeError::NoApi(provider.kind.clone()))?;
        let base = api_base(provider).ok_or_else(|| ForgeError::NoApi(provider.kind.clone()))?;
        let headers = auth_headers(kind, provider, token);
        let (base, identities) = match kind {
            ForgeKind::AzureDevops => azure_devops::bases(&base),
            _ => (base, None),
        };
        let identities = identities.map(|b| Api::new(&b, headers.clone(), allow)).transpose()?;
        Ok(Self { kind, api: Api::new(&base, headers, allow)?, identities, provider: provider.clone() })
    }

    /// The repositories the token reaches whose full name contains `q` (any case), most
    /// recently updated first, as provider `name`'s.
    pub async fn repositories(&self, name: &str, q: &str) -> Result<Vec<Repository>, ForgeError> {
        let found = match self.kind {
            ForgeKind::Github | ForgeKind::Forgejo => github::repositories(self).await?,
            ForgeKind::Gitlab => gitlab::repositories(self, q).await?,
            ForgeKind::BitbucketCloud | ForgeKind::BitbucketDataCenter => bitbucket::repositories(self, q).await?,
            ForgeKind::AzureDevops => azure_devops::repositories(self).await?,
        };
        let q = q.to_lowercase();
        Ok(found
            .into_iter()
            .filter(|r| q.is_empty() || r.full_name.to_lowercase().contains(&q))
            .map(|r| Repository { provider: name.to_owned(), ..r })
            .collect())
    }

    /// The repository's branches (the first hundred) and which is the default.
    pub async fn branches(&self, repository: &str) -> Result<Branches, ForgeError> {
        let (branches, default) = match self.kind {
            ForgeKind::Github | ForgeKind::Forgejo => github::branches(self, repository).await?,
            ForgeKind::Gitlab => gitlab::branches(self, repository).await?,
            ForgeKind::BitbucketCloud | ForgeKind::BitbucketDataCenter => bitbucket::branches(self, repository).await?,
            ForgeKind::AzureDevops => azure_devops::branches(self, repository).await?,
        };
        Ok(Branches { repository: repository.to_owned(), default_branch: default, branches })
    }

    /// The repository's default branch.
    pub async fn default_branch(&self, repository: &str) -> Result<String, ForgeError> {
        match self.kind {
            ForgeKind::Github | ForgeKind::Forgejo => github::default_branch(self, repository).await,
            ForgeKind::Gitlab => gitlab::default_branch(self, repository).await,
            ForgeKind::BitbucketCloud | ForgeKind::BitbucketDataCenter => bitbucket::default_branch(self, repository).await,
            ForgeKind::AzureDevops => azure_devops::default_branch(self, repository).await,
        }
    }

    /// Opens `pr`; what the forge made: `{number, url, head, base}`.
    pub async fn create_pull_request(&self, repository: &str, pr: &NewPullRequest) -> Result<Value, ForgeError> {
        let base = match &pr.base {
            Some(b) => b.clone(),
            None => self.default_branch(repository).await?,
        };
        let (number, url) = match self.kind {
            ForgeKind::Github | ForgeKind::Forgejo => github::create_pull_request(self, repository, pr, &base).await?,
            ForgeKind::Gitlab => gitlab::create_pull_request(self, repository, pr, &base).await?,
            ForgeKind::BitbucketCloud | ForgeKind::BitbucketDataCenter => {
                bitbucket::create_pull_request(self, repository, pr, &base).await?
            }
            ForgeKind::AzureDevops => azure_devops::create_pull_request(self, repository, pr, &base).await?,
        };
        Ok(serde_json::json!({"number": number, "url": url, "head": pr.head, "base": base}))
    }

    /// Comments `body` on pull (merge) request `number`, as the user (not marked); `{id, url}`.
    pub async fn comment_on_pull(&self, repository: &str, number: u64, body: &str) -> Result<Value, ForgeError> {
        self.comment(Place { repository, number, is_pull: true, discussion: None }, body).await
    }

    /// Halyard's reply on `thread` (in its discussion, where the forge has them), marked as
    /// Halyard's.
    pub async fn reply(&self, thread: &Thread, text: &str) -> Result<(), ForgeError> {
        let place = Place {
            repository: &thread.repository,
            number: thread.number,
            is_pull: thread.is_pull,
            discussion: thread.discussion.as_deref(),
        };
        self.comment(place, &format!("{text}\n\n{MARKER}")).await.map(|_| ())
    }

    async fn comment(&self, place: Place<'_>, body: &str) -> Result<Value, ForgeError> {
        match self.kind {
            ForgeKind::Github | ForgeKind::Forgejo => github::comment(self, place, body).await,
            ForgeKind::Gitlab => gitlab::comment(self, place, body).await,
            ForgeKind::BitbucketCloud | ForgeKind::BitbucketDataCenter => bitbucket::comment(self, place, body).await,
            ForgeKind::AzureDevops => azure_devops::comment(self, place, body).await,
        }
    }

    /// Whether `sender` may write to `repository`.
    pub async fn can_write(&self, repository: &str, sender: Sender<'_>) -> Result<bool, ForgeError> {
        let account = sender.account.unwrap_or_default();
        let answer = match self.kind {
            ForgeKind::Github | ForgeKind::Forgejo => github::can_write(self, repository, sender.login).await,
            ForgeKind::Gitlab => gitlab::can_write(self, repository, sender.id.unwrap_or_default()).await,
            ForgeKind::BitbucketCloud | ForgeKind::BitbucketDataCenter => bitbucket::can_write(self, repository, account).await,
            ForgeKind::AzureDevops => azure_devops::can_write(self, repository, account).await,
        };
        match (self.kind, answer) {
            // GitLab and Bitbucket Cloud answer 404 for someone who is no member of the project or
            // repository at all; elsewhere a 404 means the repository is out of the token's reach,
            // which is the caller's to report.
            (ForgeKind::Gitlab | ForgeKind::BitbucketCloud, Err(ForgeError::NotFound(_))) => Ok(false),
            (_, other) => other,
        }
    }

    /// A pull (merge) request's head branch.
    pub async fn head(&self, repository: &str, number: u64) -> Result<String, ForgeError> {
        let head = match self.kind {
            ForgeKind::Github | ForgeKind::Forgejo => github::head(self, repository, number).await?,
            ForgeKind::Gitlab => gitlab::head(self, repository, number).await?,
            ForgeKind::BitbucketCloud | ForgeKind::BitbucketDataCenter => bitbucket::head(self, repository, number).await?,
            ForgeKind::AzureDevops => azure_devops::head(self, repository, number).await?,
        };
        head.ok_or_else(|| ForgeError::Malformed("the pull request has no head branch".into()))
    }

    /// 👀 on what asked (`number`: the issue or pull request it is on).
    pub async fn react(&self, repository: &str, number: u64, is_pull: bool, to: ReactTo) -> Result<(), ForgeError> {
        match self.kind {
            ForgeKind::Github | ForgeKind::Forgejo => github::react(self, repository, to).await,
            ForgeKind::Gitlab => gitlab::react(self, repository, number, is_pull, to).await,
            // Bitbucket and Azure DevOps take no reactions: the reply is the acknowledgement.
            ForgeKind::BitbucketCloud | ForgeKind::BitbucketDataCenter | ForgeKind::AzureDevops => Ok(()),
        }
    }
}

/// The headers that carry `token` to a forge of `kind`, as it wants them.
fn auth_headers(kind: ForgeKind, p: &GitProvider, token: &str) -> Vec<(&'static str, String)> {
    use base64::Engine;
    let basic = |user: &str| format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{user}:{token}")));
    match kind {
        ForgeKind::Gitlab => vec![("PRIVATE-TOKEN", token.to_owned())],
        ForgeKind::Forgejo => vec![("Authorization", format!("token {token}")), ("Accept", "application/json".into())],
        // An app password or API token goes with the account's name as basic auth; a workspace
        // or repository access token (no name given) as a bearer token.
        ForgeKind::BitbucketCloud | ForgeKind::BitbucketDataCenter if p.username.is_empty() || p.username == BITBUCKET_TOKEN_USER => {
            vec![("Authorization", format!("Bearer {token}"))]
        }
        ForgeKind::BitbucketCloud | ForgeKind::BitbucketDataCenter => vec![("Authorization", basic(&p.username))],
        ForgeKind::AzureDevops => vec![("Authorization", basic(if p.username.is_empty() { "pat" } else { &p.username }))],
        ForgeKind::Github => vec![
            ("Authorization", format!("Bearer {token}")),
            ("Accept", "application/vnd.github+json".into()),
            ("X-GitHub-Api-Version", "2022-11-28".into()),
        ],
    }
}

/// Whether `text` mentions `mention` (`@name`), case-insensitive, as a word of its own (not
/// inside an e-mail address or a longer name), outside quoted lines and fenced code (a quote of
/// an earlier request is not a new one).
pub fn mentions(text: &str, mention: &str) -> bool {
    let wanted = mention.to_lowercase();
    let mut fenced = false;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fenced = !fenced;
            continue;
        }
        if fenced || trimmed.starts_with('>') {
            continue;
        }
        let lower = line.to_lowercase();
        let mut from = 0;
        while let Some(i) = lower[from..].find(&wanted) {
            let at = from + i;
            let before = lower[..at].chars().next_back();
            let after = lower[at + wanted.len()..].chars().next();
            // `a@halyard.dev` is an address, `@halyard-bot` another name, `` `@halyard` `` code.
            let free_before = before.is_none_or(|c| !(c.is_alphanumeric() || "._-+/`@".contains(c)));
            let free_after = after.is_none_or(|c| !(c.is_alphanumeric() || "-_/`".contains(c)));
            if free_before && free_after {
                return true;
            }
            from = at + wanted.len();
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn provider(kind: &str, host: &str, api_url: Option<&str>) -> GitProvider {
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
        assert_eq!(ForgeKind::of(&dc), Some(ForgeKind::BitbucketDataCenter));
        assert_eq!(ForgeKind::of(&provider("bitbucket", "bitbucket.org", None)), Some(ForgeKind::BitbucketCloud));
        assert_eq!(repository_name(&dc, "scm/APP/site".into()), "APP/site");
        assert_eq!(repository_name(&provider("gitlab", "gitlab.com", None), "scm/sub/app".into()), "scm/sub/app");
        assert_eq!(api_base(&provider("generic", "git.example", None)), None);
        assert_eq!(api_base(&provider("github", "x", Some("http://forge.example/api/"))).as_deref(), Some("http://forge.example/api"));
    }

    #[test]
    fn a_mention_counts_only_as_a_word_of_its_own_outside_quotes_and_code() {
        for yes in ["@halyard fix this", "Hey @Halyard, please", "(@halyard)", "please\n@HALYARD: go", "cc @halyard."] {
            assert!(mentions(yes, "@halyard"), "{yes:?}");
        }
        for no in [
            "write to ops@halyard.dev",
            "@halyard-bot did it",
            "@halyardx",
            "> @halyard fix this\nthanks",
            "```\n@halyard\n```",
            "`@halyard` is the name",
            "nothing here",
        ] {
            assert!(!mentions(no, "@halyard"), "{no:?}");
        }
    }
}
