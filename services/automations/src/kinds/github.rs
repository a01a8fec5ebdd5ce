//! The `github` kind (and `forgejo`, whose payloads are GitHub's but for labels and pull request
//! comments): what in a webhook asks for work ([`read`], [`read_forgejo`]). A mention counts as
//! [`mentions`] says, and never in Halyard's own comments (they carry [`MARKER`]). The calls
//! back on the forge (may the sender write, 👀, "on it", the summary) are the platform's
//! [`halyard_platform::forge::Forge`]'s.

use serde_json::{Value, json};

use halyard_platform::forge::{MARKER, ReactTo, mentions};

use crate::forge::Ask;

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

#[cfg(test)]
mod tests {
    use super::*;

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
