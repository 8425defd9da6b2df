//! Is the served directory on a local filesystem?
//!
//! On one, the SFTP and HTTP servers make their metadata system calls
//! (path checks, open, stat, rename, close, mkdir, ...) on the
//! connection's own thread, as OpenSSH's
//! sftp-server and nginx do: they take microseconds from the dentry and
//! inode caches, and handing each to the blocking pool cost more than the
//! call itself. 1000 x 20 kB uploaded to ferry serve on tmpfs: 0.188 s
//! with every call on the pool, 0.122 s with metadata on the session's
//! thread, server CPU 0.176 -> 0.098 s (docs/internals/server.md). On a
//! network or FUSE filesystem a metadata call can wait for a peer, so
//! there it stays on the pool. File data (SFTP READ and WRITE, HTTP
//! bodies) always goes to the pool; the one exception is HTTP's digest of
//! a small file (up to 256 KiB) hashed when it is opened.

use std::path::Path;

/// `statfs` magic numbers of local filesystems (linux/magic.h).
const LOCAL: &[u32] = &[
    0x0102_1994, // tmpfs
    0x8584_58f6, // ramfs
    0x0000_ef53, // ext2, ext3, ext4
    0x5846_5342, // xfs
    0x9123_683e, // btrfs
    0xf2f5_2010, // f2fs
    0xca45_1a4e, // bcachefs
    0x2fc1_2fc1, // zfs
    0x794c_7630, // overlayfs (containers; its layers are local)
];

/// True when `path` is on a filesystem whose metadata calls do not wait
/// for a network peer or a user-space daemon.
pub fn is_local(path: &Path) -> bool {
    match rustix::fs::statfs(path) {
        // f_type's width and sign differ between architectures; the magic
        // numbers are 32-bit.
        Ok(s) => LOCAL.contains(&((s.f_type as u64 & 0xffff_ffff) as u32)),
        Err(_) => false,
    }
}

/// Run a metadata call: on the caller's thread when `inline` (a local
/// filesystem, [`is_local`]), else on the blocking pool. The SFTP and HTTP
/// servers both go through here.
pub(crate) async fn run<T, F>(inline: bool, f: F) -> Result<T, tokio::task::JoinError>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    if inline {
        return Ok(f());
    }
    tokio::task::spawn_blocking(f).await
}

#[cfg(test)]
mod tests {
    #[test]
    fn dev_shm_is_local_and_proc_is_not() {
        if std::path::Path::new("/dev/shm").is_dir() {
            assert!(super::is_local(std::path::Path::new("/dev/shm")));
        }
        assert!(!super::is_local(std::path::Path::new("/proc")));
    }
}
