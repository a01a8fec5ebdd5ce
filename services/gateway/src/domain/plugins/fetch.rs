//! Fetching a plugin marketplace's or plugin's repository: one commit's files, read by git
//! itself (smart HTTP, so any git server works) in a throwaway bare repository.
//!
//! The user names the URL, so the fetch follows the outbound client's rules: the host is
//! resolved here once, every address is checked against the allowed classes
//! (`HALYARD_GIT_API_ALLOW`), and git is made to connect to the address that was checked
//! (`http.curloptResolve`), never to a second lookup; redirects are not followed and only
//! `http`/`https` are spoken. A token (the owner's git provider's, for a private marketplace)
//! reaches git through its environment, never its command line, and no error repeats it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use halyard_platform::net::{check_ip, check_url};
use tokio::io::AsyncWriteExt;

/// A fetch may take this long in all.
const TIMEOUT: Duration = Duration::from_secs(120);
/// What one fetch keeps at most: files, and bytes in all (a plugin is text: prompts, scripts).
pub const MAX_FILES: usize = 1000;
pub const MAX_BYTES: u64 = 4 << 20;

/// One commit's files.
#[derive(Debug)]
pub struct Fetched {
    pub commit: String,
    /// Text files by path, with whether each is executable. Binary and oversized files are left
    /// out (listed in `skipped`).
    pub files: BTreeMap<String, (String, bool)>,
    pub skipped: Vec<String>,
}

/// Why a fetch failed, in words for whoever asked for it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct FetchError(pub String);

/// The address git is to connect to for `url`, checked.
async fn pinned(url: &str, allow: &[String]) -> Result<(reqwest::Url, SocketAddr), FetchError> {
    let parsed = check_url(url, allow).map_err(|e| FetchError(format!("{url}: {e}")))?;
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(FetchError("put no credentials in the URL: add a git provider for its host instead".into()));
    }
    let port = parsed.port_or_known_default().unwrap_or(443);
    let host = parsed.host_str().ok_or_else(|| FetchError(format!("{url} names no host")))?.trim_matches(['[', ']']).to_owned();
    let addr = match host.parse::<std::net::IpAddr>() {
        // (A literal address was checked with the URL.)
        Ok(ip) => SocketAddr::new(ip, port),
        Err(_) => {
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), port))
                .await
                .map_err(|e| FetchError(format!("{host} cannot be resolved: {e}")))?
                .collect();
            for a in &addrs {
                check_ip(a.ip(), allow).map_err(|e| FetchError(format!("{host}: {e}")))?;
            }
            *addrs.first().ok_or_else(|| FetchError(format!("{host} resolves to no address")))?
        }
    };
    Ok((parsed, addr))
}

/// Runs git in `dir`; `Err` is its standard error.
async fn git(dir: &Path, args: &[&str], env: &[(String, String)], stdin: Option<Vec<u8>>) -> Result<Vec<u8>, FetchError> {
    let mut cmd = tokio::process::Command::new("git");
    cmd.arg("-C")
        .arg(dir)
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into()))
        .env("HOME", dir)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_ALLOW_PROTOCOL", "http:https")
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(if stdin.is_some() { std::process::Stdio::piped() } else { std::process::Stdio::null() })
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|e| FetchError(format!("git cannot run here: {e}")))?;
    if let (Some(bytes), Some(mut pipe)) = (stdin, child.stdin.take()) {
        tokio::spawn(async move {
            let _ = pipe.write_all(&bytes).await;
        });
    }
    let out = child.wait_with_output().await.map_err(|e| FetchError(format!("git failed: {e}")))?;
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stderr);
        let said = said.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("no reason given").trim().to_owned();
        return Err(FetchError(said.trim_start_matches("fatal: ").to_owned()));
    }
    Ok(out.stdout)
}

/// The files of `url` at `git_ref` (absent: its default branch), with `authorization` sent
/// as the `Authorization` header when given.
pub async fn fetch(url: &str, git_ref: Option<&str>, authorization: Option<&str>, allow: &[String]) -> Result<Fetched, FetchError> {
    match tokio::time::timeout(TIMEOUT, fetch_now(url, git_ref, authorization, allow)).await {
        Ok(out) => out,
        Err(_) => Err(FetchError(format!("fetching {url} took longer than {} s", TIMEOUT.as_secs()))),
    }
}

