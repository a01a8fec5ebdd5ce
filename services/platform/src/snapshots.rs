//! Reading the environment snapshot bucket ([`halyard_protocol::environment::SNAPSHOT_BUCKET`]):
//! the entries whose keys match a filter, as the supervisors (quotas, the sweep) and the gateway
//! (the lists) need them.

use async_nats::jetstream::kv;
use futures::StreamExt;
use halyard_protocol::environment::Snapshot;

/// Every snapshot whose bucket key matches `filter` (`*` one token, `>` the rest), with its key.
/// (The bucket holds one entry per family: a listing reads its keys.)
pub async fn list(store: &kv::Store, filter: &str) -> Result<Vec<(String, Snapshot)>, String> {
    let mut keys = store.keys().await.map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    while let Some(key) = keys.next().await {
        let key = key.map_err(|e| e.to_string())?;
        if !matches(filter, &key) {
            continue;
        }
        if let Some(bytes) = store.get(&key).await.map_err(|e| e.to_string())? {
            match serde_json::from_slice::<Snapshot>(&bytes) {
                Ok(s) => out.push((key, s)),
                Err(e) => tracing::warn!(key, error = %e, "an environment snapshot entry that does not read; left alone"),
            }
        }
    }
    Ok(out)
}

/// Whether bucket key `key` matches subject filter `filter`.
fn matches(filter: &str, key: &str) -> bool {
    let mut keys = key.split('.');
    for f in filter.split('.') {
        match (f, keys.next()) {
            (">", Some(_)) => return true,
            ("*", Some(_)) => {}
            (f, Some(k)) if f == k => {}
            _ => return false,
        }
    }
    keys.next().is_none()
}

#[cfg(test)]
mod tests {
    #[test]
    fn filters_match_as_subjects_do() {
        assert!(super::matches("*.ab.*", "_.ab.f00"));
        assert!(!super::matches("*.ab.*", "_.ac.f00"));
        assert!(super::matches("or.*.*", "or.ab.f00"));
        assert!(super::matches(">", "or.ab.f00"));
        assert!(!super::matches("*.ab", "_.ab.f00"));
    }
}
