//! Runtime images: any base image plus Halyard's executor, built through the Docker API and
//! tagged so that only what changed is rebuilt (OpenHands' scheme):
//!
//! - the *lock* tag hashes the base image's id and what Halyard adds below the executor (the
//!   executor's shared libraries, the user, the directories);
//! - the *source* tag hashes the lock and the executor binary itself;
//! - the *versioned* tag names the Halyard version and the base image, for people.
//!
//! An existing source tag is used as is (nothing is built); an existing lock tag only gets a
//! new executor layer; otherwise both layers are built. The executor runs through the dynamic
//! loader copied with its libraries, so it does not depend on the base image's C library.

use std::path::{Path, PathBuf};
use std::time::Instant;

use bollard::Docker;
use bollard::query_parameters::{BuildImageOptions, TagImageOptions};
use futures::StreamExt;
use sha2::{Digest, Sha256};

use halyard_platform::config::SandboxSpec;
use halyard_protocol::system::{ImageOutcome, SandboxImage};

use crate::docker::{self, DockerError, KEY_DIR};

/// Bumped when the layout below changes, so old lock images are not reused.
const LAYOUT: &str = "halyard-runtime-layout-1";

/// The executor binary and the shared libraries it loads.
#[derive(Clone, Debug)]
pub struct ExecutorFiles {
    pub binary: PathBuf,
    /// Paths on the host; each goes to /opt/halyard/lib/<file name> in the image.
    pub libs: Vec<PathBuf>,
    pub interpreter: Option<String>,
}

impl ExecutorFiles {
    /// Finds the libraries of `binary` with `ldd` (none for a static binary).
    pub fn discover(binary: &Path) -> Self {
        let output = std::process::Command::new("ldd").arg(binary).output();
        let mut libs = Vec::new();
        let mut interpreter = None;
        if let Ok(out) = output {
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                let line = line.trim();
                // `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)` or
                // `/lib64/ld-linux-x86-64.so.2 (0x...)`.
                let path = match line.split_once("=>") {
                    Some((_, rest)) => rest.split_whitespace().next(),
                    None => line.split_whitespace().next().filter(|p| p.starts_with('/')),
                };
                if let Some(p) = path.filter(|p| p.starts_with('/')) {
                    let p = PathBuf::from(p);
                    if !line.contains("=>") {
                        interpreter = p.file_name().map(|n| n.to_string_lossy().into_owned());
                    }
                    libs.push(p);
                }
            }
        }
        Self { binary: binary.to_owned(), libs, interpreter }
    }

    fn entrypoint(&self) -> Vec<String> {
        match &self.interpreter {
            Some(ld) => vec![
                format!("/opt/halyard/lib/{ld}"),
                "--library-path".into(),
                "/opt/halyard/lib".into(),
                "/opt/halyard/bin/halyard".into(),
                "executor".into(),
            ],
            None => vec!["/opt/halyard/bin/halyard".into(), "executor".into()],
        }
    }
}

fn hash_file(h: &mut Sha256, path: &Path) -> Result<(), DockerError> {
    let bytes = std::fs::read(path).map_err(|e| DockerError::Build(format!("cannot read {}: {e}", path.display())))?;
    h.update((bytes.len() as u64).to_be_bytes());
    h.update(&bytes);
    Ok(())
}

fn hex16(h: Sha256) -> String {
    h.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// Tags of one spec's runtime image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tags {
    pub source: String,
    pub lock: String,
    pub versioned: String,
}

