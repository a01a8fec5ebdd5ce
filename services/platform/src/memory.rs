//! Giving memory back. glibc's malloc keeps what a burst of work freed in its arenas, so an idle
//! server would hold its busiest size for good; a periodic trim hands the free pages back, so
//! that what the services forget about idle conversations leaves the process too.

use std::time::Duration;

use crate::Shutdown;

/// Hands the allocator's free memory back to the system every `every` until `shutdown` (a few
/// milliseconds each at most; nothing on allocators other than glibc's).
pub fn trim_every(every: Duration, mut shutdown: Shutdown) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.wait() => return,
                _ = ticks.tick() => trim(),
            }
        }
    })
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn trim() {
    // SAFETY: malloc_trim(3) takes a size and only releases free memory of the allocator's own.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}
