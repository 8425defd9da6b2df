//! One direction of the packet-level link, as pure arithmetic: no I/O, no
//! clock of its own (every call takes `now`, a [`Duration`] since an origin
//! the caller picks), no randomness it does not own (a seeded generator).
//!
//! A packet that enters a [`Direction`] meets, in order, what it would meet
//! on a real path with one bottleneck:
//!
//! 1. the **bottleneck queue** (only with a rate cap): a FIFO of at most
//!    `queue_bytes`, drained at `rate` bytes per second. A packet that does
//!    not fit is dropped (tail drop, cause `queue`); that is what a TCP
//!    sender's congestion control sees when it overfills the buffer, so
//!    cubic's saw-tooth and BBR's probing happen here as on a router;
//! 2. the **wire**: random loss, either independent (Bernoulli, `loss`) or
//!    bursty (Gilbert-Elliott with a mean burst length: the chain moves
//!    between a good state that loses nothing and a bad state that loses
//!    everything, with the stationary loss rate equal to `loss`); a lost
//!    packet has still used its slot on the bottleneck, as on a real link;
//! 3. the **propagation delay**: `delay` plus a uniform jitter in
//!    `[-jitter, +jitter]`; packets keep their order (a later packet is
//!    never released before an earlier one, as on one physical path) except
//!    the ones picked for **reordering** (probability `reorder`), which are
//!    held `reorder_extra` longer, so the packets behind them overtake them.
//!
//! The caller hands packets in with [`Direction::arrive`] and takes them out
//! with [`Direction::pop_due`] once [`Direction::next_release`] has passed.
//! The packet type is generic so tests use plain numbers.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

use crate::pace::transmit_time;

/// How one direction of the link treats packets.
#[derive(Debug, Clone, PartialEq)]
pub struct DirConfig {
    /// Propagation delay added to every packet (one way).
    pub delay: Duration,
    /// Uniform jitter around `delay`, in both directions (never below zero).
    pub jitter: Duration,
    /// Probability that a packet is lost on the wire, 0..=1.
    pub loss: f64,
    /// Mean length of a loss burst in packets; 1 or less means independent
    /// losses.
    pub loss_burst: f64,
    /// Bottleneck rate in bytes per second (IP packet bytes); `None` = no
    /// bottleneck (the forwarder's own speed is the limit).
    pub rate: Option<u64>,
    /// Bottleneck buffer in bytes (only with a rate). A packet that would
    /// take the queue over this is dropped; an empty queue always takes one.
    pub queue_bytes: usize,
    /// Probability that a packet is held back so later ones overtake it.
    pub reorder: f64,
    /// How much longer a reordered packet is held.
    pub reorder_extra: Duration,
}

impl Default for DirConfig {
    fn default() -> Self {
        DirConfig {
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            loss: 0.0,
            loss_burst: 1.0,
            rate: None,
            queue_bytes: 1 << 20,
            reorder: 0.0,
            reorder_extra: Duration::from_millis(1),
        }
    }
}

impl DirConfig {
    /// A bottleneck buffer of one bandwidth-delay product of the whole round
    /// trip (the rule of thumb routers are sized by), at least 64 kB:
    /// `rate * 2 * delay`.
    pub fn bdp_queue(rate: u64, one_way_delay: Duration) -> usize {
        let bytes = rate as f64 * 2.0 * one_way_delay.as_secs_f64();
        (bytes as usize).max(64 * 1024)
    }
}

/// Why a packet did not make it through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropCause {
    /// The bottleneck buffer was full.
    Queue,
    /// Random (or bursty) loss on the wire.
    Loss,
}

/// What one direction did, for the report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Packets and bytes handed in.
    pub packets_in: u64,
    pub bytes_in: u64,
    /// Packets and bytes handed out.
    pub packets_out: u64,
    pub bytes_out: u64,
    /// Packets dropped because the bottleneck buffer was full.
    pub drops_queue: u64,
    /// Packets lost on the wire.
    pub drops_loss: u64,
    /// Packets held back for reordering.
    pub reordered: u64,
    /// Largest bottleneck queue seen, in bytes and packets (including the
    /// packet being serialised).
    pub queue_peak_bytes: u64,
    pub queue_peak_packets: u64,
    /// Packets the forwarder could not write to the far side (counted by
    /// the I/O side; the pure core never sets it).
    pub write_errors: u64,
}

