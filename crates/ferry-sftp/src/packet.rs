//! Every SFTP v3 packet, typed, with its encoder and its decoder.
//!
//! Layout of a packet on the wire (draft-02 section 3):
//! `uint32 length, byte type, [uint32 request-id], fields...`.
//! The encoders write the length prefix; the decoders take one frame without
//! it (what [`crate::Framer::next_frame`] yields).
use bytes::{BufMut, Bytes, BytesMut};

use crate::attrs::FileAttrs;
use crate::consts::*;
use crate::wire::{finish_packet, put_string, start_packet, DecodeError, Reader};

/// `pflags` of SSH_FXP_OPEN.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OpenFlags(pub u32);

impl OpenFlags {
    pub const READ: OpenFlags = OpenFlags(SSH_FXF_READ);
    pub const WRITE: OpenFlags = OpenFlags(SSH_FXF_WRITE);
    pub const APPEND: OpenFlags = OpenFlags(SSH_FXF_APPEND);
    pub const CREATE: OpenFlags = OpenFlags(SSH_FXF_CREAT);
    pub const TRUNCATE: OpenFlags = OpenFlags(SSH_FXF_TRUNC);
    pub const EXCLUDE: OpenFlags = OpenFlags(SSH_FXF_EXCL);

    pub fn contains(self, other: OpenFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for OpenFlags {
    type Output = OpenFlags;
    fn bitor(self, rhs: OpenFlags) -> OpenFlags {
        OpenFlags(self.0 | rhs.0)
    }
}

/// What a client sends. Paths and handles are byte strings: SFTP v3 does not
/// say what encoding file names have, and OpenSSH passes bytes through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Init {
        version: u32,
        extensions: Vec<(Bytes, Bytes)>,
    },
    Open {
        id: u32,
        path: Bytes,
        flags: OpenFlags,
        attrs: FileAttrs,
    },
    Close {
        id: u32,
        handle: Bytes,
    },
    Read {
        id: u32,
        handle: Bytes,
        offset: u64,
        len: u32,
    },
    Write {
        id: u32,
        handle: Bytes,
        offset: u64,
        data: Bytes,
    },
    Lstat {
        id: u32,
        path: Bytes,
    },
    Fstat {
        id: u32,
        handle: Bytes,
    },
    Setstat {
        id: u32,
        path: Bytes,
        attrs: FileAttrs,
    },
    Fsetstat {
        id: u32,
        handle: Bytes,
        attrs: FileAttrs,
    },
    Opendir {
        id: u32,
        path: Bytes,
    },
    Readdir {
        id: u32,
        handle: Bytes,
    },
    Remove {
        id: u32,
        path: Bytes,
    },
    Mkdir {
        id: u32,
        path: Bytes,
        attrs: FileAttrs,
    },
    Rmdir {
        id: u32,
        path: Bytes,
    },
    Realpath {
        id: u32,
        path: Bytes,
    },
    Stat {
        id: u32,
        path: Bytes,
    },
    Rename {
        id: u32,
        from: Bytes,
        to: Bytes,
    },
    Readlink {
        id: u32,
        path: Bytes,
    },
    /// Wire order is OpenSSH's (target first, then the link's own path),
    /// which is the reverse of the draft; every server in use follows
    /// OpenSSH here.
    Symlink {
        id: u32,
        target: Bytes,
        link: Bytes,
    },
    Extended {
        id: u32,
        request: Extended,
    },
}

/// SSH_FXP_EXTENDED requests this crate knows, and the rest as raw bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Extended {
    PosixRename {
        from: Bytes,
        to: Bytes,
    },
    Statvfs {
        path: Bytes,
    },
    Fstatvfs {
        handle: Bytes,
    },
    Hardlink {
        from: Bytes,
        to: Bytes,
    },
    Fsync {
        handle: Bytes,
    },
    Limits,
    ExpandPath {
        path: Bytes,
    },
    CopyData {
        read_handle: Bytes,
        read_offset: u64,
        read_len: u64,
        write_handle: Bytes,
        write_offset: u64,
    },
    Lsetstat {
        path: Bytes,
        attrs: FileAttrs,
    },
    /// `check-file-name`: hash `length` bytes (0: to the end) from
    /// `start`, with the first algorithm of the comma-separated list the
    /// server knows; `block_size` 0 asks for one hash of the whole range.
    CheckFileName {
        path: Bytes,
        algorithms: Bytes,
        start: u64,
        length: u64,
        block_size: u32,
    },
    Other {
        name: Bytes,
        data: Bytes,
    },
}

