//! The `gitlab` kind: what in a GitLab webhook (issue, merge request and note hooks) asks for
//! work ([`read`]): a label added, or a note that mentions Halyard (the mention's rules are
//! [`halyard_platform::forge::mentions`]), with the discussion to reply in. GitLab's API (access
//! levels, award emoji, replies) is the platform's forge client's.

use serde_json::Value;

use halyard_platform::forge::{MARKER, ReactTo, mentions};

use crate::forge::Ask;

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

/// Label titles of a `changes.labels.previous|current` list.
fn titles(v: &Value) -> Vec<String> {
    v.as_array().into_iter().flatten().filter_map(|l| l["title"].as_str()).map(str::to_lowercase).collect()
}

/// The work a GitLab hook's `payload` asks for, or why it asks for none.
pub fn read(payload: &Value, label: &str, mention: &str) -> Result<Ask, String> {
    let kind = payload["object_kind"].as_str().unwrap_or_default();
    let sender = text(&payload["user"]["username"]);
    let attrs = &payload["object_attributes"];
    let base = |item: &Value, is_pull: bool| Ask {
        repository: text(&payload["project"]["path_with_namespace"]),
        number: item["iid"].as_u64().unwrap_or_default(),
        is_pull,
        head: item["source_branch"].as_str().map(str::to_owned),
        title: text(&item["title"]),
        body: text(&item["description"]),
        comment: None,
        url: text(&item["url"]),
        sender: sender.clone(),
        sender_id: payload["user"]["id"].as_u64(),
        sender_account: None,
        react_to: ReactTo::Issue(item["iid"].as_u64().unwrap_or_default()),
        discussion: None,
        project: payload["project"]["id"].as_u64(),
    };
    let ask = match kind {
        "issue" | "merge_request" => {
            let (before, now) = (titles(&payload["changes"]["labels"]["previous"]), titles(&payload["changes"]["labels"]["current"]));
            let wanted = label.to_lowercase();
            if !now.contains(&wanted) || before.contains(&wanted) {
                return Err(format!("the `{label}` label was not added"));
            }
            base(attrs, kind == "merge_request")
        }
        "note" => {
            let note = text(&attrs["note"]);
            if note.contains(MARKER) {
                return Err("Halyard's own comment".into());
            }
            if sender.eq_ignore_ascii_case(mention.trim_start_matches('@')) {
                return Err("written by the mentioned account itself".into());
            }
            if !mentions(&note, mention) {
                return Err(format!("no mention of {mention}"));
            }
            let mut ask = match attrs["noteable_type"].as_str().unwrap_or_default() {
                "Issue" => base(&payload["issue"], false),
                "MergeRequest" => base(&payload["merge_request"], true),
                other => return Err(format!("a note on a {other} is not acted on")),
            };
            ask.comment = Some(note);
            ask.discussion = attrs["discussion_id"].as_str().map(str::to_owned);
            ask.react_to = ReactTo::Note { note: attrs["id"].as_u64().unwrap_or_default() };
            ask
        }
        other => return Err(format!("GitLab's `{other}` hook is not acted on")),
    };
    if ask.repository.is_empty() || ask.number == 0 || ask.project.is_none() {
        return Err("the payload names no project or issue".into());
    }
    Ok(ask)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_additions_and_mentions_in_notes_are_read() {
        let project = json!({"id": 7, "path_with_namespace": "group/app"});
        let issue = json!({"iid": 3, "title": "Slow", "description": "It is slow", "url": "https://gitlab.example/group/app/-/issues/3"});
        let mut labeled = json!({"object_kind": "issue", "user": {"id": 11, "username": "dev"}, "project": project, "object_attributes": issue,
            "changes": {"labels": {"previous": [{"title": "bug"}], "current": [{"title": "bug"}, {"title": "Halyard"}]}}});
        let ask = read(&labeled, "halyard", "@halyard").unwrap();
        assert_eq!((ask.repository.as_str(), ask.number, ask.project, ask.sender_id), ("group/app", 3, Some(7), Some(11)));
        labeled["changes"]["labels"]["previous"] = json!([{"title": "halyard"}]);
        assert!(read(&labeled, "halyard", "@halyard").unwrap_err().contains("not added"));

        let note = json!({"object_kind": "note", "user": {"id": 11, "username": "dev"}, "project": project, "issue": issue,
            "object_attributes": {"id": 99, "note": "@halyard look", "noteable_type": "Issue", "discussion_id": "abc"}});
        let ask = read(&note, "halyard", "@halyard").unwrap();
        assert_eq!((ask.discussion.as_deref(), ask.react_to, ask.is_pull), (Some("abc"), ReactTo::Note { note: 99 }, false));
        let mut quoted = note.clone();
        quoted["object_attributes"]["note"] = "> @halyard look".into();
        assert!(read(&quoted, "halyard", "@halyard").unwrap_err().contains("no mention"));
        assert!(read(&json!({"object_kind": "push"}), "halyard", "@halyard").unwrap_err().contains("not acted on"));
    }
}
