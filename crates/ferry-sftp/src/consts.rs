//! Wire numbers of SFTP v3, in one place, with where they come from.
//!
//! Packet types and status codes: draft-ietf-secsh-filexfer-02 sections 3
//! and 7. Extension names: OpenSSH's PROTOCOL document, section 4.

/// Protocol version this crate speaks (draft-02 is version 3).
pub const SFTP_VERSION: u32 = 3;

// Packet types (draft-02 section 3).
pub const SSH_FXP_INIT: u8 = 1;
pub const SSH_FXP_VERSION: u8 = 2;
pub const SSH_FXP_OPEN: u8 = 3;
pub const SSH_FXP_CLOSE: u8 = 4;
pub const SSH_FXP_READ: u8 = 5;
pub const SSH_FXP_WRITE: u8 = 6;
pub const SSH_FXP_LSTAT: u8 = 7;
pub const SSH_FXP_FSTAT: u8 = 8;
pub const SSH_FXP_SETSTAT: u8 = 9;
pub const SSH_FXP_FSETSTAT: u8 = 10;
pub const SSH_FXP_OPENDIR: u8 = 11;
pub const SSH_FXP_READDIR: u8 = 12;
pub const SSH_FXP_REMOVE: u8 = 13;
pub const SSH_FXP_MKDIR: u8 = 14;
pub const SSH_FXP_RMDIR: u8 = 15;
pub const SSH_FXP_REALPATH: u8 = 16;
pub const SSH_FXP_STAT: u8 = 17;
pub const SSH_FXP_RENAME: u8 = 18;
pub const SSH_FXP_READLINK: u8 = 19;
pub const SSH_FXP_SYMLINK: u8 = 20;
pub const SSH_FXP_STATUS: u8 = 101;
pub const SSH_FXP_HANDLE: u8 = 102;
pub const SSH_FXP_DATA: u8 = 103;
pub const SSH_FXP_NAME: u8 = 104;
pub const SSH_FXP_ATTRS: u8 = 105;
pub const SSH_FXP_EXTENDED: u8 = 200;
pub const SSH_FXP_EXTENDED_REPLY: u8 = 201;

// Attribute flags (draft-02 section 5).
pub const SSH_FILEXFER_ATTR_SIZE: u32 = 0x0000_0001;
pub const SSH_FILEXFER_ATTR_UIDGID: u32 = 0x0000_0002;
pub const SSH_FILEXFER_ATTR_PERMISSIONS: u32 = 0x0000_0004;
pub const SSH_FILEXFER_ATTR_ACMODTIME: u32 = 0x0000_0008;
pub const SSH_FILEXFER_ATTR_EXTENDED: u32 = 0x8000_0000;

// Open flags (draft-02 section 6.3).
pub const SSH_FXF_READ: u32 = 0x0000_0001;
pub const SSH_FXF_WRITE: u32 = 0x0000_0002;
pub const SSH_FXF_APPEND: u32 = 0x0000_0004;
pub const SSH_FXF_CREAT: u32 = 0x0000_0008;
pub const SSH_FXF_TRUNC: u32 = 0x0000_0010;
pub const SSH_FXF_EXCL: u32 = 0x0000_0020;

// OpenSSH extensions (OpenSSH PROTOCOL, section 4).
pub const EXT_POSIX_RENAME: &str = "posix-rename@openssh.com";
pub const EXT_STATVFS: &str = "statvfs@openssh.com";
pub const EXT_FSTATVFS: &str = "fstatvfs@openssh.com";
pub const EXT_HARDLINK: &str = "hardlink@openssh.com";
pub const EXT_FSYNC: &str = "fsync@openssh.com";
pub const EXT_LIMITS: &str = "limits@openssh.com";
pub const EXT_EXPAND_PATH: &str = "expand-path@openssh.com";
pub const EXT_COPY_DATA: &str = "copy-data";
pub const EXT_LSETSTAT: &str = "lsetstat@openssh.com";
/// A hash of a file computed by the server (draft-ietf-secsh-filexfer-
/// extensions-00 section 3, as ProFTPD's mod_sftp implements it): ferry
/// serve answers `blake3` and `sha256`, so `ferry sync --checksum` reads
/// no file through the link.
pub const EXT_CHECK_FILE_NAME: &str = "check-file-name";

/// An SFTP status code (draft-02 section 7). Unknown codes are kept as they
/// came, since later protocol versions define more.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StatusCode(pub u32);

impl StatusCode {
    pub const OK: StatusCode = StatusCode(0);
    pub const EOF: StatusCode = StatusCode(1);
    pub const NO_SUCH_FILE: StatusCode = StatusCode(2);
    pub const PERMISSION_DENIED: StatusCode = StatusCode(3);
    pub const FAILURE: StatusCode = StatusCode(4);
    pub const BAD_MESSAGE: StatusCode = StatusCode(5);
    pub const NO_CONNECTION: StatusCode = StatusCode(6);
    pub const CONNECTION_LOST: StatusCode = StatusCode(7);
    pub const OP_UNSUPPORTED: StatusCode = StatusCode(8);

    /// A short English name, for error messages when the server sent none.
    pub fn describe(self) -> &'static str {
        match self.0 {
            0 => "ok",
            1 => "end of file",
            2 => "no such file",
            3 => "permission denied",
            4 => "failure",
            5 => "bad message",
            6 => "no connection",
            7 => "connection lost",
            8 => "operation unsupported",
            _ => "unknown status",
        }
    }
}

impl std::fmt::Display for StatusCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.describe(), self.0)
    }
}