impl Extended {
    pub fn name(&self) -> &[u8] {
        match self {
            Extended::PosixRename { .. } => EXT_POSIX_RENAME.as_bytes(),
            Extended::Statvfs { .. } => EXT_STATVFS.as_bytes(),
            Extended::Fstatvfs { .. } => EXT_FSTATVFS.as_bytes(),
            Extended::Hardlink { .. } => EXT_HARDLINK.as_bytes(),
            Extended::Fsync { .. } => EXT_FSYNC.as_bytes(),
            Extended::Limits => EXT_LIMITS.as_bytes(),
            Extended::ExpandPath { .. } => EXT_EXPAND_PATH.as_bytes(),
            Extended::CopyData { .. } => EXT_COPY_DATA.as_bytes(),
            Extended::Lsetstat { .. } => EXT_LSETSTAT.as_bytes(),
            Extended::CheckFileName { .. } => EXT_CHECK_FILE_NAME.as_bytes(),
            Extended::Other { name, .. } => name,
        }
    }
}

/// One entry of SSH_FXP_NAME.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameEntry {
    pub filename: Bytes,
    /// `ls -l` style line; informational only (draft-02 says not to parse it).
    pub longname: Bytes,
    pub attrs: FileAttrs,
}

/// What a server sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    Version {
        version: u32,
        extensions: Vec<(Bytes, Bytes)>,
    },
    Status {
        id: u32,
        code: StatusCode,
        message: Bytes,
        lang: Bytes,
    },
    Handle {
        id: u32,
        handle: Bytes,
    },
    Data {
        id: u32,
        data: Bytes,
    },
    Name {
        id: u32,
        entries: Vec<NameEntry>,
    },
    Attrs {
        id: u32,
        attrs: FileAttrs,
    },
    /// The payload's meaning depends on the request it answers; see
    /// [`crate::Limits::decode`] and [`crate::Statvfs::decode`].
    ExtendedReply {
        id: u32,
        data: Bytes,
    },
}

/// Bytes of a WRITE packet before its data: length, type, id, handle,
/// offset, data length.
pub fn write_prefix_len(handle_len: usize) -> usize {
    4 + 1 + 4 + 4 + handle_len + 8 + 4
}

impl Request {
    /// The request id; INIT has none.
    pub fn id(&self) -> Option<u32> {
        use Request::*;
        match self {
            Init { .. } => None,
            Open { id, .. } | Close { id, .. } | Read { id, .. } | Write { id, .. } => Some(*id),
            Lstat { id, .. } | Fstat { id, .. } | Setstat { id, .. } | Fsetstat { id, .. } => {
                Some(*id)
            }
            Opendir { id, .. } | Readdir { id, .. } | Remove { id, .. } | Mkdir { id, .. } => {
                Some(*id)
            }
            Rmdir { id, .. } | Realpath { id, .. } | Stat { id, .. } | Rename { id, .. } => {
                Some(*id)
            }
            Readlink { id, .. } | Symlink { id, .. } | Extended { id, .. } => Some(*id),
        }
    }

