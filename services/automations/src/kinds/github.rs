//! The `github` kind: what in a GitHub webhook asks for work ([`read`]), and the calls Halyard
//! makes back on the forge with the owner's git provider token ([`Forge`]): asking whether the
//! sender may write to the repository (never assumed), 👀 on what asked, "on it" with a link to
//! the conversation, and the summary when a run ends.
//!
//! A mention counts when it stands as a word of its own (not inside an e-mail address or a
//! longer name), outside quoted lines and code blocks (a quote of an earlier request is not a new
//! one), and never in Halyard's own comments (they carry [`MARKER`]); [`mentions`] is shared
//! with the other forges.

use halyard_protocol::user::GitProvider;
use serde_json::{Value, json};

use crate::api::Api;
use crate::forge::{Ask, MARKER, ReactTo};

/// Permissions that let a sender ask for work.
const WRITERS: [&str; 3] = ["admin", "maintain", "write"];

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

/// The work `event`'s `payload` asks for, or why it asks for none.
pub fn read(event: &str, payload: &Value, label: &str, mention: &str) -> Result<Ask, String> {
    let action = payload["action"].as_str().unwrap_or_default();
    let sender = text(&payload["sender"]["login"]);
    let repository = text(&payload["repository"]["full_name"]);
    let thread = |item: &Value, is_pull: bool| Ask {
        repository: repository.clone(),
        number: item["number"].as_u64().unwrap_or_default(),
        is_pull,
        head: item["head"]["ref"].as_str().map(str::to_owned),
        title: text(&item["title"]),
        body: text(&item["body"]),
        comment: None,
        url: text(&item["html_url"]),
        sender: sender.clone(),
        sender_id: payload["sender"]["id"].as_u64(),
        sender_account: None,
        react_to: ReactTo::Issue(item["number"].as_u64().unwrap_or_default()),
        discussion: None,
        project: None,
    };
    let mentioned = |body: &Value| -> Result<String, String> {
        let body = text(body);
        if body.contains(MARKER) {
            return Err("Halyard's own comment".into());
        }
        if sender.eq_ignore_ascii_case(mention.trim_start_matches('@')) {
            return Err("written by the mentioned account itself".into());
        }
        if !mentions(&body, mention) { Err(format!("no mention of {mention}")) } else { Ok(body) }
    };
    let ask = match (event, action) {
        ("ping", _) => return Err("GitHub's ping: the hook is set up".into()),
        ("issues", "labeled") | ("pull_request", "labeled") => {
            let added = text(&payload["label"]["name"]);
            if !added.eq_ignore_ascii_case(label) {
                return Err(format!("the label added ({added}) is not `{label}`"));
            }
            if event == "issues" { thread(&payload["issue"], false) } else { thread(&payload["pull_request"], true) }
        }
        ("issue_comment", "created") => {
            let comment = mentioned(&payload["comment"]["body"])?;
            let issue = &payload["issue"];
            let mut ask = thread(issue, issue.get("pull_request").is_some_and(|p| !p.is_null()));
            ask.comment = Some(comment);
            ask.react_to = ReactTo::IssueComment(payload["comment"]["id"].as_u64().unwrap_or_default());
            ask
        }
        ("pull_request_review_comment", "created") => {
            let comment = mentioned(&payload["comment"]["body"])?;
            let mut ask = thread(&payload["pull_request"], true);
            ask.comment = Some(comment);
            ask.react_to = ReactTo::ReviewComment(payload["comment"]["id"].as_u64().unwrap_or_default());
            ask
        }
        ("pull_request_review", "submitted") => {
            let comment = mentioned(&payload["review"]["body"])?;
            let mut ask = thread(&payload["pull_request"], true);
            ask.comment = Some(comment);
            ask.react_to = ReactTo::Nothing;
            ask
        }
        (event, action) => return Err(format!("GitHub's `{event}` `{action}` is not acted on")),
    };
    if ask.repository.is_empty() || ask.number == 0 {
        return Err("the payload names no repository or issue".into());
    }
    Ok(ask)
}

/// The work a Forgejo or Gitea webhook asks for: GitHub's payloads but for labels (`label_updated`
/// with the issue's labels as they are now: the label must be among them) and comments on pull
/// requests (their own event, `pull_request_comment`).
pub fn read_forgejo(event: &str, payload: &Value, label: &str, mention: &str) -> Result<Ask, String> {
    let action = payload["action"].as_str().unwrap_or_default();
    match (event, action) {
        ("issues" | "pull_request", "label_updated") => {
            let item = if event == "issues" { &payload["issue"] } else { &payload["pull_request"] };
            let has =
                item["labels"].as_array().into_iter().flatten().any(|l| l["name"].as_str().is_some_and(|n| n.eq_ignore_ascii_case(label)));
            if !has {
                return Err(format!("the labels do not include `{label}`"));
            }
            let mut as_github = payload.clone();
            as_github["action"] = "labeled".into();
            as_github["label"] = json!({"name": label});
            read(event, &as_github, label, mention)
        }
        ("pull_request_comment", _) => {
            let mut ask = read("issue_comment", payload, label, mention)?;
            ask.is_pull = true;
            Ok(ask)
        }
        _ => {
            let mut ask = read(event, payload, label, mention)?;
            ask.is_pull |= payload["is_pull"] == true;
            Ok(ask)
        }
    }
}

