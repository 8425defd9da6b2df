//! ferry-ssh
