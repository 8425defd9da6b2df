//! Reading file data on the calling (async) thread when that cannot wait
//! for a disk, so the bytes are still in this core's cache when they are
//! encrypted and sent. The HTTPS file bodies use it (docs/internals/server.md,
//! "Reading files"). The SFTP server does not: its READs run many at once
//! on the blocking pool, and reading them inline measured no better (1 GiB
//! to ferry cp: 2.87-3.75 CPU-s for both sides inline, 3.02-3.38 on the
//! pool, interleaved runs).
//!
//! Whether a read can block is asked with `preadv2(RWF_NOWAIT)`, which
//! reads what the page cache holds and stops where it would wait. tmpfs
//! does not support the flag (EOPNOTSUPP) but is memory, so it is read
//! directly. A file system that refuses the flag is read on the blocking
//! pool by the caller, as before.
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

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
    buf.resize(skew + n, 0);
    let mut got = 0;
    while got < n && *how != Inline::Never {
        let Some(dst) = buf.get_mut(skew + got..) else {
            break;
        };
        let r = match how {
            Inline::Always => file.read_at(dst, at + got as u64),
            _ => rustix::io::preadv2(
                file,
                &mut [io::IoSliceMut::new(dst)],
                at + got as u64,
                rustix::io::ReadWriteFlags::NOWAIT,
            )
            .map_err(io::Error::from),
        };
        match r {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::OPNOTSUPP.raw_os_error()) => {
                *how = Inline::Never;
            }
            Err(e) => return Err(e),
        }
    }
    buf.truncate(skew + got);
    Ok(Placed { buf, skew })
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
}
