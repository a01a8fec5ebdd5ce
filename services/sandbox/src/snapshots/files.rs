//! Where snapshots' files are on this host, and what they take: the paths and disk helpers the
//! snapshot modules share (apart, so that none of them imports another that imports it back).

use std::path::{Path, PathBuf};

use crate::ctx::Ctx;

/// Where snapshots' files are kept (a process sandbox's workspace and home, a container's
/// workspace), and overlay volumes' own directories (`overlays/`).
pub fn process_root(data_dir: &Path) -> PathBuf {
    let root = data_dir.join("snapshots");
    std::path::absolute(&root).unwrap_or(root)
}

/// A snapshot's workspace directory.
pub fn workspace_dir(data_dir: &Path, id: &str) -> PathBuf {
    process_root(data_dir).join(id).join("workspace")
}

pub fn set_private(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(|e| format!("{}: {e}", dir.display()))
}

/// Bytes the files under `dir` take on disk.
pub fn disk_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let Ok(m) = e.metadata() else { continue };
            total += m.blocks() * 512;
            if m.is_dir() {
                stack.push(e.path());
            }
        }
    }
    total
}

/// This host's snapshot directories: (id, path) (the overlay volumes' directories left out).
pub fn held_dirs(ctx: &Ctx) -> Vec<(String, String)> {
    let root = process_root(&ctx.config.data_dir);
    let Ok(entries) = std::fs::read_dir(&root) else { return Vec::new() };
    entries
        .flatten()
        .filter(|e| e.file_name() != "overlays")
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path().display().to_string()))
        .collect()
}
