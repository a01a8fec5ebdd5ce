//! Files as bytes, for the workspace's owner: one file downloaded (`GET /files/raw?path=`), one
//! uploaded (`PUT /files/raw?path=`, the raw body), the whole workspace as a gzipped tar
//! (`GET /archive`). Streamed both ways, never held in memory; confined to the workspace like
//! every other path the executor takes.

use std::path::{Path, PathBuf};

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde::Deserialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::config::ExecutorConfig;
use crate::error::ExecutorError;
use crate::workspace::confine;

/// The largest upload, in bytes (the gateway holds uploads to the same).
pub(crate) const MAX_UPLOAD: u64 = halyard_protocol::executor::MAX_UPLOAD_BYTES;

#[derive(Deserialize)]
pub(crate) struct PathQuery {
    path: String,
}

/// A reader as a body, 64 KiB at a time.
pub(crate) fn body_of<R: tokio::io::AsyncRead + Unpin + Send + 'static>(reader: R) -> Body {
    let chunks = futures::stream::unfold(Some(reader), |reader| async move {
        let mut reader = reader?;
        let mut buf = vec![0u8; 64 * 1024];
        match reader.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok::<_, std::io::Error>(Bytes::from(buf)), Some(reader)))
            }
            Err(e) => Some((Err(e), None)),
        }
    });
    Body::from_stream(chunks)
}

/// `GET /files/raw?path=`: the file's bytes.
pub(crate) async fn download(
    State(config): State<std::sync::Arc<ExecutorConfig>>,
    Query(q): Query<PathQuery>,
) -> Result<Response, ExecutorError> {
    let path = confine(&config.workspace, &q.path)?;
    if !path.is_file() {
        return Err(ExecutorError::Tool(format!("{} is not a file; download a file, or the workspace as an archive", q.path)));
    }
    let file = tokio::fs::File::open(&path).await.map_err(|e| ExecutorError::Tool(format!("cannot read {}: {e}", q.path)))?;
    let size = file.metadata().await.map(|m| m.len()).unwrap_or_default();
    Ok(([(axum::http::header::CONTENT_LENGTH, size.to_string())], body_of(file)).into_response())
}

/// Where an upload to `asked` goes: inside an existing directory of the workspace, under a
/// plain name, and not through a link that leads out.
fn target(workspace: &Path, asked: &str) -> Result<PathBuf, ExecutorError> {
    let trimmed = asked.trim().trim_end_matches('/');
    let as_path = Path::new(trimmed);
    let name = match as_path.file_name().and_then(|n| n.to_str()) {
        Some(n) if !n.is_empty() && n != "." && n != ".." => n.to_owned(),
        _ => return Err(ExecutorError::Tool(format!("`{asked}` names no file; give the file's path, like src/data.csv"))),
    };
    let parent = as_path.parent().map(|p| p.to_string_lossy().into_owned()).filter(|p| !p.is_empty()).unwrap_or_else(|| ".".into());
    let dir = match confine(workspace, &parent) {
        Ok(dir) => dir,
        // A folder that is not there yet is made, as `mkdir -p` would, inside the workspace only.
        Err(ExecutorError::NotFound(_)) => make_folders(workspace, &parent)?,
        Err(e) => return Err(e),
    };
    if !dir.is_dir() {
        return Err(ExecutorError::Tool(format!("{parent} is a file, not a folder; upload under another path")));
    }
    let path = dir.join(&name);
    if path.exists() || path.is_symlink() {
        // Replacing: what is there must itself be inside (a link out is refused) and a file.
        let real = confine(workspace, &path.to_string_lossy())?;
        if real.is_dir() {
            return Err(ExecutorError::Tool(format!("{asked} is a directory; upload into it under a file name")));
        }
    }
    Ok(path)
}

