//! OpenSSH client configuration for ferry: `ssh_config` files and `known_hosts`.
pub mod config;
pub mod known_hosts;
mod pattern;
