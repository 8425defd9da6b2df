//! The edges of a connection's life: a stream wrapper that notes whether
//! the client has sent anything yet (so a silent connection can be
//! closed, see `serve_io`), and the lingering close at the end.
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

pub struct FirstByte<S> {
    inner: S,
    seen: Arc<AtomicBool>,
}

impl<S> FirstByte<S> {
    /// The wrapper, and the flag that turns true at the first byte read.
    pub fn new(inner: S) -> (FirstByte<S>, Arc<AtomicBool>) {
        let seen = Arc::new(AtomicBool::new(false));
        (
            FirstByte {
                inner,
                seen: seen.clone(),
            },
            seen,
        )
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for FirstByte<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.seen.store(true, Ordering::Release);
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for FirstByte<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The longest a finished connection keeps reading what the client sends.
pub const LINGER: std::time::Duration = std::time::Duration::from_secs(5);

/// A second handle on the connection's socket, taken before hyper owns the
/// stream, so the socket outlives hyper's handle for [`lingering_close`].
pub fn keep_socket(stream: &tokio::net::TcpStream) -> Option<std::net::TcpStream> {
    use std::os::fd::AsFd;
    stream
        .as_fd()
        .try_clone_to_owned()
        .ok()
        .map(std::net::TcpStream::from)
}

/// Send our FIN, then read and discard what the client still sends until
/// it closes too or [`LINGER`] passes; then close.
///
/// Closing at once, with bytes still arriving (h2 WINDOW_UPDATEs while the
/// client drains a response it was sent in full, the rest of a refused
/// upload), makes the kernel answer with a TCP reset, and the reset makes
/// the client's kernel drop response bytes the client has not read yet:
/// curl reported "Connection reset by peer" or "stream was not closed
/// cleanly" for a download the server had sent completely (test
/// `sigterm_lets_a_download_finish_and_closes_idle_connections`). nginx
/// calls this `lingering_close`.
pub async fn lingering_close(socket: std::net::TcpStream) {
    use tokio::io::AsyncReadExt;
    let _ = socket.shutdown(std::net::Shutdown::Write);
    let Ok(mut s) = tokio::net::TcpStream::from_std(socket) else {
        return;
    };
    let mut buf = vec![0u8; 16 * 1024];
    let mut drained = 0usize;
    let how = tokio::time::timeout(LINGER, async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) => return "the client closed".to_string(),
                Ok(n) => drained += n,
                Err(e) => return format!("read error: {e}"),
            }
        }
    })
    .await
    .unwrap_or_else(|_| format!("{LINGER:?} passed"));
    tracing::debug!("lingering close: {drained} bytes drained, {how}");
}