    /// Append this packet, length prefix included, to `out`.
    pub fn encode(&self, out: &mut BytesMut) {
        use Request::*;
        let (ty, id) = (self.packet_type(), self.id());
        let at = start_packet(out, ty);
        if let Some(id) = id {
            out.put_u32(id);
        }
        match self {
            Init {
                version,
                extensions,
            } => {
                out.put_u32(*version);
                for (k, v) in extensions {
                    put_string(out, k);
                    put_string(out, v);
                }
            }
            Open {
                path, flags, attrs, ..
            } => {
                put_string(out, path);
                out.put_u32(flags.0);
                attrs.encode(out);
            }
            Close { handle, .. } | Fstat { handle, .. } | Readdir { handle, .. } => {
                put_string(out, handle)
            }
            Read {
                handle,
                offset,
                len,
                ..
            } => {
                put_string(out, handle);
                out.put_u64(*offset);
                out.put_u32(*len);
            }
            Write {
                handle,
                offset,
                data,
                ..
            } => {
                put_string(out, handle);
                out.put_u64(*offset);
                put_string(out, data);
            }
            Lstat { path, .. }
            | Opendir { path, .. }
            | Remove { path, .. }
            | Rmdir { path, .. }
            | Realpath { path, .. }
            | Stat { path, .. }
            | Readlink { path, .. } => put_string(out, path),
            Setstat { path, attrs, .. } | Mkdir { path, attrs, .. } => {
                put_string(out, path);
                attrs.encode(out);
            }
            Fsetstat { handle, attrs, .. } => {
                put_string(out, handle);
                attrs.encode(out);
            }
            Rename { from, to, .. } => {
                put_string(out, from);
                put_string(out, to);
            }
            Symlink { target, link, .. } => {
                put_string(out, target);
                put_string(out, link);
            }
            Extended { request, .. } => {
                put_string(out, request.name());
                encode_extended(request, out);
            }
        }
        finish_packet(out, at);
    }

    /// Write the header of a WRITE packet whose `data_len` bytes of data the
    /// caller appends itself, so that file data can be read straight into
    /// the send buffer instead of being copied into it.
    pub fn encode_write_prefix(
        out: &mut BytesMut,
        id: u32,
        handle: &[u8],
        offset: u64,
        data_len: u32,
    ) {
        let len = (write_prefix_len(handle.len()) - 4) as u32 + data_len;
        out.put_u32(len);
        out.put_u8(SSH_FXP_WRITE);
        out.put_u32(id);
        put_string(out, handle);
        out.put_u64(offset);
        out.put_u32(data_len);
    }

    /// Fill the first [`write_prefix_len`] bytes of `buf` with the header
    /// of a WRITE packet whose data is the rest of `buf`, so file data can
    /// be read straight into its place in the packet. Returns false (and
    /// writes nothing) when `buf` is too short for the header or too long
    /// for a packet.
    pub fn fill_write_prefix(buf: &mut [u8], id: u32, handle: &[u8], offset: u64) -> bool {
        let prefix = write_prefix_len(handle.len());
        let Some(data_len) = buf.len().checked_sub(prefix) else {
            return false;
        };
        let Ok(data_len) = u32::try_from(data_len) else {
            return false;
        };
        let mut head = BytesMut::with_capacity(prefix);
        Request::encode_write_prefix(&mut head, id, handle, offset, data_len);
        match buf.get_mut(..prefix) {
            Some(dst) if dst.len() == head.len() => {
                dst.copy_from_slice(&head);
                true
            }
            _ => false,
        }
    }

    pub fn packet_type(&self) -> u8 {
        use Request::*;
        match self {
            Init { .. } => SSH_FXP_INIT,
            Open { .. } => SSH_FXP_OPEN,
            Close { .. } => SSH_FXP_CLOSE,
            Read { .. } => SSH_FXP_READ,
            Write { .. } => SSH_FXP_WRITE,
            Lstat { .. } => SSH_FXP_LSTAT,
            Fstat { .. } => SSH_FXP_FSTAT,
            Setstat { .. } => SSH_FXP_SETSTAT,
            Fsetstat { .. } => SSH_FXP_FSETSTAT,
            Opendir { .. } => SSH_FXP_OPENDIR,
            Readdir { .. } => SSH_FXP_READDIR,
            Remove { .. } => SSH_FXP_REMOVE,
            Mkdir { .. } => SSH_FXP_MKDIR,
            Rmdir { .. } => SSH_FXP_RMDIR,
            Realpath { .. } => SSH_FXP_REALPATH,
            Stat { .. } => SSH_FXP_STAT,
            Rename { .. } => SSH_FXP_RENAME,
            Readlink { .. } => SSH_FXP_READLINK,
            Symlink { .. } => SSH_FXP_SYMLINK,
            Extended { .. } => SSH_FXP_EXTENDED,
        }
    }

