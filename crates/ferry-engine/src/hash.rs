//! Content hashes for `ferry sync --checksum` and `ferry check`: one
//! hasher over the algorithms backends offer, and hashing by reading,
//! for a backend whose server cannot hash (OpenSSH's sftp-server, nginx,
//! vsftpd): the file then crosses the link once, and the caller says so.
use std::io::Read;

use crate::backend::{Backend, HashAlgo};
use crate::error::TransferError;

/// One running hash: ferry-http's, which checks `Repr-Digest` with the
/// same two algorithms.
pub struct Hasher(ferry_http::digest::Hasher);

impl Hasher {
    pub fn new(algo: HashAlgo) -> Hasher {
        Hasher(ferry_http::digest::Hasher::new(algo.into()))
    }
    pub fn update(&mut self, data: &[u8]) {
        self.0.update(data)
    }
    pub fn finish(self) -> Vec<u8> {
        self.0.finalize().to_vec()
    }
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
    let mut s = b.read(path, 0, None).await?;
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
    match b.hash(path, algo).await? {
        Some(h) => Ok((h, false)),
        None => Ok((by_reading(b, path, algo).await?, true)),
    }
}

/// The algorithm two backends should compare with: one both compute
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
