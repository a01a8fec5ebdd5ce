//! A repository's own environment: `.devcontainer/devcontainer.json` (or `.devcontainer.json`),
//! read as the Dev Container spec writes it (JSON with comments and trailing commas), the subset
//! Halyard runs: `image`, `build` (`dockerfile`, `context`, `args`), `containerEnv`,
//! `remoteUser`, `onCreateCommand`, `updateContentCommand` and `postCreateCommand` (setup, run
//! once and kept in the snapshot), `postStartCommand` (every start), `forwardPorts` (the
//! sandbox's ports served as apps: numbers, or `localhost:<n>`; another host's ports, which a
//! compose setup would name, are refused in words) and `customizations.halyard.cache_key` (files
//! whose contents key the snapshot). `features` are refused: they are fetched from a registry,
//! which a deployment without one cannot reach.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

/// Where a repository's dev container is described, in the order they are looked for.
pub const PATHS: [&str; 2] = [".devcontainer/devcontainer.json", ".devcontainer.json"];

/// The name a repository's dev container has where an environment's name is shown.
pub const NAME: &str = "devcontainer.json";

/// A dev container as Halyard runs it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DevContainer {
    /// The file it was read from.
    pub path: String,
    pub image: Option<String>,
    pub build: Option<Build>,
    pub container_env: BTreeMap<String, String>,
    pub remote_user: Option<String>,
    /// Run once, in this order, and kept in the snapshot.
    pub setup: Vec<String>,
    pub post_start: Vec<String>,
    pub cache_key: Vec<String>,
    /// Ports of the sandbox served as apps (`PORT_<n>`).
    pub forward_ports: Vec<u16>,
}

/// How its image is built: paths relative to the workspace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Build {
    /// The build context's directory.
    pub context: String,
    /// The Dockerfile, relative to the context.
    pub dockerfile: String,
    pub args: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    image: Option<String>,
    build: Option<RawBuild>,
    #[serde(default)]
    container_env: BTreeMap<String, String>,
    remote_user: Option<String>,
    container_user: Option<String>,
    on_create_command: Option<Value>,
    update_content_command: Option<Value>,
    post_create_command: Option<Value>,
    post_start_command: Option<Value>,
    #[serde(default)]
    features: serde_json::Map<String, Value>,
    #[serde(default)]
    customizations: Option<Value>,
    #[serde(default)]
    forward_ports: Vec<Value>,
}

#[derive(Deserialize)]
struct RawBuild {
    dockerfile: Option<String>,
    context: Option<String>,
    #[serde(default)]
    args: BTreeMap<String, String>,
}

/// Parses the file at `path` (whose text is `text`).
pub fn parse(path: &str, text: &str) -> Result<DevContainer, String> {
    let plain = strip_jsonc(text);
    let raw: Raw = serde_json::from_str(&plain).map_err(|e| format!("{path}: {e}"))?;
    if !raw.features.is_empty() {
        let names: Vec<&String> = raw.features.keys().collect();
        return Err(format!(
            "{path}: `features` ({names:?}) are downloaded from a registry, which this deployment cannot reach; install what they \
             add in the Dockerfile (`build.dockerfile`) instead"
        ));
    }
    let dir = path.rsplit_once('/').map_or("", |(d, _)| d);
    let join = |base: &str, rel: &str| -> Result<String, String> { normalize(&format!("{base}/{rel}"), path) };
    let build = match raw.build {
        Some(b) => {
            let context = join(dir, b.context.as_deref().unwrap_or("."))?;
            let dockerfile_path = join(dir, b.dockerfile.as_deref().unwrap_or("Dockerfile"))?;
            let dockerfile = relative_to(&dockerfile_path, &context)
                .ok_or_else(|| format!("{path}: `build.dockerfile` must be inside `build.context` ({context})"))?;
            Some(Build { context, dockerfile, args: b.args })
        }
        None => None,
    };
    let mut setup = Vec::new();
    for c in [&raw.on_create_command, &raw.update_content_command, &raw.post_create_command].into_iter().flatten() {
        setup.extend(commands(c).map_err(|e| format!("{path}: {e}"))?);
    }
    let post_start = raw.post_start_command.as_ref().map(commands).transpose().map_err(|e| format!("{path}: {e}"))?.unwrap_or_default();
    let cache_key = raw
        .customizations
        .as_ref()
        .and_then(|c| c.pointer("/halyard/cache_key"))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default();
    let forward_ports = raw.forward_ports.iter().map(port).collect::<Result<Vec<_>, _>>().map_err(|e| format!("{path}: {e}"))?;
    Ok(DevContainer {
        path: path.to_owned(),
        image: raw.image,
        build,
        container_env: raw.container_env,
        remote_user: raw.remote_user.or(raw.container_user),
        setup,
        post_start,
        cache_key,
        forward_ports,
    })
}

/// One of `forwardPorts`: a port number, or `localhost:<n>` (the sandbox's own).
fn port(v: &Value) -> Result<u16, String> {
    let n = match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => match s.split_once(':') {
            Some(("localhost" | "127.0.0.1", p)) => p.parse().ok(),
            Some((host, _)) => {
                return Err(format!(
                    "`forwardPorts`: `{s}` is a port of `{host}`, another container's (Docker Compose), which Halyard does not run; \
                     forward the sandbox's own ports (`3000`)"
                ));
            }
            None => s.parse().ok(),
        },
        _ => None,
    };
    n.and_then(|n| u16::try_from(n).ok())
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("`forwardPorts`: `{v}` is not a port (a number from 1 to 65535, or `localhost:<n>`)"))
}

