//! A private git server: git's own `git http-backend` (smart HTTP, as CGI) behind HTTP basic
//! authentication, serving the bare repositories under a directory.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use tokio::io::AsyncWriteExt;

struct Inner {
    root: PathBuf,
    /// The `Authorization` header it accepts.
    expected: String,
    /// Every request's `Authorization` header, in order.
    seen: Mutex<Vec<Option<String>>>,
}

/// A running private git server.
pub struct GitServer {
    inner: Arc<Inner>,
    /// `http://127.0.0.1:<port>`
    pub base: String,
}

impl GitServer {
    /// Serves the bare repositories under `root` to `user`:`password` only.
    pub async fn start(root: PathBuf, user: &str, password: &str) -> Self {
        use base64::Engine;
        let expected = format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}")));
        let inner = Arc::new(Inner { root, expected, seen: Mutex::new(Vec::new()) });
        let app = axum::Router::new().fallback(serve).with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind git server");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { inner, base }
    }

    /// Every request's `Authorization` header so far.
    pub fn authorizations(&self) -> Vec<Option<String>> {
        self.inner.seen.lock().expect("lock").clone()
    }
}

/// Runs git in `dir` as a test author, new repositories on `main`; panics with its words if it
/// fails.
pub fn git(dir: &std::path::Path, args: &[&str]) {
    let out = std::process::Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A bare repository `root/name` on branch `main`, with one commit of one file.
pub fn bare_repository(root: &std::path::Path, name: &str, (file, text): (&str, &str)) {
    let src = root.join(format!("{name}.src"));
    std::fs::create_dir_all(&src).expect("source dir");
    git(&src, &["init", "-q", "-b", "main"]);
    if let Some(dir) = src.join(file).parent() {
        std::fs::create_dir_all(dir).expect("the file's folder");
    }
    std::fs::write(src.join(file), text).expect("write file");
    git(&src, &["add", "."]);
    git(&src, &["commit", "-qm", "first"]);
    git(root, &["clone", "-q", "--bare", &format!("{name}.src"), name]);
}

async fn serve(State(inner): State<Arc<Inner>>, method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned);
    inner.seen.lock().expect("lock").push(auth.clone());
    if auth.as_deref() != Some(inner.expected.as_str()) {
        return Response::builder()
            .status(StatusCode::UNAUTHORIZED)
            .header("www-authenticate", "Basic realm=\"git\"")
            .body(Body::empty())
            .expect("response");
    }
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let mut child = tokio::process::Command::new("git")
        .arg("http-backend")
        .env("GIT_PROJECT_ROOT", &inner.root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("PATH_INFO", uri.path())
        .env("QUERY_STRING", uri.query().unwrap_or_default())
        .env("REQUEST_METHOD", method.as_str())
        .env("CONTENT_TYPE", header("content-type"))
        .env("CONTENT_LENGTH", body.len().to_string())
        .env("HTTP_CONTENT_ENCODING", header("content-encoding"))
        .env("GIT_PROTOCOL", header("git-protocol"))
        .env("REMOTE_USER", "git-user")
        .env("REMOTE_ADDR", "127.0.0.1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("git http-backend");
    let mut stdin = child.stdin.take().expect("stdin");
    let writer = tokio::spawn(async move {
        let _ = stdin.write_all(&body).await;
    });
    let out = child.wait_with_output().await.expect("http-backend output");
    let _ = writer.await;
    // CGI: headers, a blank line, the body.
    let split = out
        .stdout
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4))
        .or_else(|| out.stdout.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2)));
    let Some((at, sep)) = split else {
        return Response::builder().status(StatusCode::BAD_GATEWAY).body(Body::empty()).expect("response");
    };
    let mut response = Response::builder().status(StatusCode::OK);
    for line in String::from_utf8_lossy(&out.stdout[..at]).lines() {
        let Some((name, value)) = line.split_once(':') else { continue };
        let value = value.trim();
        if name.eq_ignore_ascii_case("status") {
            let code = value.split_whitespace().next().and_then(|c| c.parse().ok()).unwrap_or(500);
            response = response.status(code);
        } else {
            response = response.header(name.trim(), value);
        }
    }
    response.body(Body::from(out.stdout[at + sep..].to_vec())).expect("response")
}