async fn fetch_now(url: &str, git_ref: Option<&str>, authorization: Option<&str>, allow: &[String]) -> Result<Fetched, FetchError> {
    let (parsed, addr) = pinned(url, allow).await?;
    let host = parsed.host_str().unwrap_or_default().trim_matches(['[', ']']);
    let ip = match addr.ip() {
        std::net::IpAddr::V6(v6) => format!("[{v6}]"),
        v4 => v4.to_string(),
    };
    let mut config = vec![
        ("http.curloptResolve".to_owned(), format!("{host}:{}:{ip}", addr.port())),
        ("http.followRedirects".to_owned(), "false".to_owned()),
        ("protocol.allow".to_owned(), "never".to_owned()),
        ("protocol.http.allow".to_owned(), "always".to_owned()),
        ("protocol.https.allow".to_owned(), "always".to_owned()),
    ];
    if let Some(auth) = authorization {
        config.push(("http.extraHeader".to_owned(), format!("Authorization: {auth}")));
    }
    let mut env = vec![("GIT_CONFIG_COUNT".to_owned(), config.len().to_string())];
    for (i, (k, v)) in config.into_iter().enumerate() {
        env.push((format!("GIT_CONFIG_KEY_{i}"), k));
        env.push((format!("GIT_CONFIG_VALUE_{i}"), v));
    }
    let dir = tempfile::tempdir().map_err(|e| FetchError(format!("no room to fetch into: {e}")))?;
    git(dir.path(), &["init", "--bare", "-q"], &[], None).await?;
    let wanted = git_ref.unwrap_or("HEAD");
    if wanted.starts_with('-') || wanted.contains("..") {
        return Err(FetchError(format!("`{wanted}` is not a branch or tag")));
    }
    git(dir.path(), &["fetch", "-q", "--depth=1", "--no-tags", parsed.as_str(), wanted], &env, None)
        .await
        .map_err(|e| FetchError(format!("{url} could not be fetched at {wanted}: {e}")))?;
    let commit = String::from_utf8_lossy(&git(dir.path(), &["rev-parse", "FETCH_HEAD^{commit}"], &[], None).await?).trim().to_owned();
    read_tree(dir.path(), commit).await
}

/// The text files of `commit`, read in one `cat-file --batch`.
async fn read_tree(dir: &Path, commit: String) -> Result<Fetched, FetchError> {
    let listing = git(dir, &["ls-tree", "-r", "-z", "--long", &commit], &[], None).await?;
    let (mut wanted, mut skipped, mut total) = (Vec::new(), Vec::new(), 0u64);
    for entry in listing.split(|b| *b == 0).filter(|e| !e.is_empty()) {
        let entry = String::from_utf8_lossy(entry);
        let Some((meta, path)) = entry.split_once('\t') else { continue };
        let fields: Vec<&str> = meta.split_whitespace().collect();
        let [mode, kind, sha, size] = fields[..] else { continue };
        let size: u64 = size.parse().unwrap_or(u64::MAX);
        // Symbolic links and submodules are not a plugin's files.
        if kind != "blob" || mode == "120000" || size > MAX_BYTES || total + size > MAX_BYTES || wanted.len() >= MAX_FILES {
            skipped.push(path.to_owned());
            continue;
        }
        total += size;
        wanted.push((path.to_owned(), sha.to_owned(), mode == "100755"));
    }
    let input: Vec<u8> = wanted.iter().flat_map(|(_, sha, _)| format!("{sha}\n").into_bytes()).collect();
    let out = git(dir, &["cat-file", "--batch"], &[], Some(input)).await?;
    let mut files = BTreeMap::new();
    let mut rest = &out[..];
    for (path, _, executable) in wanted {
        // "<sha> blob <size>\n<content>\n"
        let Some(nl) = rest.iter().position(|b| *b == b'\n') else { break };
        let header = String::from_utf8_lossy(&rest[..nl]).into_owned();
        let size: usize = header.rsplit(' ').next().and_then(|s| s.parse().ok()).unwrap_or(0);
        let body = rest.get(nl + 1..nl + 1 + size).unwrap_or_default();
        rest = rest.get(nl + 2 + size..).unwrap_or_default();
        match std::str::from_utf8(body) {
            Ok(text) if !text.contains('\0') => {
                files.insert(path, (text.to_owned(), executable));
            }
            _ => skipped.push(path),
        }
    }
    Ok(Fetched { commit, files, skipped })
}
