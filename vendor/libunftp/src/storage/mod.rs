//! Re-exports storage traits/types from unftp-core.

pub(crate) use unftp_core::storage::{Error, ErrorKind, FEATURE_RESTART, FEATURE_SITEMD5, Metadata, StorageBackend};
