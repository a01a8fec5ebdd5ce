//! Builds, once, the indexes added to the read models after stores were first written: an
//! organization's copies of its audit records (`a`), its shared conversations (`g`), and the
//! usage rows ordered by day (`X` for organizations, replacing `W`; `Y` for the deployment).
//! The projection keeps them from then on; this gives a store written before them the same
//! rows, so that no read has to fall back to a scan. A version under `m` says it was done.

use serde::Deserialize;

use halyard_protocol::ConversationId;
use halyard_protocol::org::Visibility;

use super::layout::{self, AuditScope, meta_key};
use super::rows::AuditRow;

/// The indexes' version this code keeps.
const VERSION: u64 = 2;

/// Of a conversation's view, what its organization's index needs.
#[derive(Deserialize)]
struct SharedView {
    #[serde(default)]
    created_ms: i64,
    #[serde(default)]
    visibility: Visibility,
    #[serde(default)]
    start_request: Option<OrgOf>,
}

#[derive(Deserialize)]
struct OrgOf {
    #[serde(default)]
    org: Option<String>,
}

/// Writes the indexes a store from before [`VERSION`] lacks (nothing, once done).
pub fn build(tree: &sled::Tree) -> Result<(), sled::Error> {
    let done = tree.get(meta_key("indexes"))?.and_then(|v| <[u8; 8]>::try_from(v.as_ref()).ok()).map_or(0, u64::from_be_bytes);
    if done >= VERSION {
        return Ok(());
    }
    let all = AuditScope::all();
    for entry in tree.scan_prefix(all.prefix()) {
        let (key, row) = entry?;
        if let Some(org) = serde_json::from_slice::<AuditRow>(&row).ok().and_then(|r| r.org) {
            tree.insert(AuditScope::org(&org).same_record(&key), row)?;
        }
    }
    for entry in tree.scan_prefix([b'c']) {
        let (key, view) = entry?;
        let Ok(view) = serde_json::from_slice::<SharedView>(&view) else { continue };
        let (Some(org), Ok(id)) = (view.start_request.and_then(|r| r.org), <[u8; 16]>::try_from(&key[1..])) else { continue };
        if view.visibility == Visibility::Org {
            let id = ConversationId(uuid::Uuid::from_bytes(id));
            tree.insert(layout::org_shared_key(&org, view.created_ms, id), &id.as_bytes()[..])?;
        }
    }
    for entry in tree.scan_prefix([b'W']) {
        let (key, row) = entry?;
        if let Some((org, user, day, model)) = old_org_usage_parts(&key) {
            tree.insert(layout::org_usage_key(&org, &user, day, &model), row)?;
        }
        tree.remove(key)?;
    }
    for entry in tree.scan_prefix([b'V']) {
        let (key, row) = entry?;
        if let Some((user, day, model)) = user_of(&key).and_then(|u| layout::UsageScope::User(&u).parts(&key)) {
            tree.insert(layout::all_usage_key(&user, day, &model), row)?;
        }
    }
    tree.insert(meta_key("indexes"), &VERSION.to_be_bytes()[..])?;
    tree.flush()?;
    Ok(())
}

/// The user a `V` key is of (`V`, user, 0, ...).
fn user_of(key: &[u8]) -> Option<String> {
    let rest = key.strip_prefix(b"V")?;
    let zero = rest.iter().position(|b| *b == 0)?;
    String::from_utf8(rest[..zero].to_vec()).ok()
}

/// An old organization usage key's parts: `W`, org, 0, user, 0, day, model.
fn old_org_usage_parts(key: &[u8]) -> Option<(String, String, i64, String)> {
    let rest = key.strip_prefix(b"W")?;
    let zero = rest.iter().position(|b| *b == 0)?;
    let org = String::from_utf8(rest[..zero].to_vec()).ok()?;
    let mut user_key = vec![b'V'];
    user_key.extend_from_slice(&rest[zero + 1..]);
    let user = user_of(&user_key)?;
    let (_, day, model) = layout::UsageScope::User(&user).parts(&user_key)?;
    Some((org, user, day, model))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_from_before_gets_its_indexes_once() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let tree = db.open_tree("t").unwrap();
        let day = 20_419 * layout::DAY_MS;
        let row = br#"{"llm_calls":3}"#;
        // The old organization layout: W, org, 0, user, 0, day, model.
        let mut old = b"Wacme\0".to_vec();
        old.extend_from_slice(&layout::usage_key("bob", day, "m")[1..]);
        tree.insert(&old, &row[..]).unwrap();
        tree.insert(layout::usage_key("bob", day, "m"), &row[..]).unwrap();
        let audit =
            serde_json::json!({"time": "", "actor": "a", "action": "x.y", "target": "", "org": "acme", "detail": null, "client": null});
        tree.insert(AuditScope::all().key(5_000, 7), serde_json::to_vec(&audit).unwrap()).unwrap();
        let id = ConversationId::new();
        let view = serde_json::json!({"created_ms": 42, "visibility": "org", "start_request": {"org": "acme"}});
        tree.insert(layout::conv_key(id), serde_json::to_vec(&view).unwrap()).unwrap();

        build(&tree).unwrap();
        assert!(!tree.contains_key(&old).unwrap(), "the old layout is gone");
        assert_eq!(tree.get(layout::org_usage_key("acme", "bob", day, "m")).unwrap().as_deref(), Some(&row[..]));
        assert_eq!(tree.get(layout::all_usage_key("bob", day, "m")).unwrap().as_deref(), Some(&row[..]));
        assert!(tree.contains_key(AuditScope::org("acme").key(5_000, 7)).unwrap());
        assert!(tree.contains_key(layout::org_shared_key("acme", 42, id)).unwrap());

        // Done once: a row the projection removed since is not put back.
        tree.remove(layout::org_shared_key("acme", 42, id)).unwrap();
        build(&tree).unwrap();
        assert!(!tree.contains_key(layout::org_shared_key("acme", 42, id)).unwrap());
    }
}