/// Makes the folders of `parent` that are missing, one at a time from the workspace's root: each
/// one that exists must itself be a folder inside (a link out is refused, as `confine` refuses
/// it), and each one made is made where the last checked one is, so nothing is made outside.
fn make_folders(workspace: &Path, parent: &str) -> Result<PathBuf, ExecutorError> {
    let (root, _, relative) = crate::workspace::by_words(workspace, parent)?;
    let mut dir = root.clone();
    for part in relative.components() {
        let next = dir.join(part);
        match std::fs::create_dir(&next) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(ExecutorError::Tool(format!("cannot make the folder {}: {e}", next.display()))),
        }
        // What is there now (made here, or there before, perhaps a link) must be a folder inside.
        dir = confine(workspace, &next.to_string_lossy())?;
        if !dir.is_dir() {
            let shown = dir.strip_prefix(&root).unwrap_or(&dir).display().to_string();
            return Err(ExecutorError::Tool(format!("{shown} is a file, not a folder; upload under another path")));
        }
    }
    Ok(dir)
}

/// `PUT /files/raw?path=`: the body becomes the file (written beside it, then renamed over
/// it, so a broken upload leaves the old file as it was).
pub(crate) async fn upload(
    State(config): State<std::sync::Arc<ExecutorConfig>>,
    Query(q): Query<PathQuery>,
    body: Body,
) -> Result<Response, ExecutorError> {
    let path = target(&config.workspace, &q.path)?;
    let partial = path.with_file_name(format!(
        ".{}.halyard-upload-{}",
        path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default(),
        uuid::Uuid::new_v4()
    ));
    let written = write_limited(&partial, body, MAX_UPLOAD).await;
    let size = match written {
        Ok(size) => size,
        Err(e) => {
            let _ = tokio::fs::remove_file(&partial).await;
            return Err(e);
        }
    };
    tokio::fs::rename(&partial, &path).await.map_err(|e| ExecutorError::Internal(format!("cannot put the upload in place: {e}")))?;
    let relative = path.strip_prefix(std::fs::canonicalize(&config.workspace).unwrap_or_default()).unwrap_or(&path);
    Ok((axum::http::StatusCode::CREATED, Json(serde_json::json!({"path": relative.to_string_lossy(), "size": size}))).into_response())
}

/// Writes `body` to `partial`, refusing more than `limit` bytes.
pub(crate) async fn write_limited(partial: &Path, body: Body, limit: u64) -> Result<u64, ExecutorError> {
    let mut file = tokio::fs::File::create(partial).await.map_err(|e| ExecutorError::Tool(format!("cannot write here: {e}")))?;
    let mut stream = body.into_data_stream();
    let mut size = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| ExecutorError::Tool(format!("the upload broke off: {e}")))?;
        size += chunk.len() as u64;
        if size > limit {
            return Err(ExecutorError::TooLarge(format!("files over {} MiB cannot be uploaded", limit >> 20)));
        }
        file.write_all(&chunk).await.map_err(|e| ExecutorError::Tool(format!("cannot write the upload: {e}")))?;
    }
    file.flush().await.map_err(|e| ExecutorError::Tool(format!("cannot write the upload: {e}")))?;
    Ok(size)
}

/// `GET /archive`: the workspace as a gzipped tar, made by `tar` as it is sent.
pub(crate) async fn archive(State(config): State<std::sync::Arc<ExecutorConfig>>) -> Result<Response, ExecutorError> {
    let mut child = tokio::process::Command::new("tar")
        .args(["-czf", "-", "--exclude=./.halyard", "-C"])
        .arg(&config.workspace)
        .arg(".")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| ExecutorError::Internal(format!("cannot run tar: {e}")))?;
    let stdout = child.stdout.take().ok_or_else(|| ExecutorError::Internal("tar has no output".into()))?;
    // The child is reaped when the download ends (or is dropped with it).
    tokio::spawn(async move {
        let _ = child.wait().await;
    });
    Ok(body_of(stdout).into_response())
}
