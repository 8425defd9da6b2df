//! File attributes (draft-02 section 5): every field optional, presence
//! given by a flags word.
use bytes::{BufMut, Bytes, BytesMut};

use crate::consts::*;
use crate::wire::{put_string, DecodeError, Reader};

/// The ATTRS structure. `None` means "not sent".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileAttrs {
    pub size: Option<u64>,
    pub uid_gid: Option<(u32, u32)>,
    /// Full `st_mode`, file type bits included (as OpenSSH sends it).
    pub permissions: Option<u32>,
    /// (atime, mtime), seconds since the epoch.
    pub atime_mtime: Option<(u32, u32)>,
    pub extended: Vec<(Bytes, Bytes)>,
}

/// `S_IFMT` and the type bits, as POSIX defines them and OpenSSH sends them.
const S_IFMT: u32 = 0o170000;
const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFLNK: u32 = 0o120000;

impl FileAttrs {
    pub fn is_dir(&self) -> bool {
        self.permissions.is_some_and(|p| p & S_IFMT == S_IFDIR)
    }
    pub fn is_regular(&self) -> bool {
        self.permissions.is_some_and(|p| p & S_IFMT == S_IFREG)
    }
    pub fn is_symlink(&self) -> bool {
        self.permissions.is_some_and(|p| p & S_IFMT == S_IFLNK)
    }
    pub fn mtime(&self) -> Option<u32> {
        self.atime_mtime.map(|(_, m)| m)
    }

    fn flags(&self) -> u32 {
        let mut f = 0;
        if self.size.is_some() {
            f |= SSH_FILEXFER_ATTR_SIZE;
        }
        if self.uid_gid.is_some() {
            f |= SSH_FILEXFER_ATTR_UIDGID;
        }
        if self.permissions.is_some() {
            f |= SSH_FILEXFER_ATTR_PERMISSIONS;
        }
        if self.atime_mtime.is_some() {
            f |= SSH_FILEXFER_ATTR_ACMODTIME;
        }
        if !self.extended.is_empty() {
            f |= SSH_FILEXFER_ATTR_EXTENDED;
        }
        f
    }

    pub(crate) fn encode(&self, out: &mut BytesMut) {
        out.put_u32(self.flags());
        if let Some(size) = self.size {
            out.put_u64(size);
        }
        if let Some((uid, gid)) = self.uid_gid {
            out.put_u32(uid);
            out.put_u32(gid);
        }
        if let Some(p) = self.permissions {
            out.put_u32(p);
        }
        if let Some((a, m)) = self.atime_mtime {
            out.put_u32(a);
            out.put_u32(m);
        }
        if !self.extended.is_empty() {
            out.put_u32(self.extended.len() as u32);
            for (k, v) in &self.extended {
                put_string(out, k);
                put_string(out, v);
            }
        }
    }

    pub(crate) fn decode(r: &mut Reader) -> Result<Self, DecodeError> {
        let flags = r.u32("attribute flags")?;
        let mut a = FileAttrs::default();
        if flags & SSH_FILEXFER_ATTR_SIZE != 0 {
            a.size = Some(r.u64("size")?);
        }
        if flags & SSH_FILEXFER_ATTR_UIDGID != 0 {
            a.uid_gid = Some((r.u32("uid")?, r.u32("gid")?));
        }
        if flags & SSH_FILEXFER_ATTR_PERMISSIONS != 0 {
            a.permissions = Some(r.u32("permissions")?);
        }
        if flags & SSH_FILEXFER_ATTR_ACMODTIME != 0 {
            a.atime_mtime = Some((r.u32("atime")?, r.u32("mtime")?));
        }
        if flags & SSH_FILEXFER_ATTR_EXTENDED != 0 {
            let count = r.u32("extended count")?;
            let count = r.check_count(count, 8, "extended attribute")?;
            let mut ext = Vec::with_capacity(count);
            for _ in 0..count {
                ext.push((r.string("extended type")?, r.string("extended data")?));
            }
            a.extended = ext;
        }
        Ok(a)
    }
}

/// A Unix time in UTC as (year, month, day, hour, minute, second), by
/// Howard Hinnant's days-to-civil; for `ls -l`-style long names and any
/// other place that prints a date without a calendar crate.
pub fn civil(t: i64) -> (i64, u32, u32, u32, u32, u32) {
    let days = t.div_euclid(86_400);
    let secs = t.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (
        y,
        m,
        d,
        (secs / 3600) as u32,
        (secs % 3600 / 60) as u32,
        (secs % 60) as u32,
    )
}