/// A lifecycle command: a string (a shell command line), an array (a program and its
/// arguments) or an object of named commands (each either), run one after another.
fn commands(v: &Value) -> Result<Vec<String>, String> {
    match v {
        Value::String(s) => Ok(vec![s.clone()]),
        Value::Array(parts) => {
            let words: Option<Vec<String>> = parts.iter().map(|p| p.as_str().map(quote)).collect();
            words.map(|w| vec![w.join(" ")]).ok_or_else(|| "a command given as an array must hold strings only".into())
        }
        Value::Object(named) => Ok(named.values().map(commands).collect::<Result<Vec<_>, _>>()?.concat()),
        Value::Null => Ok(Vec::new()),
        _ => Err("a lifecycle command is a string, an array of strings or an object of them".into()),
    }
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// `a/./b/../c` as `a/c`; an error if it leaves the workspace.
fn normalize(p: &str, file: &str) -> Result<String, String> {
    let mut out: Vec<&str> = Vec::new();
    for part in p.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                out.pop().ok_or_else(|| format!("{file}: a build path leaves the repository"))?;
            }
            other => out.push(other),
        }
    }
    Ok(if out.is_empty() { ".".to_owned() } else { out.join("/") })
}

fn relative_to(path: &str, dir: &str) -> Option<String> {
    if dir == "." {
        return Some(path.to_owned());
    }
    path.strip_prefix(dir)?.strip_prefix('/').map(str::to_owned)
}

/// JSON with comments (`//`, `/* */`) and trailing commas, as plain JSON.
pub fn strip_jsonc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match c {
                '\\' => {
                    if let Some(n) = chars.next() {
                        out.push(n);
                    }
                }
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match (c, chars.peek()) {
            ('"', _) => {
                in_string = true;
                out.push(c);
            }
            ('/', Some('/')) => {
                for n in chars.by_ref() {
                    if n == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            ('/', Some('*')) => {
                chars.next();
                let mut last = ' ';
                for n in chars.by_ref() {
                    if last == '*' && n == '/' {
                        break;
                    }
                    last = n;
                }
            }
            _ => out.push(c),
        }
    }
    // Trailing commas: a comma followed (past blanks) by a closing bracket goes.
    let mut cleaned = String::with_capacity(out.len());
    let bytes: Vec<char> = out.chars().collect();
    let mut in_string = false;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if in_string {
            cleaned.push(c);
            if c == '\\' && i + 1 < bytes.len() {
                cleaned.push(bytes[i + 1]);
                i += 1;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
            cleaned.push(c);
        } else if c == ',' {
            let next = bytes[i + 1..].iter().find(|n| !n.is_whitespace());
            if !matches!(next, Some('}') | Some(']')) {
                cleaned.push(c);
            }
        } else {
            cleaned.push(c);
        }
        i += 1;
    }
    cleaned
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spec_s_forms_are_read() {
        let text = r#"{
            // A comment, "with quotes"
            "name": "app", /* block */
            "build": {"dockerfile": "Dockerfile", "context": "..", "args": {"V": "1"},},
            "containerEnv": {"URL": "http://x//y"},
            "remoteUser": "node",
            "onCreateCommand": "echo one",
            "postCreateCommand": ["npm", "install", "it's"],
            "postStartCommand": {"a": "echo a", "b": ["echo", "b"]},
            "forwardPorts": [3000, "localhost:5173"],
            "customizations": {"halyard": {"cache_key": ["package-lock.json"]}},
        }"#;
        let d = parse(".devcontainer/devcontainer.json", text).unwrap();
        assert_eq!(
            d.build,
            Some(Build { context: ".".into(), dockerfile: ".devcontainer/Dockerfile".into(), args: [("V".into(), "1".into())].into() })
        );
        assert_eq!(d.container_env["URL"], "http://x//y");
        assert_eq!(d.setup, vec!["echo one".to_owned(), r"'npm' 'install' 'it'\''s'".to_owned()]);
        assert_eq!(d.post_start, vec!["echo a".to_owned(), "'echo' 'b'".to_owned()]);
        assert_eq!((d.remote_user.as_deref(), d.cache_key.len()), (Some("node"), 1));
        assert_eq!(d.forward_ports, vec![3000, 5173]);
        let compose = parse(".devcontainer.json", r#"{"image": "x", "forwardPorts": ["db:5432"]}"#).unwrap_err();
        assert!(compose.contains("another container's"), "{compose}");
        assert!(parse(".devcontainer.json", r#"{"image": "x", "forwardPorts": [70000]}"#).is_err());
        let e = parse(".devcontainer/devcontainer.json", r#"{"image": "x", "features": {"ghcr.io/devcontainers/features/node:1": {}}}"#);
        assert!(e.unwrap_err().contains("registry"));
        let out = parse(".devcontainer/devcontainer.json", r#"{"build": {"context": "../..", "dockerfile": "D"}}"#);
        assert!(out.unwrap_err().contains("leaves the repository"));
        let d = parse(".devcontainer.json", r#"{"image": "debian"}"#).unwrap();
        assert_eq!((d.image.as_deref(), d.build), (Some("debian"), None));
    }
}