    /// Decode one frame (no length prefix), as a server does.
    pub fn decode(frame: Bytes) -> Result<Request, DecodeError> {
        let (req, r, ty) = Self::decode_fields(frame)?;
        r.finish(ty)?;
        Ok(req)
    }

    /// Like [`Request::decode`], but bytes after the last field are
    /// ignored (and counted in the second value), as OpenSSH's sftp-server
    /// does. A server needs this: some clients (Go's pkg/sftp, so rclone)
    /// send WRITE packets longer than their data.
    pub fn decode_lenient(frame: Bytes) -> Result<(Request, usize), DecodeError> {
        let (req, r, _) = Self::decode_fields(frame)?;
        Ok((req, r.remaining()))
    }

    fn decode_fields(frame: Bytes) -> Result<(Request, Reader, u8), DecodeError> {
        use Request::*;
        let mut r = Reader::new(frame);
        let ty = r.u8("packet type").map_err(|_| DecodeError::Empty)?;
        if ty == SSH_FXP_INIT {
            let version = r.u32("version")?;
            let extensions = decode_pairs(&mut r)?;
            return Ok((
                Init {
                    version,
                    extensions,
                },
                r,
                ty,
            ));
        }
        let id = r.u32("request id")?;
        let req = match ty {
            SSH_FXP_OPEN => Open {
                id,
                path: r.string("path")?,
                flags: OpenFlags(r.u32("pflags")?),
                attrs: FileAttrs::decode(&mut r)?,
            },
            SSH_FXP_CLOSE => Close {
                id,
                handle: r.string("handle")?,
            },
            SSH_FXP_READ => Read {
                id,
                handle: r.string("handle")?,
                offset: r.u64("offset")?,
                len: r.u32("length")?,
            },
            SSH_FXP_WRITE => Write {
                id,
                handle: r.string("handle")?,
                offset: r.u64("offset")?,
                data: r.string("data")?,
            },
            SSH_FXP_LSTAT => Lstat {
                id,
                path: r.string("path")?,
            },
            SSH_FXP_FSTAT => Fstat {
                id,
                handle: r.string("handle")?,
            },
            SSH_FXP_SETSTAT => Setstat {
                id,
                path: r.string("path")?,
                attrs: FileAttrs::decode(&mut r)?,
            },
            SSH_FXP_FSETSTAT => Fsetstat {
                id,
                handle: r.string("handle")?,
                attrs: FileAttrs::decode(&mut r)?,
            },
            SSH_FXP_OPENDIR => Opendir {
                id,
                path: r.string("path")?,
            },
            SSH_FXP_READDIR => Readdir {
                id,
                handle: r.string("handle")?,
            },
            SSH_FXP_REMOVE => Remove {
                id,
                path: r.string("path")?,
            },
            SSH_FXP_MKDIR => Mkdir {
                id,
                path: r.string("path")?,
                attrs: FileAttrs::decode(&mut r)?,
            },
            SSH_FXP_RMDIR => Rmdir {
                id,
                path: r.string("path")?,
            },
            SSH_FXP_REALPATH => Realpath {
                id,
                path: r.string("path")?,
            },
            SSH_FXP_STAT => Stat {
                id,
                path: r.string("path")?,
            },
            SSH_FXP_RENAME => Rename {
                id,
                from: r.string("old path")?,
                to: r.string("new path")?,
            },
            SSH_FXP_READLINK => Readlink {
                id,
                path: r.string("path")?,
            },
            SSH_FXP_SYMLINK => Symlink {
                id,
                target: r.string("target path")?,
                link: r.string("link path")?,
            },
            SSH_FXP_EXTENDED => Extended {
                id,
                request: decode_extended(&mut r)?,
            },
            other => return Err(DecodeError::UnknownType(other)),
        };
        Ok((req, r, ty))
    }
}

