//! Content hashes for `ferry sync --checksum` and `ferry check`: one
//! hasher over the algorithms backends offer, and hashing by reading,
//! for a backend whose server cannot hash (OpenSSH's sftp-server, nginx,
//! vsftpd): the file then crosses the link once, and the caller says so.
use std::io::Read;

use crate::backend::{Backend, HashAlgo};
use crate::error::TransferError;

pub use ferry_hash::Hasher;

/// What `b` can hash where the file lives: its own list, and for files
/// on this machine (read at disk speed, no link crossed) CRC32 as well,
/// so a local tree compares with what S3 keeps without reading objects.
pub fn offered(b: &dyn Backend) -> Vec<HashAlgo> {
    let mut v = b.hashes();
    if matches!(b.scheme(), "local" | "memory") && !v.contains(&HashAlgo::Crc32) {
        v.push(HashAlgo::Crc32);
    }
    v
}

/// Local files up to this size are hashed on the calling thread when the
/// page cache holds them ([`of_cached_file`]).
pub const CACHED_MAX: u64 = 256 * 1024;
/// Bytes read at a time by [`of_reader`]: small enough that what a read
/// copied is still in the L2 cache when it is hashed. With 1 MiB reads
/// XXH3 read its buffer back from memory (29% of the client's samples of
/// a big tree's `sync -c` in perf, beside the page-cache copy's 48%).
const READ: usize = 256 << 10;

thread_local! {
    /// This thread's read buffer for hashing, kept between files: a fresh
    /// buffer for each of 10,000 small files costs more than hashing them
    /// (new pages to zero: 12% of `sync -c`'s client samples in perf).
    static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// `f` with this thread's buffer, at least `len` bytes long.
fn with_buf<T>(len: usize, f: impl FnOnce(&mut [u8]) -> T) -> T {
    BUF.with_borrow_mut(|buf| {
        if buf.len() < len {
            buf.resize(len, 0);
        }
        f(buf.get_mut(..len).unwrap_or_default())
    })
}

/// Hash everything `r` yields (a local file, on a blocking thread).
/// `size_hint` sizes the read buffer (at most [`READ`], this thread's).
pub fn of_reader(mut r: impl Read, algo: HashAlgo, size_hint: u64) -> std::io::Result<Vec<u8>> {
    let mut h = Hasher::new(algo);
    with_buf(size_hint.clamp(4096, READ as u64) as usize, |buf| loop {
        let n = r.read(buf)?;
        if n == 0 {
            return Ok(h.finish());
        }
        h.update(buf.get(..n).unwrap_or_default());
    })
}

/// The hash of a small local file the page cache holds, read without
/// waiting for a disk (`preadv2` with `RWF_NOWAIT`), on the calling
/// thread: a trip to a blocking thread and back cost more than hashing 20
/// kB. `Ok(None)` for anything else (larger than [`CACHED_MAX`], not all
/// cached, not a regular file, a file system that cannot say), which the
/// caller hashes on a blocking thread. Opened non-blocking, as a FIFO's
/// open would wait for a writer.
pub fn of_cached_file(path: &std::path::Path, algo: HashAlgo) -> std::io::Result<Option<Vec<u8>>> {
    use rustix::io::{Errno, ReadWriteFlags};
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)?;
    let m = f.metadata()?;
    if !m.is_file() || m.len() > CACHED_MAX {
        return Ok(None);
    }
    with_buf(m.len() as usize, |buf| {
        let mut got = 0;
        while let Some(rest) = buf.get_mut(got..).filter(|r| !r.is_empty()) {
            let io = &mut [std::io::IoSliceMut::new(rest)];
            match rustix::io::preadv2(&f, io, got as u64, ReadWriteFlags::NOWAIT) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(Errno::INTR) => {}
                Err(Errno::AGAIN | Errno::OPNOTSUPP) => return Ok(None),
                Err(e) => return Err(e.into()),
            }
        }
        let mut h = Hasher::new(algo);
        h.update(buf.get(..got).unwrap_or_default());
        Ok(Some(h.finish()))
    })
}

/// Hash a file by reading it through the backend.
pub async fn by_reading(
    b: &dyn Backend,
    path: &[u8],
    algo: HashAlgo,
) -> Result<Vec<u8>, TransferError> {
    range_by_reading(b, path, 0, None, algo).await
}

/// Hash `len` bytes of a file from `offset` (`None`: to its end) by
/// reading them through the backend.
async fn range_by_reading(
    b: &dyn Backend,
    path: &[u8],
    offset: u64,
    len: Option<u64>,
    algo: HashAlgo,
) -> Result<Vec<u8>, TransferError> {
    let mut s = b.read(path, offset, len).await?;
    let mut h = Hasher::new(algo);
    while let Some(piece) = s.next().await? {
        h.update(&piece);
    }
    Ok(h.finish())
}

/// The hash where the file lives, or by reading it when the backend
/// cannot hash there. The flag says which (`true`: read through the link).
pub async fn of_file(
    b: &dyn Backend,
    path: &[u8],
    algo: HashAlgo,
) -> Result<(Vec<u8>, bool), TransferError> {
    let h = b.hash(path, algo).await?;
    or_read(b, path, algo, h).await
}

