//! Reading file data on the calling (async) thread when that cannot wait
//! for a disk, so the bytes are still in this core's cache when they are
//! encrypted and sent. The HTTPS file bodies use it (docs/internals/server.md,
//! "Reading files") and so do the SFTP server's READs ("Reading on the
//! session's thread" there).
//!
//! Whether a read can block is asked with `preadv2(RWF_NOWAIT)`, which
//! reads what the page cache holds and stops where it would wait. tmpfs
//! does not support the flag (EOPNOTSUPP) but is memory, so it is read
//! directly. A file system that refuses the flag is read on the blocking
//! pool by the caller, as before.
use std::fs::File;
use std::io;

use ferry_http::tls::{skew_to, PLAINTEXT_PAGE_OFFSET};

/// How a file may be read on the async thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inline {
    /// tmpfs / ramfs: memory, never waits for a disk.
    Always,
    /// Ask with RWF_NOWAIT; what is not cached goes to the blocking pool.
    NoWait,
    /// The file system refused RWF_NOWAIT: blocking pool only.
    Never,
}

impl Inline {
    pub fn for_file(file: &File) -> Inline {
        const TMPFS_MAGIC: u64 = 0x0102_1994;
        const RAMFS_MAGIC: u64 = 0x8584_58f6;
        match rustix::fs::fstatfs(file) {
            Ok(st) if matches!(st.f_type as u64, TMPFS_MAGIC | RAMFS_MAGIC) => Inline::Always,
            _ => Inline::NoWait,
        }
    }
}

/// Read up to `n` bytes at `at` without waiting for a disk. Fewer come
/// back when the rest is not in memory or the file ends there; the caller
/// reads what is missing on the blocking pool. A file system that can't
/// say turns `how` into [`Inline::Never`].
///
/// The bytes start at offset [`Placed::skew`] of the returned buffer, so
/// that they sit at [`PLAINTEXT_PAGE_OFFSET`] within a 4 KiB page (see there).
pub fn read_now(file: &File, at: u64, n: usize, how: &mut Inline) -> io::Result<Placed> {
    let mut buf: Vec<u8> = Vec::with_capacity(n + 4096);
    let skew = skew_to(&buf, 0, PLAINTEXT_PAGE_OFFSET);
    buf.resize(skew, 0);
    append_now(file, &mut buf, skew, at, n, how)?;
    Ok(Placed { buf, skew })
}

/// Append file bytes to `buf` until it holds `head + len` bytes, where
/// `buf[head + i]` is the file's byte `offset + i`, without waiting for a
/// disk: `Ok(true)` when it stopped because `buf` is full or the file
/// ended, `Ok(false)` when the rest must be read on the blocking pool
/// ([`append_all`]), as when the file system refuses RWF_NOWAIT (`how`
/// becomes [`Inline::Never`]).
pub fn append_now(
    file: &File,
    buf: &mut Vec<u8>,
    head: usize,
    offset: u64,
    len: usize,
    how: &mut Inline,
) -> io::Result<bool> {
    match how {
        Inline::Never => Ok(false),
        Inline::Always => append_all(file, buf, head, offset, len).map(|()| true),
        Inline::NoWait => {
            let start = buf.len();
            buf.resize(head + len, 0);
            let mut got = start;
            let r = loop {
                let Some(dst) = buf.get_mut(got..) else {
                    break Ok(true);
                };
                if dst.is_empty() {
                    break Ok(true);
                }
                let at = offset + (got - head) as u64;
                let flags = rustix::io::ReadWriteFlags::NOWAIT;
                match rustix::io::preadv2(file, &mut [io::IoSliceMut::new(dst)], at, flags) {
                    Ok(0) => break Ok(true),
                    Ok(k) => got += k,
                    Err(rustix::io::Errno::INTR) => {}
                    Err(rustix::io::Errno::AGAIN) => break Ok(false),
                    Err(rustix::io::Errno::OPNOTSUPP) => {
                        *how = Inline::Never;
                        break Ok(false);
                    }
                    Err(e) => break Err(io::Error::from(e)),
                }
            };
            buf.truncate(got);
            r
        }
    }
}

