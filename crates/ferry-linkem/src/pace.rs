//! The bandwidth cap's arithmetic, with no I/O and no clock of its own.
//!
//! A capped link is one serialiser per direction: every connection the proxy
//! forwards in that direction shares it, as flows share a real bottleneck.
//! [`Schedule`] is that serialiser as a "next free time" on a virtual clock:
//! a writer asks to [`reserve`](Schedule::reserve) the link for a piece of
//! data that is ready at some time, and gets back the time at which the
//! link has finished serialising it (the writer sleeps until then, then
//! writes). Reservations are served in the order they are asked for, so
//! writers that each reserve one quantum at a time take turns: FIFO-ish
//! fairness, like a router's single queue.
//!
//! Times are [`Duration`]s since an origin the caller picks (the async side
//! uses an `Instant` taken when the link starts), so tests drive it with a
//! virtual clock.
//!
//! Idle time is credited only up to a small `burst` window: a link that was
//! idle for a second does not let the next writer send a second's worth of
//! bytes at once, but a writer whose timer fired a millisecond late (tokio's
//! timers have 1 ms granularity) does not lose that millisecond of link
//! time either. That is a token bucket whose depth is `burst` of link time.

use std::time::Duration;

/// Default credit for idle time: enough to absorb tokio's 1 ms timer
/// granularity and a late wake-up, small against any RTT we emulate.
pub const DEFAULT_BURST: Duration = Duration::from_millis(4);

/// Largest piece a writer reserves and writes at once: about 2 ms of link
/// time, between 4 KiB and `max` bytes.
pub fn quantum(rate_bytes_per_sec: u64, max: usize) -> usize {
    let two_ms = usize::try_from(rate_bytes_per_sec / 500).unwrap_or(usize::MAX);
    two_ms.clamp(4096.min(max), max.max(1))
}

/// Time the link needs to serialise `bytes` at `rate` bytes per second
/// (rounded down to the nanosecond; saturates instead of overflowing).
pub fn transmit_time(rate: u64, bytes: u64) -> Duration {
    if rate == 0 {
        return Duration::MAX;
    }
    let nanos = u128::from(bytes) * 1_000_000_000 / u128::from(rate);
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// One direction of a capped link: when it is free next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    rate: u64,
    burst: Duration,
    next_free: Duration,
}

impl Schedule {
    /// A link serialising `rate` bytes per second (at least 1), idle from
    /// time zero, crediting at most `burst` of idle time.
    pub fn new(rate: u64, burst: Duration) -> Self {
        Schedule {
            rate: rate.max(1),
            burst,
            next_free: Duration::ZERO,
        }
    }

    /// The cap in bytes per second.
    pub fn rate(&self) -> u64 {
        self.rate
    }

