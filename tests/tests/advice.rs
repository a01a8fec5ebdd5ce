#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! Advice that can be followed: every route an error message (or any other text of the services)
//! tells a user to call exists in the served OpenAPI document with that method, and every
//! `HALYARD_*` setting it names is one Halyard reads. Walks the services' sources, so that a new
//! message is checked the day it is written.

use std::path::Path;

use serde_json::Value;

/// Settings read outside the server's configuration: by the binary before it, the CLI, the
/// scripts and the tests.
const READ_ELSEWHERE: &[&str] =
    &["HALYARD_CONFIG", "HALYARD_URL", "HALYARD_API_KEY", "HALYARD_NATS_SERVER", "HALYARD_BLESS", "HALYARD_AGENTS"];
/// Words that look like settings and are not: a constant's name, lines a process prints.
const NOT_SETTINGS: &[&str] = &[
    // The placeholders for the LLM relay's URL, the run's token and the profile's model in a
    // third-party agent's environment.
    "HALYARD_LLM_BASE",
    "HALYARD_LLM_TOKEN",
    "HALYARD_LLM_MODEL",
    "HALYARD_MCP_SERVER",
    "HALYARD_READY",
    "HALYARD_EXECUTOR_LISTENING",
    "HALYARD_FORWARDING",
    "HALYARD_FORWARDING_READY",
    "HALYARD_FAULT_HIT",
];

fn sources(dir: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            // A file's tests may name wrong things on purpose (to see them refused).
            let text = std::fs::read_to_string(&path).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap_or_default().to_owned();
            out.push((path.display().to_string(), code));
        }
    }
}

/// `METHOD /api/v1/...` mentions in `text`, cut at what ends a path in prose.
fn routes(text: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for method in ["GET", "POST", "PUT", "PATCH", "DELETE"] {
        let needle = format!("{method} /api/v1/");
        let mut rest = text;
        while let Some(at) = rest.find(&needle) {
            let tail = &rest[at + method.len() + 1..];
            let end =
                tail.find(|c: char| c.is_whitespace() || matches!(c, '`' | '"' | '\'' | ')' | ',' | ';' | '\\')).unwrap_or(tail.len());
            let path = tail[..end].trim_end_matches(['.', ':']).split('?').next().unwrap_or_default().to_owned();
            found.push((method.to_owned(), path));
            rest = &tail[end..];
        }
    }
    found
}

/// Whether the documented `template` (`/api/v1/conversations/{id}/retry`) matches a mentioned
/// `path`, whose variable parts are written `<name>`, `{name}` or `...`.
fn matches(template: &str, path: &str) -> bool {
    let (t, p): (Vec<&str>, Vec<&str>) = (template.split('/').collect(), path.trim_end_matches('/').split('/').collect());
    t.len() == p.len()
        && t.iter().zip(&p).all(|(t, p)| {
            t == p || (t.starts_with('{') && (p.starts_with('<') || p.starts_with('{') || p.contains("...") || !p.is_empty()))
        })
}

#[test]
fn every_route_and_setting_named_in_advice_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let openapi: Value = serde_json::to_value(halyard_gateway::openapi_document()).unwrap();
    let documented: Vec<(String, String)> = openapi["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, ops)| ops.as_object().unwrap().keys().map(move |m| (m.to_uppercase(), path.clone())))
        .collect();
    let mut files = Vec::new();
    sources(&root.join("services"), &mut files);
    assert!(files.len() > 50, "the walk found the sources");

    let mut named = 0;
    let mut wrong = Vec::new();
    for (file, text) in &files {
        for (method, path) in routes(text) {
            named += 1;
            if !documented.iter().any(|(m, t)| *m == method && matches(t, &path)) {
                wrong.push(format!("{file}: {method} {path}"));
            }
        }
    }
    assert!(named > 20, "the walk found the routes advice names ({named})");
    assert!(wrong.is_empty(), "advice names routes that do not exist:\n{}", wrong.join("\n"));

    let mut unknown = Vec::new();
    for (file, text) in &files {
        let mut rest = text.as_str();
        while let Some(at) = rest.find("HALYARD_") {
            // Part of a longer word (`__HALYARD_SKILL__`, a subject `...NEXT.HALYARD_...`) is
            // no setting.
            let glued = rest[..at].chars().next_back().is_some_and(|c| c == '_' || c == '.' || c.is_ascii_alphanumeric());
            let tail = &rest[at..];
            let end = tail.find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')).unwrap_or(tail.len());
            let name = tail[..end].trim_end_matches('_');
            // `HALYARD_` alone, as a prefix in code, names nothing.
            if !glued && name.len() > "HALYARD_".len() && !NOT_SETTINGS.contains(&name) {
                let short = &name["HALYARD_".len()..];
                if !halyard_platform::config::env_names().contains(&short) && !READ_ELSEWHERE.contains(&name) {
                    unknown.push(format!("{file}: {name}"));
                }
            }
            rest = &tail[end.max(1)..];
        }
    }
    unknown.sort();
    unknown.dedup();
    assert!(unknown.is_empty(), "texts name settings Halyard does not read:\n{}", unknown.join("\n"));
}

#[test]
fn the_walk_finds_what_it_should() {
    assert_eq!(
        routes("store it again with PUT /api/v1/git-providers/work.\", and GET /api/v1/repositories?q=x"),
        vec![("GET".to_owned(), "/api/v1/repositories".to_owned()), ("PUT".to_owned(), "/api/v1/git-providers/work".to_owned())]
    );
    assert!(matches("/api/v1/conversations/{id}/retry", "/api/v1/conversations/<conv>/retry"));
    assert!(!matches("/api/v1/conversations/{id}/retry", "/api/v1/conversations/<conv>/restore"));
    assert!(!matches("/api/v1/conversations", "/api/v1/conversations/x"));
}
