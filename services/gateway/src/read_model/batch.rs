//! A projected batch written without sled's own batches, and still all or nothing after a
//! crash.
//!
//! sled 0.34 writes out its current log buffer for every `apply_batch` (it pins the log around
//! a batch), so the projection, which writes a batch per event or so, had sled's I/O threads
//! writing and syncing a few hundred times a second: a fifth of the whole process's CPU on a
//! run of agent steps. A batch is written here as a redo record instead: first the whole batch
//! under one key (one insert, atomic by itself), then each write on its own. sled recovers a
//! prefix of its log, so after a crash either the record is gone, and so is every write after
//! it, or it is there and [`replay`] writes it again on open (every write holds a whole value,
//! so writing one twice changes nothing). Either way the cursors and the views agree.

use super::layout::meta_key;

/// The key of the last batch's redo record.
fn record_key() -> Vec<u8> {
    meta_key("batch")
}

/// Writes to apply together: inserts and removes, in order (a later write of a key wins).
#[derive(Debug, Default)]
pub struct Batch {
    writes: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

impl Batch {
    pub fn insert(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) {
        self.writes.push((key.as_ref().to_vec(), Some(value.as_ref().to_vec())));
    }

    pub fn remove(&mut self, key: impl AsRef<[u8]>) {
        self.writes.push((key.as_ref().to_vec(), None));
    }

    /// The redo record: for each write, the key's length and the key, then the value's length
    /// plus one and the value (0: a remove); lengths as big-endian u32.
    fn encode(&self) -> Vec<u8> {
        let size = self.writes.iter().map(|(k, v)| 8 + k.len() + v.as_ref().map_or(0, Vec::len)).sum();
        let mut out = Vec::with_capacity(size);
        for (key, value) in &self.writes {
            out.extend_from_slice(&(key.len() as u32).to_be_bytes());
            out.extend_from_slice(key);
            match value {
                Some(v) => {
                    out.extend_from_slice(&(v.len() as u32 + 1).to_be_bytes());
                    out.extend_from_slice(v);
                }
                None => out.extend_from_slice(&0u32.to_be_bytes()),
            }
        }
        out
    }

    /// The writes of a record; `None` if it is not one [`Self::encode`] made.
    fn decode(mut bytes: &[u8]) -> Option<Self> {
        fn take<'a>(bytes: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
            let (head, rest) = (bytes.get(..n)?, bytes.get(n..)?);
            *bytes = rest;
            Some(head)
        }
        fn length(bytes: &mut &[u8]) -> Option<usize> {
            Some(u32::from_be_bytes(take(bytes, 4)?.try_into().ok()?) as usize)
        }
        let mut batch = Self::default();
        while !bytes.is_empty() {
            let key_len = length(&mut bytes)?;
            let key = take(&mut bytes, key_len)?.to_vec();
            let value = match length(&mut bytes)? {
                0 => None,
                n => Some(take(&mut bytes, n - 1)?.to_vec()),
            };
            batch.writes.push((key, value));
        }
        Some(batch)
    }

    /// Writes the batch: its record, then each write.
    pub fn apply(self, tree: &sled::Tree) -> Result<(), sled::Error> {
        tree.insert(record_key(), self.encode())?;
        self.write(tree)
    }

    fn write(self, tree: &sled::Tree) -> Result<(), sled::Error> {
        for (key, value) in self.writes {
            match value {
                Some(v) => tree.insert(key, v)?,
                None => tree.remove(key)?,
            };
        }
        Ok(())
    }
}

/// Writes the last batch again (on open: a crash may have cut it short).
pub fn replay(tree: &sled::Tree) -> Result<(), sled::Error> {
    let Some(record) = tree.get(record_key())? else { return Ok(()) };
    match Batch::decode(&record) {
        Some(batch) => batch.write(tree),
        None => {
            tracing::error!("the read models' last batch record is unreadable; the projection replays from its cursors");
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> (tempfile::TempDir, sled::Tree) {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new().path(dir.path()).temporary(true).open().unwrap();
        let tree = db.open_tree("t").unwrap();
        (dir, tree)
    }

    #[test]
    fn a_record_decodes_to_its_writes_in_order() {
        let mut b = Batch::default();
        b.insert(b"a", b"1");
        b.remove(b"b");
        b.insert(b"c", Vec::new());
        b.insert(b"a", b"2");
        let back = Batch::decode(&b.encode()).unwrap();
        assert_eq!(back.writes, b.writes);
        assert!(Batch::decode(&[0, 0, 0, 9, b'x']).is_none(), "a cut record is not a batch");
    }

    #[test]
    fn a_batch_cut_short_is_completed_by_replay() {
        let (_dir, tree) = tree();
        tree.insert(b"gone", b"x").unwrap();
        let mut b = Batch::default();
        b.insert(b"view", b"new");
        b.remove(b"gone");
        b.insert(meta_key("cursor"), 7u64.to_be_bytes());
        // A crash after the record: none of its writes made it.
        tree.insert(record_key(), b.encode()).unwrap();
        replay(&tree).unwrap();
        assert_eq!(tree.get(b"view").unwrap().as_deref(), Some(&b"new"[..]));
        assert_eq!(tree.get(b"gone").unwrap(), None);
        assert_eq!(tree.get(meta_key("cursor")).unwrap().as_deref(), Some(&7u64.to_be_bytes()[..]));
        // Replaying a batch that was written whole changes nothing.
        replay(&tree).unwrap();
        assert_eq!(tree.len(), 3);
    }
}