/// The CRC32 of the CRC32s of `parts` (consecutive sizes) of a file, read
/// where it lies: what an S3 COMPOSITE multipart object keeps.
pub async fn composite_by_reading(
    b: &dyn Backend,
    path: &[u8],
    parts: &[u64],
) -> Result<Vec<u8>, TransferError> {
    let mut crcs = Vec::with_capacity(parts.len());
    let mut offset = 0u64;
    for &len in parts {
        let crc = range_by_reading(b, path, offset, Some(len), HashAlgo::Crc32).await?;
        // `Hasher` gives CRC32 big-endian.
        crcs.push(u32::from_be_bytes(crc.try_into().unwrap_or_default()));
        offset += len;
    }
    Ok(crate::s3::composite_of(&crcs).to_vec())
}

/// Two files' hashes for a comparison, each with whether it was read
/// through the link ([`of_file`]). When one side keeps only a COMPOSITE
/// CRC32 (an S3 multipart object from another tool) and the other is on
/// this machine, the local file is hashed part by part with the same
/// part sizes instead of reading the object.
pub async fn pair(
    a: &dyn Backend,
    ap: &[u8],
    b: &dyn Backend,
    bp: &[u8],
    algo: HashAlgo,
) -> Result<((Vec<u8>, bool), (Vec<u8>, bool)), TransferError> {
    let (ha, hb) = tokio::join!(a.hash(ap, algo), b.hash(bp, algo));
    let (ha, hb) = (ha?, hb?);
    let here = |x: &dyn Backend| matches!(x.scheme(), "local" | "memory");
    if algo == HashAlgo::Crc32 {
        if ha.is_none() && hb.is_some() && here(b) {
            if let Some((want, parts)) = a.composite_crc32(ap).await? {
                let got = composite_by_reading(b, bp, &parts).await?;
                return Ok(((want, false), (got, false)));
            }
        }
        if hb.is_none() && ha.is_some() && here(a) {
            if let Some((want, parts)) = b.composite_crc32(bp).await? {
                let got = composite_by_reading(a, ap, &parts).await?;
                return Ok(((got, false), (want, false)));
            }
        }
    }
    let (ra, rb) = tokio::join!(or_read(a, ap, algo, ha), or_read(b, bp, algo, hb));
    Ok((ra?, rb?))
}

/// `h`, or the file read through the link to hash it (flag `true`).
async fn or_read(
    b: &dyn Backend,
    path: &[u8],
    algo: HashAlgo,
    h: Option<Vec<u8>>,
) -> Result<(Vec<u8>, bool), TransferError> {
    match h {
        Some(h) => Ok((h, false)),
        None => Ok((by_reading(b, path, algo).await?, true)),
    }
}

/// The algorithm two backends should compare with (their lists from
/// [`offered`]): one both compute where the bytes live if there is one
/// (in `a`'s order, best first), else the one that side offers, else
/// BLAKE3 (both are read).
pub fn choose(a: &[HashAlgo], b: &[HashAlgo]) -> HashAlgo {
    if let Some(x) = a.iter().find(|x| b.contains(x)) {
        return *x;
    }
    a.first().or(b.first()).copied().unwrap_or(HashAlgo::Blake3)
}

/// Lower-case hex, for output.
pub fn hex(h: &[u8]) -> String {
    h.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A small cached file hashed on the calling thread gives what the
    /// blocking path gives; what it should not read is left to that path.
    #[test]
    fn cached_small_files_hash_as_read_ones_and_the_rest_is_left() {
        let d = tempfile::tempdir().unwrap();
        let sizes = [0usize, 1, 3000, 4095, 20_000, CACHED_MAX as usize];
        for (i, n) in sizes.into_iter().enumerate() {
            let p = d.path().join(format!("f{i}"));
            let data: Vec<u8> = (0..n).map(|k| (k * 31 + i) as u8).collect();
            std::fs::write(&p, &data).unwrap();
            for algo in [HashAlgo::Blake3, HashAlgo::Sha256, HashAlgo::Crc32] {
                let read = of_reader(std::fs::File::open(&p).unwrap(), algo, n as u64).unwrap();
                match of_cached_file(&p, algo).unwrap() {
                    Some(here) => assert_eq!(here, read, "{n} bytes, {algo:?}"),
                    // tmpfs refuses RWF_NOWAIT: nothing is hashed here.
                    None => assert!(tmpfs(d.path()), "{n} bytes, {algo:?}"),
                }
            }
        }
        let big = d.path().join("big");
        std::fs::write(&big, vec![3u8; CACHED_MAX as usize + 1]).unwrap();
        assert_eq!(of_cached_file(&big, HashAlgo::Blake3).unwrap(), None);
        let fifo = d.path().join("fifo");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .unwrap();
        assert_eq!(of_cached_file(&fifo, HashAlgo::Blake3).unwrap(), None);
        assert_eq!(of_cached_file(d.path(), HashAlgo::Blake3).unwrap(), None);
        assert!(of_cached_file(&d.path().join("none"), HashAlgo::Blake3).is_err());
    }

    fn tmpfs(p: &std::path::Path) -> bool {
        rustix::fs::statfs(p).is_ok_and(|s| s.f_type as u64 & 0xffff_ffff == 0x0102_1994)
    }
}