    /// Reserve the link for `bytes` that are ready at `ready`, the clock now
    /// reading `now`; returns when the link has serialised them, which is
    /// when the writer may write them. The link starts on them at the
    /// latest of: when it is next free, when they are ready, and `now`
    /// minus the burst credit.
    pub fn reserve(&mut self, now: Duration, ready: Duration, bytes: usize) -> Duration {
        let start = self
            .next_free
            .max(ready)
            .max(now.saturating_sub(self.burst));
        let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
        self.next_free = start.saturating_add(transmit_time(self.rate, bytes));
        self.next_free
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GBIT: u64 = 1_000_000_000 / 8;
    const MAX_CHUNK: usize = 256 * 1024;

    /// Writers that always have data, each reserving one quantum at a time
    /// and writing it when its reservation ends (plus `late` of timer
    /// lateness), on a virtual clock. Returns the bytes each wrote by `until`.
    fn simulate(rate: u64, writers: usize, late: Duration, until: Duration) -> Vec<u64> {
        let q = quantum(rate, MAX_CHUNK);
        let mut link = Schedule::new(rate, DEFAULT_BURST);
        // When each writer next wakes up and asks for the link.
        let mut wake = vec![Duration::ZERO; writers];
        let mut sent = vec![0u64; writers];
        loop {
            // The writer that wakes first asks first (ties: lowest index).
            let (i, &now) = wake
                .iter()
                .enumerate()
                .min_by_key(|(_, t)| **t)
                .unwrap_or((0, &Duration::MAX));
            if now >= until {
                return sent;
            }
            let done = link.reserve(now, now, q);
            if done <= until {
                sent[i] += q as u64;
            }
            wake[i] = done + late;
        }
    }

    fn mb(bytes: u64) -> f64 {
        bytes as f64 / 1e6
    }

    #[test]
    fn two_connections_share_one_gigabit_half_and_half() {
        let sent = simulate(GBIT, 2, Duration::ZERO, Duration::from_secs(1));
        let total: u64 = sent.iter().sum();
        // The sum is the cap (125 MB in one second), within one quantum.
        let q = quantum(GBIT, MAX_CHUNK) as u64;
        assert!(total <= GBIT && total + q >= GBIT, "total {}", mb(total));
        // Each gets half, within one quantum.
        for s in &sent {
            assert!(s.abs_diff(GBIT / 2) <= q, "{sent:?}");
        }
    }

    #[test]
    fn eight_connections_get_no_more_than_one() {
        let one = simulate(GBIT, 1, Duration::ZERO, Duration::from_secs(1));
        let eight = simulate(GBIT, 8, Duration::ZERO, Duration::from_secs(1));
        let q = quantum(GBIT, MAX_CHUNK) as u64;
        assert!(
            eight.iter().sum::<u64>() <= one[0] + q,
            "{one:?} vs {eight:?}"
        );
        let (lo, hi) = (eight.iter().min(), eight.iter().max());
        assert!(hi.zip(lo).is_some_and(|(h, l)| h - l <= q), "{eight:?}");
    }

    #[test]
    fn late_timers_lose_no_link_time_and_gain_none() {
        // Every wake-up 1 ms late: the burst credit makes up for it.
        let sent = simulate(GBIT, 2, Duration::from_millis(1), Duration::from_secs(1));
        let total: u64 = sent.iter().sum();
        assert!(total <= GBIT, "over the cap: {}", mb(total));
        assert!(
            total as f64 >= 0.97 * GBIT as f64,
            "lost time: {}",
            mb(total)
        );
    }

    #[test]
    fn idle_time_is_credited_only_up_to_the_burst() {
        let mut link = Schedule::new(GBIT, DEFAULT_BURST);
        let first = link.reserve(Duration::ZERO, Duration::ZERO, 1000);
        assert_eq!(first, transmit_time(GBIT, 1000));
        // Idle for a second, then a big backlog arrives at t = 1 s.
        let now = Duration::from_secs(1);
        let mut burst_bytes = 0u64;
        loop {
            let done = link.reserve(now, Duration::ZERO, 4096);
            if done > now {
                break;
            }
            burst_bytes += 4096;
        }
        // What may go out at once is the burst's worth of bytes (4 ms at
        // 125 MB/s = 500 kB), not a second's worth.
        let allowed = GBIT * DEFAULT_BURST.as_millis() as u64 / 1000;
        assert!(burst_bytes <= allowed, "{burst_bytes} > {allowed}");
        assert!(burst_bytes + 4096 >= allowed, "{burst_bytes}");
    }

    #[test]
    fn data_is_never_sent_before_it_is_ready() {
        let mut link = Schedule::new(GBIT, DEFAULT_BURST);
        let ready = Duration::from_millis(20);
        let done = link.reserve(Duration::ZERO, ready, 1250);
        assert_eq!(done, ready + Duration::from_micros(10));
    }

    #[test]
    fn reservations_queue_in_the_order_they_are_asked() {
        let mut link = Schedule::new(1000, Duration::ZERO);
        let t0 = Duration::ZERO;
        assert_eq!(link.reserve(t0, t0, 500), Duration::from_millis(500));
        assert_eq!(link.reserve(t0, t0, 500), Duration::from_secs(1));
        assert_eq!(link.reserve(t0, t0, 250), Duration::from_millis(1250));
    }

    #[test]
    fn no_overflow_at_ten_gigabit_or_tiny_rates() {
        let ten = 10 * GBIT;
        assert_eq!(quantum(ten, MAX_CHUNK), MAX_CHUNK);
        assert_eq!(transmit_time(ten, 1_250_000_000), Duration::from_secs(1));
        let sent = simulate(ten, 4, Duration::ZERO, Duration::from_millis(100));
        let total: u64 = sent.iter().sum();
        assert!(total <= ten / 10 && total + MAX_CHUNK as u64 >= ten / 10);
        // 1 byte per second: quantum is the 4 KiB floor, 4096 s per piece.
        assert_eq!(quantum(1, MAX_CHUNK), 4096);
        let mut slow = Schedule::new(1, DEFAULT_BURST);
        assert_eq!(
            slow.reserve(Duration::ZERO, Duration::ZERO, 4096),
            Duration::from_secs(4096)
        );
        // Absurd inputs saturate instead of panicking.
        assert_eq!(transmit_time(1, u64::MAX), Duration::from_nanos(u64::MAX));
        assert_eq!(transmit_time(0, 1), Duration::MAX);
        let mut zero = Schedule::new(0, DEFAULT_BURST);
        assert_eq!(zero.rate(), 1);
        let far = zero.reserve(Duration::MAX, Duration::MAX, usize::MAX);
        assert_eq!(far, Duration::MAX);
        assert_eq!(
            zero.reserve(Duration::MAX, Duration::ZERO, 1),
            Duration::MAX
        );
        assert_eq!(quantum(u64::MAX, MAX_CHUNK), MAX_CHUNK);
        assert_eq!(quantum(GBIT, 100), 100);
    }
}