/// Computes the tags (hashing the executor: blocking, run it off the async workers).
pub fn tags(repository: &str, spec: &SandboxSpec, base_id: &str, files: &ExecutorFiles) -> Result<Tags, DockerError> {
    let mut lock = Sha256::new();
    lock.update(LAYOUT);
    lock.update(base_id);
    lock.update(&spec.user);
    lock.update(&spec.working_dir);
    for lib in &files.libs {
        lock.update(lib.to_string_lossy().as_bytes());
        hash_file(&mut lock, lib)?;
    }
    let lock = hex16(lock);
    let mut source = Sha256::new();
    source.update(&lock);
    hash_file(&mut source, &files.binary)?;
    let source = hex16(source);
    let base_name: String =
        spec.base_image.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' }).collect();
    Ok(Tags {
        source: format!("{repository}:src-{source}"),
        lock: format!("{repository}:lock-{lock}"),
        versioned: format!("{repository}:{}-{base_name}", env!("CARGO_PKG_VERSION")),
    })
}

/// Makes sure the runtime image of `spec` exists, building only what is missing.
pub async fn ensure(docker: &Docker, repository: &str, spec: &SandboxSpec, files: ExecutorFiles) -> Result<SandboxImage, DockerError> {
    let started = Instant::now();
    let base = docker.inspect_image(&spec.base_image).await.map_err(|e| {
        DockerError::Build(format!(
            "base image {} of spec `{}` is not available ({e}); no registry is reachable, so build it locally (infra/build-base-image.sh builds halyard-base:bookworm)",
            spec.base_image, spec.name
        ))
    })?;
    let base_id = base.id.unwrap_or_default();
    let (files, tags) = {
        let spec = spec.clone();
        let repository = repository.to_owned();
        tokio::task::spawn_blocking(move || tags(&repository, &spec, &base_id, &files).map(|t| (files, t)))
            .await
            .map_err(|e| DockerError::Build(e.to_string()))??
    };
    let outcome = if docker::image_exists(docker, &tags.source).await {
        ImageOutcome::Reused
    } else {
        let outcome = if docker::image_exists(docker, &tags.lock).await {
            ImageOutcome::ExecutorLayer
        } else {
            build(docker, &tags.lock, lock_context(spec, &files)?).await?;
            ImageOutcome::Built
        };
        let context = source_context(&tags.lock, &files).await?;
        build(docker, &tags.source, context).await?;
        outcome
    };
    tag(docker, &tags.source, &tags.versioned).await?;
    Ok(SandboxImage {
        spec: spec.name.clone(),
        base_image: spec.base_image.clone(),
        image: tags.source,
        lock_tag: tags.lock,
        versioned_tag: tags.versioned,
        outcome,
        build_ms: started.elapsed().as_millis() as u64,
    })
}

/// The lock layer: libraries, the user's directories.
fn lock_context(spec: &SandboxSpec, files: &ExecutorFiles) -> Result<Vec<u8>, DockerError> {
    let (uid, gid) = docker::parse_user(&spec.user);
    let dockerfile = format!(
        "FROM {base}\n\
         COPY lib/ /opt/halyard/lib/\n\
         RUN mkdir -p {KEY_DIR} /home/halyard {wd} && chown {uid}:{gid} {KEY_DIR} /home/halyard {wd} && chmod 700 {KEY_DIR}\n\
         LABEL dev.halyard.layout={LAYOUT}\n",
        base = spec.base_image,
        wd = spec.working_dir,
    );
    let mut ctx = tar::Builder::new(Vec::new());
    append(&mut ctx, "Dockerfile", dockerfile.as_bytes(), 0o644)?;
    for lib in &files.libs {
        let name = lib.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let bytes = std::fs::read(lib).map_err(|e| DockerError::Build(format!("cannot read {}: {e}", lib.display())))?;
        append(&mut ctx, &format!("lib/{name}"), &bytes, 0o755)?;
    }
    ctx.into_inner().map_err(|e| DockerError::Build(e.to_string()))
}

