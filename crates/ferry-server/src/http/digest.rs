//! Content digests of served files, sent as `Repr-Digest: blake3=:...:`
//! (RFC 9530's field with a BLAKE3 hash; ferry's client checks it) on
//! whole, uncompressed GET/HEAD answers and single ranges.
//!
//! A digest is only ever sent when it is already known, so no answer waits
//! for a large file to be hashed:
//! - files up to [`INLINE_MAX`] are hashed when first asked for, on the
//!   blocking pool, before the answer (tens of microseconds);
//! - larger files are queued, on their first GET, to one background thread
//!   at the lowest CPU priority (nice 19), which hashes them when the
//!   machine has time; later answers carry the digest.
//!
//! Digests are kept by (device, inode, size, mtime in ns), the same things
//! the ETag is made from, and a hash is stored only if the file still has
//! them after it was read. A file rewritten with the same size and its
//! mtime set back keeps its old digest: the client then sees a mismatch
//! and refuses the bytes, which is the point.
use std::collections::{HashMap, HashSet};
use std::fs::{File, Metadata};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};

/// Files up to this size are hashed before their first answer.
pub const INLINE_MAX: u64 = 256 * 1024;
/// Digests kept; past this the table is emptied (a full re-hash costs
/// less than tracking recency on every GET).
pub const MAX_ENTRIES: usize = 100_000;
/// Large files waiting for the background hasher; more are not queued.
pub const QUEUE: usize = 256;
/// Bytes read per `pread` while hashing.
const READ: usize = 1024 * 1024;

/// What a digest is kept by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: i64,
    mtime_ns: i64,
}

impl Key {
    pub fn of(m: &Metadata) -> Key {
        Key {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: m.mtime(),
            mtime_ns: m.mtime_nsec(),
        }
    }
}

struct Table {
    known: HashMap<Key, [u8; 32]>,
    queued: HashSet<Key>,
}

/// The digests known so far, and the background hasher's queue.
pub struct Digests {
    table: Arc<Mutex<Table>>,
    queue: SyncSender<(Arc<File>, Key)>,
}

impl Default for Digests {
    fn default() -> Self {
        Self::new()
    }
}

impl Digests {
    /// Starts the background hasher thread (it ends when this is dropped).
    pub fn new() -> Digests {
        let table = Arc::new(Mutex::new(Table {
            known: HashMap::new(),
            queued: HashSet::new(),
        }));
        let (tx, rx) = sync_channel::<(Arc<File>, Key)>(QUEUE);
        let t = table.clone();
        let spawned = std::thread::Builder::new()
            .name("ferry-digest".into())
            .spawn(move || {
                // Only idle CPU: transfers in progress come first. On Linux
                // the nice value is per thread.
                let _ = rustix::process::setpriority_process(None, 19);
                while let Ok((file, key)) = rx.recv() {
                    let sum = hash(&file, key);
                    let mut t = lock(&t);
                    t.queued.remove(&key);
                    if let Some(s) = sum {
                        insert(&mut t, key, s);
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("no background hashing (digests only for small files): {e}");
        }
        Digests { table, queue: tx }
    }

    /// The digest of this file if known. Otherwise a small file is hashed
    /// now and a large one is queued for later. Blocking (small files are
    /// read); call it on the blocking pool.
    pub fn get_or_start(&self, file: &Arc<File>, meta: &Metadata) -> Option<[u8; 32]> {
        let key = Key::of(meta);
        {
            let mut t = lock(&self.table);
            if let Some(s) = t.known.get(&key) {
                return Some(*s);
            }
            if key.size > INLINE_MAX {
                if t.queued.insert(key) {
                    match self.queue.try_send((file.clone(), key)) {
                        Ok(()) => {}
                        Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                            t.queued.remove(&key);
                        }
                    }
                }
                return None;
            }
        }
        let sum = hash(file, key)?;
        insert(&mut lock(&self.table), key, sum);
        Some(sum)
    }

    /// The digest if known, without starting anything.
    pub fn known(&self, meta: &Metadata) -> Option<[u8; 32]> {
        lock(&self.table).known.get(&Key::of(meta)).copied()
    }
}

fn lock(t: &Mutex<Table>) -> std::sync::MutexGuard<'_, Table> {
    t.lock().unwrap_or_else(|e| e.into_inner())
}

fn insert(t: &mut Table, key: Key, sum: [u8; 32]) {
    if t.known.len() >= MAX_ENTRIES {
        t.known.clear();
    }
    t.known.insert(key, sum);
}

/// BLAKE3 of the whole file, or `None` if it could not be read or no longer
/// has `key` (changed while we read it).
fn hash(file: &File, key: Key) -> Option<[u8; 32]> {
    let mut h = blake3::Hasher::new();
    let mut buf = vec![0u8; READ.min(key.size as usize).max(1)];
    let mut at = 0u64;
    while at < key.size {
        let n = file.read_at(&mut buf, at).ok()?;
        if n == 0 {
            return None;
        }
        h.update(&buf[..n]);
        at += n as u64;
    }
    let after = file.metadata().ok()?;
    (Key::of(&after) == key).then(|| *h.finalize().as_bytes())
}

/// The `Repr-Digest` value for `sum`, in the form ferry_http::digest
/// parses on the client side.
pub fn header_value(sum: &[u8; 32]) -> String {
    use ferry_http::digest::{to_base64, Algo};
    format!("{}=:{}:", Algo::Blake3.name(), to_base64(sum))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn small_files_at_once_large_ones_later_and_keyed_by_mtime() {
        let d = tempfile::tempdir().unwrap();
        let small = d.path().join("s");
        std::fs::write(&small, b"hello").unwrap();
        let digests = Digests::new();
        let f = Arc::new(File::open(&small).unwrap());
        let m = f.metadata().unwrap();
        let want = *blake3::hash(b"hello").as_bytes();
        assert_eq!(digests.get_or_start(&f, &m), Some(want));
        assert_eq!(digests.known(&m), Some(want));

        let large = d.path().join("l");
        let data = vec![7u8; INLINE_MAX as usize + 10];
        std::fs::File::create(&large)
            .unwrap()
            .write_all(&data)
            .unwrap();
        let f = Arc::new(File::open(&large).unwrap());
        let m = f.metadata().unwrap();
        assert_eq!(digests.get_or_start(&f, &m), None, "never waits");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while digests.known(&m).is_none() {
            assert!(std::time::Instant::now() < deadline, "never hashed");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(digests.known(&m), Some(*blake3::hash(&data).as_bytes()));

        // Another mtime is another key.
        std::fs::write(&small, b"other").unwrap();
        let t = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        let w = std::fs::OpenOptions::new()
            .write(true)
            .open(&small)
            .unwrap();
        w.set_modified(t).unwrap();
        drop(w);
        let f = Arc::new(File::open(&small).unwrap());
        let m2 = f.metadata().unwrap();
        assert_eq!(
            digests.get_or_start(&f, &m2),
            Some(*blake3::hash(b"other").as_bytes())
        );
    }

    #[test]
    fn header_form() {
        assert_eq!(
            header_value(&[0u8; 32]),
            "blake3=:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=:"
        );
    }
}