impl Stats {
    /// Add another direction's (or period's) counts; peaks take the max.
    pub fn merge(&mut self, o: &Stats) {
        self.packets_in += o.packets_in;
        self.bytes_in += o.bytes_in;
        self.packets_out += o.packets_out;
        self.bytes_out += o.bytes_out;
        self.drops_queue += o.drops_queue;
        self.drops_loss += o.drops_loss;
        self.reordered += o.reordered;
        self.queue_peak_bytes = self.queue_peak_bytes.max(o.queue_peak_bytes);
        self.queue_peak_packets = self.queue_peak_packets.max(o.queue_peak_packets);
        self.write_errors += o.write_errors;
    }
}

/// A small seeded generator (xorshift64*): reproducible runs, no
/// dependency, and plenty for coin flips.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        // splitmix64 of the seed, so seeds 0, 1, 2 give unrelated streams
        // (xorshift must not start at zero).
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Rng((z ^ (z >> 31)) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }
}

/// A packet on the delay line, ordered by release time then arrival order.
struct Held<P> {
    release: Duration,
    seq: u64,
    size: usize,
    segments: u64,
    packet: P,
}

impl<P> PartialEq for Held<P> {
    fn eq(&self, o: &Self) -> bool {
        (self.release, self.seq) == (o.release, o.seq)
    }
}
impl<P> Eq for Held<P> {}
impl<P> PartialOrd for Held<P> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl<P> Ord for Held<P> {
    // Reversed: BinaryHeap is a max-heap, the earliest release must be on top.
    fn cmp(&self, o: &Self) -> Ordering {
        (o.release, o.seq).cmp(&(self.release, self.seq))
    }
}

/// One direction of the link.
pub struct Direction<P> {
    cfg: DirConfig,
    rng: Rng,
    /// Gilbert-Elliott: in the bad (losing) state.
    bad: bool,
    /// When the bottleneck has finished serialising everything admitted.
    next_free: Duration,
    /// Admitted packets not yet serialised: (when it leaves the queue,
    /// size, segments).
    backlog: VecDeque<(Duration, usize, u64)>,
    backlog_bytes: usize,
    backlog_packets: u64,
    /// Release time of the latest in-order packet (FIFO on the path).
    last_release: Duration,
    seq: u64,
    line: BinaryHeap<Held<P>>,
    stats: Stats,
}

impl<P> Direction<P> {
    pub fn new(cfg: DirConfig, seed: u64) -> Self {
        Direction {
            cfg,
            rng: Rng::new(seed),
            bad: false,
            next_free: Duration::ZERO,
            backlog: VecDeque::new(),
            backlog_bytes: 0,
            backlog_packets: 0,
            last_release: Duration::ZERO,
            seq: 0,
            line: BinaryHeap::new(),
            stats: Stats::default(),
        }
    }