/// Whether `text` mentions `mention` (`@name`), case-insensitive, as a word of its own, outside
/// quoted lines and fenced code.
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

/// GitHub's REST API (or Forgejo's, which has GitHub's paths), with the owner's token.
pub struct Client {
    api: Api,
}

impl Client {
    /// The API of `provider` (its `api_url`, else GitHub's for its host, or Forgejo's).
    pub fn new(provider: &GitProvider, token: String, allow: &[String]) -> Result<Self, String> {
        let forgejo = provider.kind == "forgejo";
        let api = match (&provider.api_url, provider.host.as_str()) {
            (Some(url), _) => url.trim_end_matches('/').to_owned(),
            (None, host) if forgejo => format!("https://{host}/api/v1"),
            (None, "github.com") => "https://api.github.com".to_owned(),
            (None, host) => format!("https://{host}/api/v3"),
        };
        // Forgejo and Gitea take `token <t>`; GitHub a bearer token.
        let authorization = if forgejo { format!("token {token}") } else { format!("Bearer {token}") };
        let headers = vec![
            ("Authorization", authorization),
            ("Accept", "application/vnd.github+json".into()),
            ("X-GitHub-Api-Version", "2022-11-28".into()),
        ];
        Ok(Self { api: Api::new(if forgejo { "Forgejo" } else { "GitHub" }, api, headers, allow)? })
    }

    /// Whether `login` may write to `repository`.
    pub async fn can_write(&self, repository: &str, login: &str) -> Result<bool, String> {
        let v = self.api.send(reqwest::Method::GET, &format!("/repos/{repository}/collaborators/{login}/permission"), None).await?;
        Ok(WRITERS.contains(&v["permission"].as_str().unwrap_or_default()) || v["role_name"] == "maintain")
    }

    /// A pull request's head branch.
    pub async fn head(&self, repository: &str, number: u64) -> Result<String, String> {
        let v = self.api.send(reqwest::Method::GET, &format!("/repos/{repository}/pulls/{number}"), None).await?;
        v["head"]["ref"].as_str().map(str::to_owned).ok_or_else(|| "the pull request has no head branch".into())
    }

    /// 👀 on what asked.
    pub async fn react(&self, repository: &str, to: ReactTo) -> Result<(), String> {
        let path = match to {
            ReactTo::Issue(n) => format!("/repos/{repository}/issues/{n}/reactions"),
            ReactTo::IssueComment(id) => format!("/repos/{repository}/issues/comments/{id}/reactions"),
            ReactTo::ReviewComment(id) => format!("/repos/{repository}/pulls/comments/{id}/reactions"),
            ReactTo::Note { .. } | ReactTo::Nothing => return Ok(()),
        };
        self.api.send(reqwest::Method::POST, &path, Some(json!({"content": "eyes"}))).await.map(|_| ())
    }

    /// A comment on the issue or pull request (marked as Halyard's).
    pub async fn comment(&self, repository: &str, number: u64, text: &str) -> Result<(), String> {
        let body = json!({"body": format!("{text}\n\n{MARKER}")});
        self.api.send(reqwest::Method::POST, &format!("/repos/{repository}/issues/{number}/comments"), Some(body)).await.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn labels_and_comments_are_read_and_the_rest_is_said_why() {
        let issue = json!({"number": 42, "title": "Flaky", "body": "fails", "html_url": "https://github.com/o/r/issues/42"});
        let base = json!({"repository": {"full_name": "o/r"}, "sender": {"login": "alice"}, "issue": issue});
        let mut labeled = base.clone();
        labeled["action"] = "labeled".into();
        labeled["label"] = json!({"name": "Halyard"});
        let ask = read("issues", &labeled, "halyard", "@halyard").unwrap();
        assert_eq!((ask.repository.as_str(), ask.number, ask.is_pull, ask.react_to), ("o/r", 42, false, ReactTo::Issue(42)));
        labeled["label"]["name"] = "bug".into();
        assert!(read("issues", &labeled, "halyard", "@halyard").unwrap_err().contains("not `halyard`"));

        let mut comment = base.clone();
        comment["action"] = "created".into();
        comment["comment"] = json!({"id": 7, "body": "@halyard please fix"});
        comment["issue"]["pull_request"] = json!({"url": "x"});
        let ask = read("issue_comment", &comment, "halyard", "@halyard").unwrap();
        assert!(ask.is_pull && ask.comment.as_deref() == Some("@halyard please fix") && ask.react_to == ReactTo::IssueComment(7));
        comment["comment"]["body"] = format!("@halyard on it {MARKER}").into();
        assert_eq!(read("issue_comment", &comment, "halyard", "@halyard").unwrap_err(), "Halyard's own comment");
        comment["comment"]["body"] = "> @halyard please fix\nagreed".into();
        assert!(read("issue_comment", &comment, "halyard", "@halyard").unwrap_err().contains("no mention"));
        assert!(read("ping", &base, "halyard", "@halyard").unwrap_err().contains("ping"));
        assert!(read("issues", &json!({"action": "opened"}), "halyard", "@halyard").unwrap_err().contains("not acted on"));
    }
}
