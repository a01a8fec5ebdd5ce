//! Files only the sandbox's own user may read (keys, credentials handed to tools).

/// Writes a file only its owner can read (the sandbox's own user), whole, before returning.
pub(crate) fn write_private(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new().create(true).write(true).truncate(true).mode(0o600).open(path)?;
    file.write_all(text.as_bytes())
}