fn encode_extended(req: &Extended, out: &mut BytesMut) {
    match req {
        Extended::PosixRename { from, to } | Extended::Hardlink { from, to } => {
            put_string(out, from);
            put_string(out, to);
        }
        Extended::Statvfs { path } | Extended::ExpandPath { path } => put_string(out, path),
        Extended::Fstatvfs { handle } | Extended::Fsync { handle } => put_string(out, handle),
        Extended::Limits => {}
        Extended::CopyData {
            read_handle,
            read_offset,
            read_len,
            write_handle,
            write_offset,
        } => {
            put_string(out, read_handle);
            out.put_u64(*read_offset);
            out.put_u64(*read_len);
            put_string(out, write_handle);
            out.put_u64(*write_offset);
        }
        Extended::Lsetstat { path, attrs } => {
            put_string(out, path);
            attrs.encode(out);
        }
        Extended::CheckFileName {
            path,
            algorithms,
            start,
            length,
            block_size,
        } => {
            put_string(out, path);
            put_string(out, algorithms);
            out.put_u64(*start);
            out.put_u64(*length);
            out.put_u32(*block_size);
        }
        Extended::Other { data, .. } => out.put_slice(data),
    }
}

fn decode_extended(r: &mut Reader) -> Result<Extended, DecodeError> {
    let name = r.string("extension name")?;
    let known = |n: &str| name.as_ref() == n.as_bytes();
    Ok(if known(EXT_POSIX_RENAME) {
        Extended::PosixRename {
            from: r.string("old path")?,
            to: r.string("new path")?,
        }
    } else if known(EXT_HARDLINK) {
        Extended::Hardlink {
            from: r.string("old path")?,
            to: r.string("new path")?,
        }
    } else if known(EXT_STATVFS) {
        Extended::Statvfs {
            path: r.string("path")?,
        }
    } else if known(EXT_EXPAND_PATH) {
        Extended::ExpandPath {
            path: r.string("path")?,
        }
    } else if known(EXT_FSTATVFS) {
        Extended::Fstatvfs {
            handle: r.string("handle")?,
        }
    } else if known(EXT_FSYNC) {
        Extended::Fsync {
            handle: r.string("handle")?,
        }
    } else if known(EXT_LIMITS) {
        Extended::Limits
    } else if known(EXT_COPY_DATA) {
        Extended::CopyData {
            read_handle: r.string("read handle")?,
            read_offset: r.u64("read offset")?,
            read_len: r.u64("read length")?,
            write_handle: r.string("write handle")?,
            write_offset: r.u64("write offset")?,
        }
    } else if known(EXT_LSETSTAT) {
        Extended::Lsetstat {
            path: r.string("path")?,
            attrs: FileAttrs::decode(r)?,
        }
    } else if known(EXT_CHECK_FILE_NAME) {
        Extended::CheckFileName {
            path: r.string("path")?,
            algorithms: r.string("hash algorithms")?,
            start: r.u64("start offset")?,
            length: r.u64("length")?,
            block_size: r.u32("block size")?,
        }
    } else {
        Extended::Other {
            name,
            data: r.rest(),
        }
    })
}

fn decode_pairs(r: &mut Reader) -> Result<Vec<(Bytes, Bytes)>, DecodeError> {
    let mut v = Vec::new();
    while r.remaining() > 0 {
        v.push((r.string("extension name")?, r.string("extension data")?));
    }
    Ok(v)
}

/// Bytes of a DATA packet before its payload: length, type, id, data
/// length. A server that reads a file straight into a buffer reserves this
/// much in front and fills it with [`Response::fill_data_prefix`].
pub const DATA_PREFIX_LEN: usize = 4 + 1 + 4 + 4;

impl Response {
    /// The id of the request this answers; VERSION has none.
    pub fn id(&self) -> Option<u32> {
        use Response::*;
        match self {
            Version { .. } => None,
            Status { id, .. }
            | Handle { id, .. }
            | Data { id, .. }
            | Name { id, .. }
            | Attrs { id, .. }
            | ExtendedReply { id, .. } => Some(*id),
        }
    }

    pub fn packet_type(&self) -> u8 {
        use Response::*;
        match self {
            Version { .. } => SSH_FXP_VERSION,
            Status { .. } => SSH_FXP_STATUS,
            Handle { .. } => SSH_FXP_HANDLE,
            Data { .. } => SSH_FXP_DATA,
            Name { .. } => SSH_FXP_NAME,
            Attrs { .. } => SSH_FXP_ATTRS,
            ExtendedReply { .. } => SSH_FXP_EXTENDED_REPLY,
        }
    }