/// The source layer: the executor binary on top of the lock image.
async fn source_context(lock: &str, files: &ExecutorFiles) -> Result<Vec<u8>, DockerError> {
    let entrypoint = serde_json::to_string(&files.entrypoint()).map_err(|e| DockerError::Build(e.to_string()))?;
    let dockerfile = format!("FROM {lock}\nCOPY halyard /opt/halyard/bin/halyard\nENTRYPOINT {entrypoint}\n");
    let binary = files.binary.clone();
    tokio::task::spawn_blocking(move || {
        let bytes = std::fs::read(&binary).map_err(|e| DockerError::Build(format!("cannot read {}: {e}", binary.display())))?;
        let mut ctx = tar::Builder::new(Vec::new());
        append(&mut ctx, "Dockerfile", dockerfile.as_bytes(), 0o644)?;
        append(&mut ctx, "halyard", &bytes, 0o755)?;
        ctx.into_inner().map_err(|e| DockerError::Build(e.to_string()))
    })
    .await
    .map_err(|e| DockerError::Build(e.to_string()))?
}

fn append(ctx: &mut tar::Builder<Vec<u8>>, path: &str, bytes: &[u8], mode: u32) -> Result<(), DockerError> {
    let mut header = tar::Header::new_gnu();
    header.set_size(bytes.len() as u64);
    header.set_mode(mode);
    header.set_cksum();
    ctx.append_data(&mut header, path, bytes).map_err(|e| DockerError::Build(e.to_string()))
}

async fn build(docker: &Docker, tag: &str, context: Vec<u8>) -> Result<(), DockerError> {
    let options = BuildImageOptions { t: Some(tag.to_owned()), rm: true, forcerm: true, ..Default::default() };
    let mut stream = docker.build_image(options, None, Some(bollard::body_full(context.into())));
    let mut log = String::new();
    while let Some(item) = stream.next().await {
        let info = item.map_err(|e| DockerError::Build(format!("{tag}: {e}")))?;
        if let Some(err) = info.error_detail.and_then(|d| d.message) {
            return Err(DockerError::Build(format!("{tag}: {err}\n{log}")));
        }
        if let Some(s) = info.stream {
            log.push_str(&s);
        }
    }
    if !docker::image_exists(docker, tag).await {
        return Err(DockerError::Build(format!("{tag}: the engine reported no error but the image is missing\n{log}")));
    }
    tracing::info!(%tag, "runtime image built");
    Ok(())
}

async fn tag(docker: &Docker, image: &str, target: &str) -> Result<(), DockerError> {
    let (repo, tag) = target.rsplit_once(':').unwrap_or((target, "latest"));
    docker
        .tag_image(image, Some(TagImageOptions { repo: Some(repo.to_owned()), tag: Some(tag.to_owned()) }))
        .await
        .map_err(|e| DockerError::Build(format!("tag {target}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_change_only_with_what_they_hash() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("halyard");
        std::fs::write(&bin, b"v1").unwrap();
        let files = ExecutorFiles { binary: bin.clone(), libs: Vec::new(), interpreter: None };
        let spec = SandboxSpec::default();
        let a = tags("r", &spec, "sha256:base", &files).unwrap();
        assert_eq!(a, tags("r", &spec, "sha256:base", &files).unwrap());
        std::fs::write(&bin, b"v2").unwrap();
        let b = tags("r", &spec, "sha256:base", &files).unwrap();
        assert_eq!(a.lock, b.lock, "a new executor keeps the lock tag");
        assert_ne!(a.source, b.source);
        let c = tags("r", &spec, "sha256:other", &files).unwrap();
        assert_ne!(a.lock, c.lock, "a new base image changes the lock tag");
        assert!(a.versioned.starts_with("r:0.") && a.versioned.ends_with("halyard-base_bookworm"));
    }

    #[test]
    fn ldd_output_is_parsed() {
        let files = ExecutorFiles::discover(Path::new("/bin/sh"));
        if let Some(ld) = &files.interpreter {
            assert!(ld.starts_with("ld-"));
            assert!(files.libs.iter().any(|l| l.to_string_lossy().contains("libc")));
        }
    }
}
