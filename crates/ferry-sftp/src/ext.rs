//! Payloads of EXTENDED_REPLY for the OpenSSH extensions that have one.
use bytes::{BufMut, Bytes, BytesMut};

use crate::wire::{DecodeError, Reader};

/// limits@openssh.com reply (OpenSSH PROTOCOL 4.8). Zero means "no limit".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_packet_len: u64,
    pub max_read_len: u64,
    pub max_write_len: u64,
    pub max_open_handles: u64,
}

impl Limits {
    pub fn decode(data: Bytes) -> Result<Limits, DecodeError> {
        let mut r = Reader::new(data);
        let l = Limits {
            max_packet_len: r.u64("max packet length")?,
            max_read_len: r.u64("max read length")?,
            max_write_len: r.u64("max write length")?,
            max_open_handles: r.u64("max open handles")?,
        };
        Ok(l)
    }

    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(32);
        b.put_u64(self.max_packet_len);
        b.put_u64(self.max_read_len);
        b.put_u64(self.max_write_len);
        b.put_u64(self.max_open_handles);
        b.freeze()
    }
}

/// statvfs@openssh.com reply (OpenSSH PROTOCOL 4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Statvfs {
    pub bsize: u64,
    pub frsize: u64,
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub favail: u64,
    pub fsid: u64,
    pub flag: u64,
    pub namemax: u64,
}

impl Statvfs {
    pub fn decode(data: Bytes) -> Result<Statvfs, DecodeError> {
        let mut r = Reader::new(data);
        Ok(Statvfs {
            bsize: r.u64("f_bsize")?,
            frsize: r.u64("f_frsize")?,
            blocks: r.u64("f_blocks")?,
            bfree: r.u64("f_bfree")?,
            bavail: r.u64("f_bavail")?,
            files: r.u64("f_files")?,
            ffree: r.u64("f_ffree")?,
            favail: r.u64("f_favail")?,
            fsid: r.u64("f_fsid")?,
            flag: r.u64("f_flag")?,
            namemax: r.u64("f_namemax")?,
        })
    }

    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(88);
        for v in [
            self.bsize,
            self.frsize,
            self.blocks,
            self.bfree,
            self.bavail,
            self.files,
            self.ffree,
            self.favail,
            self.fsid,
            self.flag,
            self.namemax,
        ] {
            b.put_u64(v);
        }
        b.freeze()
    }

    /// Bytes available to an unprivileged user.
    pub fn available_bytes(&self) -> u64 {
        self.bavail.saturating_mul(self.frsize.max(1))
    }
}

/// The reply to `check-file-name`: the name `check-file`, the algorithm
/// the server used, then the hash bytes (one hash when the request's
/// block size was 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckFileReply {
    pub algorithm: Bytes,
    pub hash: Bytes,
}

impl CheckFileReply {
    pub fn decode(data: Bytes) -> Result<CheckFileReply, DecodeError> {
        let mut r = Reader::new(data);
        let _name = r.string("reply name")?;
        let algorithm = r.string("hash algorithm")?;
        Ok(CheckFileReply {
            algorithm,
            hash: r.rest(),
        })
    }

    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(32 + self.algorithm.len() + self.hash.len());
        crate::wire::put_string(&mut b, b"check-file");
        crate::wire::put_string(&mut b, &self.algorithm);
        b.put_slice(&self.hash);
        b.freeze()
    }
}
