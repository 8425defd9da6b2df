//! How many requests to keep in flight for one file.
//!
//! A fixed depth is either too small for a long link (OpenSSH's 64 x 32 KiB
//! stalls near 75 MB/s at 20 ms RTT) or wasteful on a short one. This keeps
//! about twice the bandwidth-delay product in flight, measured the way BBR
//! does: delivery rate over a round of replies times the smallest request
//! round-trip seen. The factor two lets the window grow while the link is
//! window-limited (rate = inflight / rtt, so the target doubles each round)
//! and stop growing once queueing, not the window, sets the rate.
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the streams to one server have learned of the link, shared by
/// their windows: the smallest request round trip seen, and the depth the
/// last round settled on. A stream's own first replies queue behind each
/// other (16 requests go out at once), so a window that knew only its own
/// round trips never saw the link's: each range of a split file is a new
/// stream, and on loopback they grew to 40-76 requests with 2-10 ms as
/// their smallest round trip, where 8-14 requests and ~1 ms are the
/// link's (the replies' buffers then fell out of the cache: a 1 GiB
/// download took 1.3x the copy loop's client CPU).
#[derive(Debug)]
pub(crate) struct LinkEstimate {
    /// Nanoseconds; `u64::MAX`: none yet.
    min_rtt: AtomicU64,
    /// 0: none yet.
    depth: AtomicUsize,
}

impl Default for LinkEstimate {
    fn default() -> Self {
        LinkEstimate {
            min_rtt: AtomicU64::new(u64::MAX),
            depth: AtomicUsize::new(0),
        }
    }
}

impl LinkEstimate {
    fn min_rtt(&self) -> Duration {
        match self.min_rtt.load(Ordering::Relaxed) {
            u64::MAX => Duration::MAX,
            n => Duration::from_nanos(n),
        }
    }
    fn lower(&self, d: Duration) {
        let n = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX - 1);
        self.min_rtt.fetch_min(n, Ordering::Relaxed);
    }
}

#[derive(Debug)]
pub(crate) struct Window {
    depth: usize,
    max: usize,
    chunk: u64,
    min_rtt: Duration,
    delivered: u64,
    round_start: Instant,
    replies: usize,
    link: Option<Arc<LinkEstimate>>,
}

const START_DEPTH: usize = 16;
const MIN_DEPTH: usize = 4;

impl Window {
    pub(crate) fn new(max: usize, chunk: u32) -> Self {
        let max = max.max(MIN_DEPTH);
        Window {
            depth: START_DEPTH.min(max),
            max,
            chunk: chunk.max(1) as u64,
            min_rtt: Duration::MAX,
            delivered: 0,
            round_start: Instant::now(),
            replies: 0,
            link: None,
        }
    }

    /// A window that starts from, and adds to, what the other streams to
    /// the same server have learned.
    pub(crate) fn sharing(max: usize, chunk: u32, link: Arc<LinkEstimate>) -> Self {
        let mut w = Window::new(max, chunk);
        w.min_rtt = link.min_rtt();
        match link.depth.load(Ordering::Relaxed) {
            0 => {}
            d => w.depth = d.clamp(MIN_DEPTH, w.max),
        }
        w.link = Some(link);
        w
    }

    pub(crate) fn depth(&self) -> usize {
        self.depth
    }

    pub(crate) fn on_reply(&mut self, bytes: u64, rtt: Duration, now: Instant) {
        self.min_rtt = self.min_rtt.min(rtt);
        if let Some(l) = &self.link {
            l.lower(self.min_rtt);
            self.min_rtt = self.min_rtt.min(l.min_rtt());
        }
        self.delivered += bytes;
        self.replies += 1;
        if self.replies < self.depth.max(8) {
            return;
        }
        let elapsed = now
            .saturating_duration_since(self.round_start)
            .as_secs_f64();
        if elapsed > 0.0 && self.min_rtt != Duration::MAX {
            let rate = self.delivered as f64 / elapsed;
            let bdp = rate * self.min_rtt.as_secs_f64();
            let target = (2.0 * bdp / self.chunk as f64).ceil() as usize + MIN_DEPTH;
            // Grow at most 2x a round, shrink at most to half: no jumps.
            self.depth = target
                .clamp(self.depth / 2, self.depth * 2)
                .clamp(MIN_DEPTH, self.max);
            if let Some(l) = &self.link {
                l.depth.store(self.depth, Ordering::Relaxed);
            }
        }
        self.delivered = 0;
        self.replies = 0;
        self.round_start = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Simulate a window-limited link: each round moves depth*chunk bytes in
    /// one RTT. The window must grow to cover the BDP, and stay under max.
    #[test]
    fn grows_on_a_long_link_and_stays_bounded() {
        let chunk = 256 * 1024u32;
        let rtt = Duration::from_millis(20);
        let mut w = Window::new(256, chunk);
        let mut now = Instant::now();
        for _ in 0..20 {
            let d = w.depth();
            now += rtt;
            for _ in 0..d {
                w.on_reply(chunk as u64, rtt, now);
            }
        }
        assert_eq!(w.depth(), 256);
    }

    /// A link whose rate is capped (CPU-bound): queueing raises the RTT but
    /// not min_rtt, so the window settles near 2 x BDP instead of max.
    #[test]
    fn settles_when_rate_is_capped() {
        let chunk = 256 * 1024u32;
        let base_rtt = Duration::from_millis(1);
        let rate = 500e6; // bytes/s
        let mut w = Window::new(1024, chunk);
        let mut now = Instant::now();
        for _ in 0..50 {
            let d = w.depth();
            let round = Duration::from_secs_f64((d as f64 * chunk as f64 / rate).max(0.001));
            now += round;
            for _ in 0..d {
                w.on_reply(chunk as u64, round.max(base_rtt), now);
            }
            // min_rtt stays at the unloaded value
            w.on_reply(0, base_rtt, now);
        }
        // BDP = 500 MB/s * 1 ms = 500 kB = 2 chunks -> target ~ 4 + 4.
        assert!(w.depth() <= 16, "depth {}", w.depth());
    }

    /// A second stream to the same server starts from the round trip the
    /// first one saw, not from its own queued first replies.
    #[test]
    fn a_new_stream_starts_from_the_servers_round_trip() {
        let chunk = 256 * 1024u32;
        let link = Arc::new(LinkEstimate::default());
        let mut first = Window::sharing(128, chunk, link.clone());
        let mut now = Instant::now();
        first.on_reply(chunk as u64, Duration::from_millis(1), now);
        // 1 GB/s with every reply queued 8 ms behind the others.
        let mut second = Window::sharing(128, chunk, link);
        for _ in 0..20 {
            let d = second.depth();
            let round = Duration::from_secs_f64(d as f64 * chunk as f64 / 1e9);
            now += round;
            for _ in 0..d {
                second.on_reply(chunk as u64, Duration::from_millis(8), now);
            }
        }
        // BDP = 1 GB/s * 1 ms = 4 chunks -> about 2 x 4 + 4.
        assert!(second.depth() <= 16, "depth {}", second.depth());
    }
}
