//! Limits on connections that have not logged in yet, against idle and
//! abusive clients (issue #24): at most [`Startups`] such connections at
//! once (sshd's `MaxStartups`; more are closed as they arrive) and a login
//! grace time (sshd's `LoginGraceTime`) after which a connection that has
//! not authenticated is shut down under its owner.
//!
//! A connection takes a [`Login`] when it starts; the protocol code calls
//! [`Login::succeeded`] when the peer authenticates, which frees the slot
//! and stops the grace timer. Dropping the `Login` (the connection ended)
//! frees the slot too. Authenticated connections are never touched, so
//! none of this costs a transfer anything.
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::Notify;

/// The count of connections not logged in, and its cap.
#[derive(Debug)]
pub struct Startups {
    max: usize,
    open: AtomicUsize,
}

impl Startups {
    pub fn new(max: usize) -> Arc<Startups> {
        Arc::new(Startups {
            max: max.max(1),
            open: AtomicUsize::new(0),
        })
    }

    /// A slot for a new connection, or `None` when `max` are already
    /// waiting to log in.
    pub fn try_begin(self: &Arc<Self>) -> Option<Arc<Login>> {
        let mut cur = self.open.load(Ordering::Acquire);
        loop {
            if cur >= self.max {
                return None;
            }
            match self
                .open
                .compare_exchange(cur, cur + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
        Some(Arc::new(Login {
            startups: self.clone(),
            done: AtomicBool::new(false),
            notify: Arc::new(Notify::new()),
        }))
    }

    /// Connections waiting to log in now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    pub fn max(&self) -> usize {
        self.max
    }
}

/// One connection's login: holds a [`Startups`] slot until it succeeds or
/// the connection ends.
#[derive(Debug)]
pub struct Login {
    startups: Arc<Startups>,
    done: AtomicBool,
    notify: Arc<Notify>,
}

impl Login {
    /// The peer has authenticated: free the slot, stop the grace timer.
    pub fn succeeded(&self) {
        self.release();
    }

    pub fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    fn release(&self) {
        if !self.done.swap(true, Ordering::AcqRel) {
            self.startups.open.fetch_sub(1, Ordering::AcqRel);
        }
        self.notify.notify_one();
    }
}

impl Drop for Login {
    fn drop(&mut self) {
        self.release();
    }
}

/// Shut `stream` down (both ways, so its owner reads EOF and closes) if
/// `login` has not succeeded within `grace`. The timer holds a duplicate
/// of the socket only until the login succeeds or the connection ends.
pub fn enforce_grace(
    stream: &tokio::net::TcpStream,
    login: &Arc<Login>,
    grace: Duration,
    peer: SocketAddr,
    what: &'static str,
) {
    let Ok(fd) = stream.as_fd().try_clone_to_owned() else {
        return;
    };
    let sock = std::net::TcpStream::from(fd);
    let weak: Weak<Login> = Arc::downgrade(login);
    let notify = login.notify.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = tokio::time::sleep(grace) => {}
            _ = notify.notified() => return,
        }
        if weak.upgrade().is_some_and(|l| !l.is_done()) {
            tracing::info!(%peer, "{what}: not logged in within {grace:?} (--login-grace-time); closing");
            let _ = sock.shutdown(std::net::Shutdown::Both);
        }
    });
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn slots_are_capped_and_freed_on_success_or_drop() {
        let s = Startups::new(2);
        let a = s.try_begin().unwrap();
        let b = s.try_begin().unwrap();
        assert!(s.try_begin().is_none(), "a third waits beyond the cap");
        a.succeeded();
        assert_eq!(s.open(), 1);
        a.succeeded();
        assert_eq!(s.open(), 1, "success counts once");
        drop(a);
        assert_eq!(s.open(), 1);
        drop(b);
        assert_eq!(s.open(), 0);
        assert!(s.try_begin().is_some());
    }
}
