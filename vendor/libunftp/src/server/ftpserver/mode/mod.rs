mod pooled;
#[cfg(feature = "proxy_protocol")]
mod proxy;
