//! Content hashes for `ferry sync --checksum` and `ferry check`: one
//! hasher over the algorithms backends offer, and hashing by reading,
//! for a backend whose server cannot hash (OpenSSH's sftp-server, nginx,
//! vsftpd): the file then crosses the link once, and the caller says so.
use std::io::Read;

use crate::backend::{Backend, HashAlgo};
use crate::error::TransferError;

/// One running hash: ferry-http's for BLAKE3 and SHA-256 (it checks
/// `Repr-Digest` with them), crc32fast's for S3's CRC32.
pub enum Hasher {
    Digest(ferry_http::digest::Hasher),
    Crc32(crc32fast::Hasher),
}

impl Hasher {
    pub fn new(algo: HashAlgo) -> Hasher {
        match ferry_http::digest::Algo::try_from(algo) {
            Ok(a) => Hasher::Digest(ferry_http::digest::Hasher::new(a)),
            Err(_) => Hasher::Crc32(crc32fast::Hasher::new()),
        }
    }
    pub fn update(&mut self, data: &[u8]) {
        match self {
            Hasher::Digest(h) => h.update(data),
            Hasher::Crc32(h) => h.update(data),
        }
    }
    /// The hash's bytes; CRC32 big-endian, as S3 sends it (in base64).
    pub fn finish(self) -> Vec<u8> {
        match self {
            Hasher::Digest(h) => h.finalize().to_vec(),
            Hasher::Crc32(h) => h.finalize().to_be_bytes().to_vec(),
        }
    }
}

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

/// Hash everything `r` yields (a local file, on a blocking thread).
/// `size_hint` sizes the buffer: a fresh 1 MiB buffer for each of 10,000
/// small files costs more than hashing them (new pages to zero).
pub fn of_reader(mut r: impl Read, algo: HashAlgo, size_hint: u64) -> std::io::Result<Vec<u8>> {
    let mut h = Hasher::new(algo);
    let mut buf = vec![0u8; size_hint.clamp(4096, 1 << 20) as usize];
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            return Ok(h.finish());
        }
        h.update(buf.get(..n).unwrap_or_default());
    }
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
/// [`offered`]): one both compute
/// where the bytes live if there is one (BLAKE3 first), else the one
/// that side offers, else BLAKE3 (both are read).
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
