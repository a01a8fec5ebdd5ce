//! The paths a sandbox's agent and user see, the same in every kind: the workspace at
//! [`WORKSPACE`] and home at [`HOME`], as in a container. A process sandbox's directories are
//! under Halyard's data directory on the host (`sandboxes/<id>/workspace`); shown as they are,
//! they would reveal the host's layout in every observation, the prompt and the page, and make
//! transcripts differ between kinds. So an isolated process sandbox (isolation `uid` or
//! `bwrap`) runs in a mount namespace of its own where its directories are bound at those
//! paths: as root by [`enter`] in the child before it runs, under bubblewrap by its arguments
//! (`crate::isolation`). Nothing else of the host's file system changes in the namespace.

use std::ffi::CString;
use std::io;
use std::path::Path;

/// The workspace, in every kind.
pub const WORKSPACE: &str = "/workspace";
/// The sandbox user's home, in every kind.
pub const HOME: &str = "/home/halyard";

/// Makes the directories the namespace binds over (Halyard as root, once): empty ones where
/// the host has none; one the host has is only covered inside the sandboxes' namespaces.
pub fn prepare_mountpoints() -> Result<(), String> {
    for dir in [WORKSPACE, HOME] {
        if !Path::new(dir).is_dir() {
            std::fs::create_dir_all(dir).map_err(|e| format!("cannot make {dir}, where process sandboxes see their files: {e}"))?;
        }
    }
    Ok(())
}

/// What [`enter`] binds, made before the fork (the child may not allocate).
pub struct Binds {
    workspace: (CString, CString),
    home: (CString, CString),
    root: CString,
}

impl Binds {
    /// `workspace` at [`WORKSPACE`] and `home` at [`HOME`].
    pub fn new(workspace: &Path, home: &Path) -> io::Result<Self> {
        let c = |p: &str| CString::new(p).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e));
        let path = |p: &Path| c(&p.display().to_string());
        Ok(Self { workspace: (path(workspace)?, c(WORKSPACE)?), home: (path(home)?, c(HOME)?), root: c("/")? })
    }
}

/// In the child, as root, before it drops to the sandbox's uid (so only async-signal-safe
/// calls): a mount namespace of its own, private (nothing it mounts reaches the host), with
/// `binds` in place.
#[allow(unsafe_code)]
pub fn enter(binds: &Binds) -> io::Result<()> {
    // SAFETY: plain system calls on C strings made before the fork.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            return Err(io::Error::last_os_error());
        }
        let private = libc::MS_REC | libc::MS_PRIVATE;
        if libc::mount(std::ptr::null(), binds.root.as_ptr(), std::ptr::null(), private, std::ptr::null()) != 0 {
            return Err(io::Error::last_os_error());
        }
        for (from, to) in [&binds.workspace, &binds.home] {
            let bind = libc::MS_BIND | libc::MS_REC;
            if libc::mount(from.as_ptr(), to.as_ptr(), std::ptr::null(), bind, std::ptr::null()) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(())
}