    /// Write the header of a DATA packet carrying `data_len` bytes into the
    /// first [`DATA_PREFIX_LEN`] bytes of `buf`; the payload follows it.
    /// Returns false when `buf` is too short.
    pub fn fill_data_prefix(buf: &mut [u8], id: u32, data_len: u32) -> bool {
        let Some(head) = buf.get_mut(..DATA_PREFIX_LEN) else {
            return false;
        };
        let packet_len = (DATA_PREFIX_LEN as u32 - 4).saturating_add(data_len);
        let mut hdr = [0u8; DATA_PREFIX_LEN];
        let mut w = &mut hdr[..];
        w.put_u32(packet_len);
        w.put_u8(SSH_FXP_DATA);
        w.put_u32(id);
        w.put_u32(data_len);
        head.copy_from_slice(&hdr);
        true
    }

    /// Append this packet, length prefix included, to `out`.
    pub fn encode(&self, out: &mut BytesMut) {
        use Response::*;
        let at = start_packet(out, self.packet_type());
        if let Some(id) = self.id() {
            out.put_u32(id);
        }
        match self {
            Version {
                version,
                extensions,
            } => {
                out.put_u32(*version);
                for (k, v) in extensions {
                    put_string(out, k);
                    put_string(out, v);
                }
            }
            Status {
                code,
                message,
                lang,
                ..
            } => {
                out.put_u32(code.0);
                put_string(out, message);
                put_string(out, lang);
            }
            Handle { handle, .. } => put_string(out, handle),
            Data { data, .. } => put_string(out, data),
            Name { entries, .. } => {
                out.put_u32(entries.len() as u32);
                for e in entries {
                    put_string(out, &e.filename);
                    put_string(out, &e.longname);
                    e.attrs.encode(out);
                }
            }
            Attrs { attrs, .. } => attrs.encode(out),
            ExtendedReply { data, .. } => out.put_slice(data),
        }
        finish_packet(out, at);
    }

    /// Decode one frame (no length prefix), as a client does. DATA payloads
    /// are slices of `frame`, not copies.
    pub fn decode(frame: Bytes) -> Result<Response, DecodeError> {
        use Response::*;
        let mut r = Reader::new(frame);
        let ty = r.u8("packet type").map_err(|_| DecodeError::Empty)?;
        if ty == SSH_FXP_VERSION {
            let version = r.u32("version")?;
            let extensions = decode_pairs(&mut r)?;
            return Ok(Version {
                version,
                extensions,
            });
        }
        let id = r.u32("request id")?;
        let resp = match ty {
            SSH_FXP_STATUS => {
                let code = StatusCode(r.u32("status code")?);
                // Some old servers omit message and language tag.
                let message = if r.remaining() > 0 {
                    r.string("status message")?
                } else {
                    Bytes::new()
                };
                let lang = if r.remaining() > 0 {
                    r.string("language tag")?
                } else {
                    Bytes::new()
                };
                Status {
                    id,
                    code,
                    message,
                    lang,
                }
            }
            SSH_FXP_HANDLE => Handle {
                id,
                handle: r.string("handle")?,
            },
            SSH_FXP_DATA => Data {
                id,
                data: r.string("data")?,
            },
            SSH_FXP_NAME => {
                let count = r.u32("name count")?;
                // filename + longname + attr flags: at least 12 bytes each.
                let count = r.check_count(count, 12, "name")?;
                let mut entries = Vec::with_capacity(count);
                for _ in 0..count {
                    entries.push(NameEntry {
                        filename: r.string("filename")?,
                        longname: r.string("longname")?,
                        attrs: FileAttrs::decode(&mut r)?,
                    });
                }
                Name { id, entries }
            }
            SSH_FXP_ATTRS => Attrs {
                id,
                attrs: FileAttrs::decode(&mut r)?,
            },
            SSH_FXP_EXTENDED_REPLY => ExtendedReply { id, data: r.rest() },
            other => return Err(DecodeError::UnknownType(other)),
        };
        r.finish(ty)?;
        Ok(resp)
    }
}
