//! The HTTP side of `ferry serve`: HTTPS with HTTP/1.1 and HTTP/2 by ALPN,
//! and plain HTTP when asked. (Being written: for now every connection is
//! closed at once.)
use std::net::SocketAddr;
use std::sync::Arc;

use crate::Shared;

/// One HTTP listener's service: TLS (when configured) and the request
/// handler over the served root.
pub struct HttpService {
    #[allow(dead_code)]
    shared: Arc<Shared>,
}

impl HttpService {
    /// `tls`: certificate chain and private key, PEM. `None`: plain HTTP.
    pub fn new(shared: Arc<Shared>, tls: Option<(&[u8], &[u8])>) -> std::io::Result<HttpService> {
        let _ = tls;
        Ok(HttpService { shared })
    }

    /// Serve one accepted connection until it closes.
    pub async fn serve(self: Arc<Self>, stream: tokio::net::TcpStream, peer: SocketAddr) {
        tracing::debug!(%peer, "HTTP is not implemented yet; closing");
        drop(stream);
    }
}