    pub fn config(&self) -> &DirConfig {
        &self.cfg
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Packets on the delay line (admitted, not yet released).
    pub fn in_flight(&self) -> usize {
        self.line.len()
    }

    /// A packet of `size` bytes arrives at `now`. Returns it back with the
    /// cause when it is dropped; otherwise it is held until its release.
    pub fn arrive(&mut self, now: Duration, size: usize, packet: P) -> Result<(), (P, DropCause)> {
        self.arrive_fated(now, size, 1, packet, None)
    }

    /// The wire's verdict on the next `n` packets, drawn now: `None` when
    /// none of them is lost (always, without loss), else which ones are.
    /// For a super-packet of `n` segments: without a loss it goes on whole
    /// ([`Direction::arrive_fated`] with `Some(false)`); with one, the caller
    /// cuts it and hands in each segment with its verdict.
    pub fn draw_losses(&mut self, n: usize) -> Option<Vec<bool>> {
        if self.cfg.loss <= 0.0 {
            return None;
        }
        let fates: Vec<bool> = (0..n).map(|_| self.lost()).collect();
        fates.contains(&true).then_some(fates)
    }

    /// [`Direction::arrive`] for a packet that stands for `segments`
    /// packets on the wire (a GSO super-packet: `size` counts all their
    /// bytes) and whose loss may have been drawn already (`lost`; `None`
    /// draws it here, after the bottleneck, as `arrive` does). The
    /// bottleneck and the delay line treat it as one packet of `size`
    /// bytes; the counters count `segments`. Reordering holds it back whole,
    /// so callers cut super-packets when reordering is on.
    pub fn arrive_fated(
        &mut self,
        now: Duration,
        size: usize,
        segments: usize,
        packet: P,
        lost: Option<bool>,
    ) -> Result<(), (P, DropCause)> {
        let segments = segments.max(1) as u64;
        self.stats.packets_in += segments;
        self.stats.bytes_in += size as u64;

        // 1. The bottleneck: what has left the queue by now is gone.
        let departure = match self.cfg.rate {
            None => now,
            Some(rate) => {
                while let Some(&(leaves, bytes, segs)) = self.backlog.front() {
                    if leaves > now {
                        break;
                    }
                    self.backlog.pop_front();
                    self.backlog_bytes = self.backlog_bytes.saturating_sub(bytes);
                    self.backlog_packets = self.backlog_packets.saturating_sub(segs);
                }
                if !self.backlog.is_empty()
                    && self.backlog_bytes.saturating_add(size) > self.cfg.queue_bytes
                {
                    self.stats.drops_queue += segments;
                    return Err((packet, DropCause::Queue));
                }
                let start = self.next_free.max(now);
                let leaves = start.saturating_add(transmit_time(rate, size as u64));
                self.next_free = leaves;
                self.backlog.push_back((leaves, size, segments));
                self.backlog_bytes = self.backlog_bytes.saturating_add(size);
                self.stats.queue_peak_bytes =
                    self.stats.queue_peak_bytes.max(self.backlog_bytes as u64);
                self.backlog_packets += segments;
                self.stats.queue_peak_packets =
                    self.stats.queue_peak_packets.max(self.backlog_packets);
                leaves
            }
        };

        // 2. The wire.
        if lost.unwrap_or_else(|| self.lost()) {
            self.stats.drops_loss += segments;
            return Err((packet, DropCause::Loss));
        }

        // 3. Propagation, jitter, order.
        let mut release = departure.saturating_add(self.cfg.delay);
        if !self.cfg.jitter.is_zero() {
            let j = self.cfg.jitter.as_secs_f64() * (2.0 * self.rng.unit() - 1.0);
            let shift = Duration::try_from_secs_f64(j.abs()).unwrap_or(Duration::MAX);
            release = if j >= 0.0 {
                release.saturating_add(shift)
            } else {
                release.saturating_sub(shift).max(departure)
            };
        }
        if self.rng.chance(self.cfg.reorder) {
            self.stats.reordered += 1;
            release = release
                .max(self.last_release)
                .saturating_add(self.cfg.reorder_extra);
        } else {
            release = release.max(self.last_release);
            self.last_release = release;
        }
        self.seq += 1;
        self.line.push(Held {
            release,
            seq: self.seq,
            size,
            segments,
            packet,
        });
        Ok(())
    }

    /// One step of the loss model.
    fn lost(&mut self) -> bool {
        let loss = self.cfg.loss;
        if loss <= 0.0 {
            return false;
        }
        if self.cfg.loss_burst <= 1.0 || loss >= 1.0 {
            return self.rng.chance(loss);
        }
        // Gilbert-Elliott with a lossless good state and an all-losing bad
        // state: leaving bad has probability r = 1/burst (mean burst length
        // 1/r); entering it p = loss * r / (1 - loss), so the share of time
        // in bad, p / (p + r), is `loss`.
        let r = 1.0 / self.cfg.loss_burst;
        let p = loss * r / (1.0 - loss);
        self.bad = if self.bad {
            !self.rng.chance(r)
        } else {
            self.rng.chance(p)
        };
        self.bad
    }

    /// When the next packet is due, if any.
    pub fn next_release(&self) -> Option<Duration> {
        self.line.peek().map(|h| h.release)
    }

    /// The next packet whose release time is at or before `now`.
    pub fn pop_due(&mut self, now: Duration) -> Option<P> {
        if self.line.peek().is_some_and(|h| h.release <= now) {
            let h = self.line.pop()?;
            self.stats.packets_out += h.segments;
            self.stats.bytes_out += h.size as u64;
            Some(h.packet)
        } else {
            None
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Drain everything due by `now`.
    fn due(d: &mut Direction<u64>, now: Duration) -> Vec<u64> {
        std::iter::from_fn(|| d.pop_due(now)).collect()
    }

    #[test]
    fn delay_holds_each_packet_exactly_that_long() {
        let mut d = Direction::new(
            DirConfig {
                delay: ms(25),
                ..DirConfig::default()
            },
            1,
        );
        d.arrive(ms(0), 1500, 1).unwrap();
        d.arrive(ms(3), 1500, 2).unwrap();
        assert_eq!(d.next_release(), Some(ms(25)));
        assert!(due(&mut d, ms(24)).is_empty());
        assert_eq!(due(&mut d, ms(25)), vec![1]);
        assert_eq!(d.next_release(), Some(ms(28)));
        assert_eq!(due(&mut d, ms(100)), vec![2]);
        assert_eq!(d.stats().packets_out, 2);
        assert_eq!(d.stats().bytes_out, 3000);
    }

    #[test]
    fn rate_spaces_packets_by_their_serialisation_time() {
        // 1500 bytes at 1.5 MB/s = 1 ms each; three arriving together leave
        // at 1, 2 and 3 ms, then the 10 ms delay.
        let mut d = Direction::new(
            DirConfig {
                delay: ms(10),
                rate: Some(1_500_000),
                queue_bytes: 100_000,
                ..DirConfig::default()
            },
            1,
        );
        for i in 0..3 {
            d.arrive(ms(0), 1500, i).unwrap();
        }
        assert_eq!(d.next_release(), Some(ms(11)));
        assert_eq!(due(&mut d, ms(11)), vec![0]);
        assert_eq!(due(&mut d, ms(12)), vec![1]);
        assert_eq!(due(&mut d, ms(13)), vec![2]);
        assert_eq!(d.stats().queue_peak_packets, 3);
        assert_eq!(d.stats().queue_peak_bytes, 4500);
    }

    #[test]
    fn a_full_bottleneck_buffer_drops_the_tail() {
        // Room for 4 packets: the 5th and 6th arriving at once are dropped;
        // after one has been serialised (1 ms), there is room for one more.
        let mut d = Direction::new(
            DirConfig {
                rate: Some(1_500_000),
                queue_bytes: 6000,
                ..DirConfig::default()
            },
            1,
        );
        for i in 0..4 {
            d.arrive(ms(0), 1500, i).unwrap();
        }
        assert_eq!(d.arrive(ms(0), 1500, 4), Err((4, DropCause::Queue)));
        assert_eq!(d.arrive(ms(0), 1500, 5), Err((5, DropCause::Queue)));
        d.arrive(ms(1), 1500, 6).unwrap();
        assert_eq!(d.arrive(ms(1), 1500, 7), Err((7, DropCause::Queue)));
        assert_eq!(d.stats().drops_queue, 3);
        assert_eq!(due(&mut d, ms(100)), vec![0, 1, 2, 3, 6]);
        // A packet bigger than the whole buffer still passes an empty queue.
        d.arrive(ms(200), 9000, 8).unwrap();
    }

    #[test]
    fn a_greedy_sender_gets_the_rate_and_no_more() {
        // Offer 2x the rate for one second: what comes out is the rate
        // (within a packet), the rest is dropped at the queue.
        let rate = 12_500_000; // 100 Mbit/s
        let mut d = Direction::new(
            DirConfig {
                delay: ms(5),
                rate: Some(rate),
                queue_bytes: 150_000,
                ..DirConfig::default()
            },
            1,
        );
        let gap = transmit_time(rate * 2, 1500);
        let mut now = Duration::ZERO;
        let mut n = 0u64;
        while now < Duration::from_secs(1) {
            let _ = d.arrive(now, 1500, n);
            n += 1;
            now += gap;
        }
        let out = due(&mut d, ms(1005)).len() as u64 * 1500;
        assert!(out.abs_diff(rate) <= 1500, "{out}");
        assert!(d.stats().drops_queue > n / 3, "{:?}", d.stats());
        assert!(d.stats().queue_peak_bytes <= 150_000);
    }

    #[test]
    fn bernoulli_loss_is_the_setting_within_a_few_percent() {
        let mut d = Direction::new(
            DirConfig {
                loss: 0.01,
                ..DirConfig::default()
            },
            7,
        );
        let n = 200_000;
        for i in 0..n {
            let _ = d.arrive(ms(0), 100, i);
        }
        let lost = d.stats().drops_loss as f64 / n as f64;
        // sd = sqrt(0.01 * 0.99 / 2e5) = 0.022% absolute; allow ~5 sd.
        assert!((lost - 0.01).abs() < 0.0011, "{lost}");
        assert_eq!(d.in_flight() as u64 + d.stats().drops_loss, n);
    }

    #[test]
    fn bursty_loss_keeps_the_rate_and_makes_bursts() {
        let mut d = Direction::new(
            DirConfig {
                loss: 0.02,
                loss_burst: 5.0,
                ..DirConfig::default()
            },
            3,
        );
        let n = 400_000u64;
        let mut run = 0u64;
        let mut runs = Vec::new();
        for i in 0..n {
            if d.arrive(ms(0), 100, i).is_err() {
                run += 1;
            } else if run > 0 {
                runs.push(run);
                run = 0;
            }
        }
        let lost = d.stats().drops_loss as f64 / n as f64;
        assert!((lost - 0.02).abs() < 0.002, "{lost}");
        let mean = runs.iter().sum::<u64>() as f64 / runs.len() as f64;
        assert!((mean - 5.0).abs() < 0.5, "mean burst {mean}");
    }

    #[test]
    fn jitter_varies_the_delay_but_keeps_the_order() {
        let mut d = Direction::new(
            DirConfig {
                delay: ms(20),
                jitter: ms(5),
                ..DirConfig::default()
            },
            9,
        );
        for i in 0..1000u64 {
            d.arrive(MS * i as u32, 100, i).unwrap();
        }
        let mut last = 0;
        let mut releases = Vec::new();
        while let Some(t) = d.next_release() {
            let p = d.pop_due(t).unwrap();
            assert!(p == 0 || p > last, "out of order: {p} after {last}");
            last = p;
            let delay = t - MS * p as u32;
            assert!(delay >= ms(15) && delay <= ms(25) + ms(5), "{delay:?}");
            releases.push(delay);
        }
        assert_eq!(releases.len(), 1000);
        assert!(releases.iter().any(|d| *d < ms(19)));
        assert!(releases.iter().any(|d| *d > ms(21)));
    }

    #[test]
    fn reordered_packets_are_overtaken() {
        let mut d = Direction::new(
            DirConfig {
                delay: ms(10),
                reorder: 0.1,
                reorder_extra: ms(3),
                ..DirConfig::default()
            },
            5,
        );
        let n = 10_000u64;
        for i in 0..n {
            d.arrive(Duration::from_micros(100 * i), 100, i).unwrap();
        }
        let mut out = Vec::new();
        while let Some(t) = d.next_release() {
            out.extend(due(&mut d, t));
        }
        assert_eq!(out.len() as u64, n);
        let overtaken = out.windows(2).filter(|w| w[0] > w[1]).count() as f64;
        let share = d.stats().reordered as f64 / n as f64;
        assert!((share - 0.1).abs() < 0.015, "{share}");
        // Each held packet is overtaken by the ~30 sent in its 3 ms.
        assert!(overtaken > 0.8 * d.stats().reordered as f64, "{overtaken}");
    }

    #[test]
    fn the_same_seed_gives_the_same_run() {
        let cfg = DirConfig {
            loss: 0.1,
            jitter: ms(2),
            delay: ms(5),
            ..DirConfig::default()
        };
        let run = |seed| {
            let mut d = Direction::new(cfg.clone(), seed);
            (0..1000u64)
                .map(|i| d.arrive(ms(i), 100, i).is_ok())
                .collect::<Vec<_>>()
        };
        assert_eq!(run(4), run(4));
        assert_ne!(run(4), run(5));
    }

    #[test]
    fn a_super_packet_is_serialised_whole_and_counted_per_segment() {
        // 3 segments, 4500 bytes on the wire at 1.5 MB/s: 3 ms of link time,
        // one release, three packets in the counters.
        let mut d = Direction::new(
            DirConfig {
                delay: ms(10),
                rate: Some(1_500_000),
                queue_bytes: 100_000,
                ..DirConfig::default()
            },
            1,
        );
        d.arrive_fated(ms(0), 4500, 3, 1, Some(false)).unwrap();
        d.arrive(ms(0), 1500, 2).unwrap();
        assert_eq!(d.next_release(), Some(ms(13)));
        assert_eq!(due(&mut d, ms(13)), vec![1]);
        assert_eq!(due(&mut d, ms(14)), vec![2]);
        let s = d.stats();
        assert_eq!((s.packets_in, s.packets_out, s.bytes_out), (4, 4, 6000));
        assert_eq!(s.queue_peak_packets, 4);
        // A verdict drawn beforehand is obeyed, and counts its segments.
        assert_eq!(
            d.arrive_fated(ms(20), 1500, 1, 3, Some(true)),
            Err((3, DropCause::Loss))
        );
        assert_eq!(d.stats().drops_loss, 1);
    }

    #[test]
    fn losses_drawn_for_segments_keep_the_loss_rate() {
        let mut none = Direction::<u64>::new(DirConfig::default(), 1);
        assert_eq!(none.draw_losses(44), None);
        let mut d = Direction::<u64>::new(
            DirConfig {
                loss: 0.01,
                ..DirConfig::default()
            },
            3,
        );
        let (mut lost, mut split, n) = (0, 0, 20_000);
        for _ in 0..n {
            if let Some(f) = d.draw_losses(44) {
                split += 1;
                lost += f.iter().filter(|l| **l).count();
            }
        }
        let rate = lost as f64 / (n * 44) as f64;
        assert!((rate - 0.01).abs() < 0.001, "{rate}");
        // 1 - 0.99^44 = 36 % of super-packets need cutting.
        let share = split as f64 / n as f64;
        assert!((share - 0.357).abs() < 0.02, "{share}");
    }

    #[test]
    fn absurd_settings_do_not_panic() {
        let mut d = Direction::new(
            DirConfig {
                delay: Duration::MAX,
                jitter: Duration::MAX,
                loss: 2.0,
                loss_burst: f64::INFINITY,
                rate: Some(0),
                queue_bytes: 0,
                reorder: 1.0,
                reorder_extra: Duration::MAX,
            },
            0,
        );
        assert_eq!(
            d.arrive(Duration::MAX, usize::MAX, 1),
            Err((1, DropCause::Loss))
        );
        let mut d = Direction::new(
            DirConfig {
                delay: Duration::MAX,
                jitter: ms(1),
                reorder: 1.0,
                reorder_extra: Duration::MAX,
                ..DirConfig::default()
            },
            0,
        );
        d.arrive(Duration::MAX, 1, 1).unwrap();
        assert_eq!(d.next_release(), Some(Duration::MAX));
        assert_eq!(DirConfig::bdp_queue(125_000_000, ms(25)), 6_250_000);
        assert_eq!(DirConfig::bdp_queue(1, ms(1)), 65_536);
    }
}
