//! OpenSSH client configuration for ferry: `ssh_config` files, `known_hosts`
//! (host keys, `@cert-authority` and `@revoked` lines) and `ProxyJump`
//! chains.
pub mod config;
pub mod known_hosts;
mod pattern;
pub mod proxy;
