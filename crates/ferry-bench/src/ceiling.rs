//! The limits a cell can hit that are not the tools': the work directory's
//! file system and the CPU.
//!
//! On a disk file system, many small files are bound by creating them (800
//! x 20 kB over HTTPS to ext4 ran at 48 MB/s for ferry and curl alike,
//! against 199 and 110 MB/s on tmpfs; issue 26). A ratio between two tools
//! that both ran into that wall is no win and no loss, so the bench
//! measures the wall itself: a plain local copy of each set into the work
//! directory (read, create, write, no fsync, as the tools do), best of two
//! (the first write into memory the VM gave back to its host is slow). The
//! CPU wall is the machine's cores: client and server share them here.
//! [`crate::report::ceilings`] turns both into the report's verdict.
use std::fs;
use std::io::{Read, Write};
use std::path::Path;
use std::time::Instant;

use anyhow::Result;

use crate::data::DataSet;

/// The file system `path` is on, by name (`tmpfs`, `ext4`, ...), from
/// statfs's magic number.
pub fn fs_type(path: &Path) -> String {
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
        return "unknown".into();
    };
    // SAFETY: an all-zero statfs is a valid out-parameter.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a statfs to fill.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return "unknown".into();
    }
    // Magic numbers from linux/magic.h.
    match st.f_type as u64 {
        0x0102_1994 => "tmpfs".into(),
        0xEF53 => "ext4".into(), // ext2/3/4 share it
        0x5846_5342 => "xfs".into(),
        0x9123_683E => "btrfs".into(),
        0x794C_7630 => "overlayfs".into(),
        0x6969 => "nfs".into(),
        0x2FC1_2FC1 => "zfs".into(),
        other => format!("fs 0x{other:x}"),
    }
}

/// Whether `path` is on an ext4 without a journal: its mount's device
/// (`/proc/self/mountinfo`, the longest mount point above `path`) has no
/// `/proc/fs/jbd2/DEV-*`. There ext4 skips, when it makes a file, the
/// inodes freed in the last minutes, so a many-file cell pays for the
/// deletions before it (docs/internals/bench.md, "Cells").
pub fn ext4_without_journal(path: &Path) -> bool {
    if fs_type(path) != "ext4" {
        return false;
    }
    let Ok(path) = fs::canonicalize(path) else {
        return false;
    };
    let Ok(info) = fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    // mountinfo: ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS... - TYPE SOURCE SUPER
    let mut best: Option<(usize, String)> = None;
    for line in info.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let (Some(point), Some(dash)) = (f.get(4), f.iter().position(|x| *x == "-")) else {
            continue;
        };
        let (Some(&"ext4"), Some(source)) = (f.get(dash + 1), f.get(dash + 2)) else {
            continue;
        };
        let point = point.replace("\\040", " ");
        if path.starts_with(&point) && best.as_ref().is_none_or(|(n, _)| point.len() > *n) {
            best = Some((point.len(), source.to_string()));
        }
    }
    let Some((_, source)) = best else {
        return false;
    };
    let dev = source.rsplit('/').next().unwrap_or_default().to_string();
    let journals = fs::read_dir("/proc/fs/jbd2")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    !journals.iter().any(|j| j.starts_with(&format!("{dev}-")))
}

/// MB/s (10^6 bytes of file payload per second) of a plain copy of the
/// set's files into a fresh directory under `scratch`, the faster of two;
/// the copy is removed after each.
pub fn local_copy_mb_per_s(ds: &DataSet, scratch: &Path) -> Result<f64> {
    let mut best = 0.0f64;
    let mut buf = vec![0u8; 1 << 20];
    for round in 0..2 {
        let dest = scratch.join(format!("fs-ceiling-{}-{round}", ds.name));
        let _ = fs::remove_dir_all(&dest);
        fs::create_dir_all(&dest)?;
        let t = Instant::now();
        for f in &ds.files {
            let mut from = fs::File::open(ds.dir.join(&f.name))?;
            let to_path = dest.join(&f.name);
            if let Some(parent) = to_path.parent() {
                fs::create_dir_all(parent)?;
            }
            let mut to = fs::File::create(to_path)?;
            loop {
                let n = from.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                to.write_all(buf.get(..n).unwrap_or_default())?;
            }
        }
        let secs = t.elapsed().as_secs_f64().max(1e-6);
        best = best.max(ds.total_bytes as f64 / 1e6 / secs);
        fs::remove_dir_all(&dest)?;
    }
    Ok((best * 10.0).round() / 10.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_ext4_can_lack_a_journal() {
        assert!(!ext4_without_journal(Path::new("/proc")));
        if fs_type(Path::new("/dev/shm")) == "tmpfs" {
            assert!(!ext4_without_journal(Path::new("/dev/shm")));
        }
        // Said for the record: which it is depends on the host.
        for p in ["/var/tmp", "/mnt/jext4"] {
            eprintln!(
                "{p}: ext4 without a journal: {}",
                ext4_without_journal(Path::new(p))
            );
        }
    }
}