/// Append file bytes to `buf` until it holds `head + len` bytes (or the
/// file ends), `buf[head + i]` being the file's byte `offset + i`; may
/// wait for a disk. Reads into the spare capacity: zeroing it first cost
/// the SFTP server 5% of its CPU on a download.
pub fn append_all(
    file: &File,
    buf: &mut Vec<u8>,
    head: usize,
    offset: u64,
    len: usize,
) -> io::Result<()> {
    buf.reserve((head + len).saturating_sub(buf.len()));
    while buf.len() < head + len {
        let at = offset + (buf.len() - head) as u64;
        // Only what was asked for: `buf` may be a packet buffer with
        // megabytes of spare capacity, and reading the file into all of
        // it made a download three times slower.
        let want = head + len - buf.len();
        let Some(spare) = buf.spare_capacity_mut().get_mut(..want) else {
            break;
        };
        let n = match rustix::io::pread(file, spare, at) {
            Ok((init, _)) => init.len(),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(io::Error::from(e)),
        };
        if n == 0 {
            break;
        }
        // SAFETY: pread initialised the first `n` bytes of the spare
        // capacity, and `n <= want` fits in it.
        unsafe { buf.set_len(buf.len() + n) };
    }
    Ok(())
}

/// File bytes in `buf[skew..]`.
#[derive(Debug)]
pub struct Placed {
    pub buf: Vec<u8>,
    pub skew: usize,
}

impl Placed {
    /// How many file bytes it holds.
    pub fn len(&self) -> usize {
        self.buf.len() - self.skew
    }

    #[cfg(test)]
    fn data(&self) -> &[u8] {
        self.buf.get(self.skew..).unwrap_or_default()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn reads_whole_and_short_at_end() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(b"hello world").unwrap();
        let file = f.reopen().unwrap();
        let mut how = Inline::for_file(&file);
        let buf = read_now(&file, 6, 5, &mut how).unwrap();
        let at = buf.buf.as_ptr() as usize + buf.skew;
        assert_eq!(at % 4096, PLAINTEXT_PAGE_OFFSET);
        if how != Inline::Never {
            assert_eq!(buf.data(), b"world");
            let buf = read_now(&file, 6, 100, &mut how).unwrap();
            assert_eq!(buf.data(), b"world");
        } else {
            assert!(buf.len() == 0);
        }
    }

    /// Both the no-wait path (a disk file system, the file cached) and the
    /// tmpfs path append after a header, stop at the end of the file, and
    /// leave the header alone.
    #[test]
    fn append_now_fills_after_the_head_and_stops_at_eof() {
        let mut dirs = vec![std::env::temp_dir()];
        if std::path::Path::new("/dev/shm").is_dir() {
            dirs.push("/dev/shm".into());
        }
        for dir in dirs {
            let mut f = tempfile::NamedTempFile::new_in(&dir).unwrap();
            f.write_all(b"hello world").unwrap();
            let file = f.reopen().unwrap();
            let mut how = Inline::for_file(&file);
            for (len, want) in [(5, &b"world"[..]), (100, b"world"), (3, b"wor")] {
                let mut buf = b"HDR".to_vec();
                let done = append_now(&file, &mut buf, 3, 6, len, &mut how).unwrap();
                if !done {
                    assert_eq!(how, Inline::Never, "{}", dir.display());
                    append_all(&file, &mut buf, 3, 6, len).unwrap();
                }
                assert_eq!(&buf[..3], b"HDR");
                assert_eq!(&buf[3..], want, "{} len {len}", dir.display());
            }
            let mut buf = Vec::new();
            assert!(
                append_now(&file, &mut buf, 0, 11, 10, &mut how).unwrap() || how == Inline::Never
            );
            assert!(buf.is_empty());
        }
    }
}
