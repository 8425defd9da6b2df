//! How many connections one big file gets on a long link.
//!
//! On a long or lossy path one TCP connection moves far less than the
//! link carries: the sender's socket buffer (Linux's default `tcp_wmem`
//! maximum, 4 MiB, is 42 MB/s at 100 ms at best, 16.5 MB/s measured) or
//! the window's halving at every loss holds it, whatever ferry's own
//! windows (docs/internals/wan.md). More connections add their rates until
//! the link, a CPU or the server is full. How many that takes depends on
//! things ferry cannot see (the server's buffers, the loss rate, the other
//! traffic), so it is measured, not guessed: a file starts on the
//! connections the protocol's default gives it (four at least); every
//! measuring interval
//! the engine compares the rate with the one before, doubles the ranges
//! in flight while doubling paid (at least [`GAIN`] more), and stops at
//! the first doubling that did not, or at the user's limit
//! (`--max-streams`).
//!
//! Pure: the engine feeds it the bytes moved and the time.

use std::time::{Duration, Instant};

/// Files at least this large are widened on a long path: a smaller one
/// ends before a measurement could say anything.
pub(crate) const WIDEN_MIN: u64 = 32 * 1024 * 1024;

/// Ranges a widened file starts on at least (as lftp's `pget` and
/// aria2c's `-s` default to 5): a 256 MiB file at loss100 spent most of
/// its 9 s doubling up from two (BENCHMARKS.md, run widen-1).
pub(crate) const START: usize = 4;

/// The rate must grow by this share for a doubling to count as paid.
pub(crate) const GAIN: f64 = 1.15;

/// The measuring interval: long enough for a new connection's slow start
/// (BBR's start-up doubles per round trip, about 7 round trips to reach
/// 16 MB/s at 100 ms) and for a rate through random loss to settle; short
/// enough that a 1 GiB file reaches 8 connections in its first seconds.
pub(crate) fn interval(round_trip: Duration) -> Duration {
    (round_trip * 10).clamp(Duration::from_millis(500), Duration::from_secs(3))
}

#[derive(Debug)]
pub(crate) struct Widening {
    ranges: usize,
    max: usize,
    interval: Duration,
    /// Where the interval under way started: when, and the bytes then.
    since: (Instant, u64),
    /// The interval under way only lets new connections ramp up.
    warming: bool,
    /// The rate measured before the last doubling (bytes per second).
    before: Option<f64>,
    settled: bool,
}

impl Widening {
    /// `start` ranges (the protocol's default), at most `max`, on a path
    /// whose round trip is `round_trip`; `moved` bytes so far.
    pub(crate) fn new(
        start: usize,
        max: usize,
        round_trip: Duration,
        now: Instant,
        moved: u64,
    ) -> Widening {
        let max = max.max(1);
        let ranges = start.clamp(1, max);
        Widening {
            ranges,
            max,
            interval: interval(round_trip),
            since: (now, moved),
            warming: true,
            before: None,
            settled: ranges >= max,
        }
    }

    /// Ranges to keep in flight now.
    pub(crate) fn ranges(&self) -> usize {
        self.ranges
    }

    /// When the next [`Widening::tick`] can change anything; `None` once
    /// settled.
    pub(crate) fn next_tick(&self) -> Option<Instant> {
        (!self.settled).then(|| self.since.0 + self.interval)
    }

    /// `moved` bytes so far at `now`: the ranges to keep in flight.
    pub(crate) fn tick(&mut self, now: Instant, moved: u64) -> usize {
        if self.settled {
            return self.ranges;
        }
        let (at, from) = self.since;
        let took = now.saturating_duration_since(at);
        if took < self.interval {
            return self.ranges;
        }
        self.since = (now, moved);
        if self.warming {
            self.warming = false;
            return self.ranges;
        }
        let rate = moved.saturating_sub(from) as f64 / took.as_secs_f64();
        match self.before {
            Some(b) if rate < b * GAIN => {
                // The last doubling did not pay: the link, a CPU or the
                // server is full. Keep what is open (closing would only
                // lose what its windows learned).
                self.settled = true;
            }
            _ => {
                self.before = Some(rate);
                self.ranges = (self.ranges * 2).min(self.max);
                self.warming = true;
                self.settled = self.ranges >= self.max;
            }
        }
        self.ranges
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RTT: Duration = Duration::from_millis(100);

    /// Drive a widening where each range moves `per_range` bytes a
    /// second until the link's `cap`: the ranges it settles on.
    fn settle(start: usize, max: usize, per_range: f64, cap: f64) -> (usize, Vec<usize>) {
        let t0 = Instant::now();
        let mut w = Widening::new(start, max, RTT, t0, 0);
        let step = Duration::from_millis(100);
        let (mut now, mut moved, mut seen) = (t0, 0f64, vec![w.ranges()]);
        for _ in 0..2000 {
            now += step;
            moved += (w.ranges() as f64 * per_range).min(cap) * step.as_secs_f64();
            let n = w.tick(now, moved as u64);
            if seen.last() != Some(&n) {
                seen.push(n);
            }
            if w.next_tick().is_none() {
                break;
            }
        }
        (w.ranges(), seen)
    }

    #[test]
    fn doubles_while_the_link_has_room_and_stops_when_full() {
        // 16 MB/s a connection, a 125 MB/s link: 8 connections fill it
        // (7.8 would), a ninth adds nothing.
        let (n, seen) = settle(1, 32, 16e6, 125e6);
        assert_eq!(seen, vec![1, 2, 4, 8, 16]);
        assert_eq!(n, 16, "the doubling to 16 did not pay: what is open stays");
        // A 40 MB/s link: 1 -> 2 -> 4 paid (16, 32, 40), the next did not.
        let (n, seen) = settle(1, 16, 16e6, 40e6);
        assert_eq!(seen, vec![1, 2, 4, 8]);
        assert_eq!(n, 8);
    }

    #[test]
    fn a_link_one_connection_fills_gets_one_more_try_only() {
        let (n, seen) = settle(1, 16, 100e6, 100e6);
        assert_eq!(seen, vec![1, 2]);
        assert_eq!(n, 2);
    }

    #[test]
    fn the_users_limit_holds() {
        let (n, seen) = settle(1, 4, 1e6, 1e9);
        assert_eq!(seen, vec![1, 2, 4]);
        assert_eq!(n, 4);
        let w = Widening::new(3, 1, RTT, Instant::now(), 0);
        assert_eq!(w.ranges(), 1);
        assert!(
            w.next_tick().is_none(),
            "nothing to widen with a limit of 1"
        );
    }

    #[test]
    fn the_first_interval_only_warms_up() {
        let t0 = Instant::now();
        let mut w = Widening::new(2, 16, RTT, t0, 0);
        let iv = interval(RTT);
        assert_eq!(w.tick(t0 + iv / 2, 1), 2, "too early");
        assert_eq!(w.tick(t0 + iv, 10), 2, "warm-up ends, nothing measured");
        assert_eq!(w.tick(t0 + iv * 2, 10_000_000), 4, "measured: double");
    }

    #[test]
    fn interval_follows_the_round_trip_within_bounds() {
        assert_eq!(
            interval(Duration::from_millis(1)),
            Duration::from_millis(500)
        );
        assert_eq!(interval(Duration::from_millis(100)), Duration::from_secs(1));
        assert_eq!(interval(Duration::from_secs(1)), Duration::from_secs(3));
    }
}
