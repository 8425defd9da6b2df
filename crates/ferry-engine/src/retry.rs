//! One retry policy for every protocol: which failures are worth another
//! try, and how long to wait before it (exponential backoff with jitter,
//! so many ranges that failed together do not come back together).
use std::time::Duration;

use crate::error::TransferError;
use crate::transfer::{Cancel, Emitter};

/// Attempts per range (the first one included) unless the options say.
pub const DEFAULT_ATTEMPTS: u32 = 4;

/// A failure another attempt may cure: a lost, reset or stalled connection,
/// or a server that said "try later" (HTTP 5xx, FTP 421). Refusals about the
/// file, authentication and local errors are final.
pub(crate) fn transient(e: &TransferError) -> bool {
    match e {
        TransferError::Network(_) => true,
        TransferError::Remote(m) => {
            let m = m.to_ascii_lowercase();
            [
                "http 500",
                "http 502",
                "http 503",
                "http 504",
                " 421 ",
                "503 service",
                "slowdown",
            ]
            .iter()
            .any(|k| m.contains(k))
        }
        _ => false,
    }
}

/// After failed attempt number `attempt` (from 0) of `attempts`: `Err`
/// when it is final (not transient, out of attempts, cancelled), else a
/// warning and the backoff's wait, cut short by a cancel.
pub(crate) async fn wait_to_retry(
    e: TransferError,
    attempt: u32,
    attempts: u32,
    events: &Emitter,
    cancel: &Cancel,
) -> Result<(), TransferError> {
    if !transient(&e) || attempt + 1 >= attempts || cancel.is_cancelled() {
        return Err(e);
    }
    let wait = backoff(attempt);
    events.warn(format!("{e}; retrying in {:.1} s", wait.as_secs_f64()));
    tokio::select! {
        _ = tokio::time::sleep(wait) => Ok(()),
        _ = cancel.cancelled() => Err(TransferError::cancelled()),
    }
}

/// 250 ms, 500 ms, 1 s, 2 s ... capped at 8 s, each +-25% at random.
pub(crate) fn backoff(attempt: u32) -> Duration {
    let base = 250u64.saturating_mul(1 << attempt.min(5)).min(8000);
    let jitter = jitter_permille();
    Duration::from_millis(base * (750 + jitter % 500) / 1000)
}

/// A cheap random number: the sub-second clock mixed with a counter.
fn jitter_permille() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0x9e37_79b9_7f4a_7c15);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() as u64)
        .unwrap_or(0);
    let x = N.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed) ^ t;
    (x ^ (x >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9) >> 40
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        for a in 0..10 {
            let d = backoff(a).as_millis() as u64;
            let base = (250u64 << a.min(5)).min(8000);
            assert!(d >= base * 3 / 4 && d <= base * 5 / 4, "{a}: {d}");
        }
    }

    #[test]
    fn what_is_transient() {
        assert!(transient(&TransferError::Network("reset".into())));
        assert!(transient(&TransferError::Remote(
            "https://h/x: HTTP 503 Service Unavailable".into()
        )));
        assert!(!transient(&TransferError::Remote(
            "h:/x: permission denied".into()
        )));
        assert!(!transient(&TransferError::Auth("no".into())));
    }
}
