//! ferry: `AutoLevel`, what `auto` compression sends each packet as: stored
//! or one of a ladder of levels, chosen from measurements alone
//! (docs/internals/compression.md, "How `auto` decides").
//!
//! The controller predicts, then checks. From each window of packets it
//! knows the plain and wire bytes per second the transfer reached and how
//! long its own compressor ran; from samples compressed aside it knows
//! each rung's ratio and speed. If the link is the limit, it carries the
//! same wire bytes a second at any rung, so rung j would reach
//! `min(wire rate / ratio_j, speed_j / headroom)`: the move that predicts
//! the most (by `GAIN`) is made (from stored, at most to the middle of the
//! ladder, since samples rank the levels poorly), and then checked over a
//! long stretch, after the bytes already queued at the old rung have
//! drained (`SETTLE`), because a sender behind a queue sees the old rung's
//! rate for as long as the queue takes to drain. A move that clearly loses
//! is undone and the next one waits (`MIN_BACKOFF`, doubling to
//! `MAX_BACKOFF`).
//! A rung whose compressor is busy nearly all the time (`BUSY_HIGH`) is the
//! serial stage: the controller steps down.
//!
//! Run zstd-7 (BENCHMARKS.md) is why: the earlier controller tried a rung
//! for one 50 ms window and compared it with the window before, which
//! through a queue measured the old rung, so level 3 never won a try on a
//! 200 Mbit/s link where it would have carried 107 MB/s against level 1's
//! 72.

use std::time::{Duration, Instant};

use super::ferry_zstd::Setting;

/// What `AutoLevel` may choose from, and when data counts as not
/// compressing.
#[derive(Debug, Clone, Copy)]
pub struct AutoRules {
    /// The settings, cheapest first; the first is `Setting::Stored`. At
    /// most `MAX_RUNGS`.
    pub ladder: &'static [Setting],
    /// Compressed/plain (of the current level, or of the cheapest while
    /// storing) at or over which the data is stored.
    pub incompressible: f64,
    /// How much faster than the rate it is to reach a compressor must be:
    /// a rung's predicted rate is at most its speed / `headroom`.
    pub headroom: f64,
}

/// zstd's: stored, levels 1, 2 and 3. With ferry's 1 MiB window level 2
/// compresses the scorecard's text about as well as level 3 (39.5 against
/// 39.6 MB for 128 MiB, `zstd --zstd=wlog=20`) at less CPU, and level 3
/// does better on other data: both are on the ladder, and the predictions
/// choose (run zstd-8, BENCHMARKS.md).
pub const ZSTD_RULES: AutoRules = AutoRules {
    ladder: &[
        Setting::Stored,
        Setting::Level(1),
        Setting::Level(2),
        Setting::Level(3),
    ],
    incompressible: INCOMPRESSIBLE,
    headroom: HEADROOM,
};

/// The most rungs a ladder may have.
const MAX_RUNGS: usize = 4;
/// A window is at least this long and `WINDOW_BYTES` of payload.
pub const WINDOW_TIME: Duration = Duration::from_millis(50);
pub const WINDOW_BYTES: u64 = 2 << 20;
/// The first window is shorter: what goes out stored before the first
/// decision queues ahead of everything compressed after it (on a 200
/// Mbit/s link, 2 MiB is 80 ms of it).
const FIRST_WINDOW_TIME: Duration = Duration::from_millis(25);
const FIRST_WINDOW_BYTES: u64 = 1 << 20;
pub const MIN_BACKOFF: Duration = Duration::from_secs(1);
pub const MAX_BACKOFF: Duration = Duration::from_secs(16);
/// A move is made when it predicts this many times the current rate.
pub const GAIN: f64 = 1.20;
pub const HEADROOM: f64 = 1.25;
pub const INCOMPRESSIBLE: f64 = 0.95;
/// After a move, windows this soon are not judged: what they move is
/// mostly bytes queued at the old rung.
pub const SETTLE: Duration = Duration::from_millis(200);
/// A move is judged on at least this much time after `SETTLE`...
pub const VERIFY_TIME: Duration = Duration::from_millis(200);
/// ...and at most this long after it was made; then it stands unless its
/// compressor was busy more than `NEUTRAL_BUSY` of the time.
pub const VERIFY_MAX: Duration = Duration::from_secs(2);
/// Kept at once when it reaches this many times the rate before it...
pub const ACCEPT: f64 = 1.05;
/// ...undone when under this many times it.
pub const REVERT: f64 = 0.95;
/// The share of wall time in the compressor over which it is the serial
/// stage and the controller steps down.
pub const BUSY_HIGH: f64 = 0.85;
/// A busy compressor steps down at once if the rung below, at the same
/// wire rate, would keep this much of the rate.
pub const LOWER_KEEPS: f64 = 0.95;
/// A busy compressor on a rung the link also holds is probed one rung down
/// only after this long on it (a link that sped up shows no other sign).
pub const PROBE_DWELL: Duration = Duration::from_secs(4);
/// A move that neither won nor lost stands only if it costs less than this
/// share of wall time in the compressor.
pub const NEUTRAL_BUSY: f64 = 0.25;
/// Samples: the first packet, then after 1, 2, 4 ... MiB, then every
/// `SAMPLE_EVERY` bytes.
pub const SAMPLE_EVERY: u64 = 32 << 20;
const FIRST_SAMPLE_GAP: u64 = 1 << 20;
/// Smaller packets are not sampled: they say little about file data.
const SAMPLE_MIN: usize = 16 * 1024;
/// Bytes of a sample packet compressed aside (its first ones).
pub const SAMPLE_MAX: usize = 32 * 1024;
/// Windows whose rates make the "before" a move is judged against.
const RECENT: usize = 3;

#[derive(Debug, Clone)]
pub struct AutoLevel {
    rules: AutoRules,
    rung: usize,
    window: Window,
    /// Plain bytes per second of the latest windows at this rung.
    recent: [Option<f64>; RECENT],
    /// The last window's; `None` before the first.
    last_rate: Option<f64>,
    /// This rung's own wire/plain and plain bytes per compressor second,
    /// over its last window (compressed rungs only).
    stream_ratio: Option<f64>,
    stream_speed: Option<f64>,
    /// Per rung (index 0, stored, unused): wire/plain and speed of its
    /// samples.
    sample_ratio: [Option<f64>; MAX_RUNGS],
    sample_speed: [Option<f64>; MAX_RUNGS],
    checking: Option<Check>,
    next_move: Instant,
    /// When the setting last changed.
    moved_at: Instant,
    backoff: Duration,
    plain_total: u64,
    next_sample_at: u64,
    sample_gap: u64,
    moves: u32,
}

#[derive(Debug, Clone, Default)]
struct Window {
    start: Option<Instant>,
    plain: u64,
    wire: u64,
    busy: Duration,
}

/// A move being checked.
#[derive(Debug, Clone)]
struct Check {
    from: usize,
    /// The plain rate before the move.
    before: f64,
    at: Instant,
    /// Totals of the windows judged so far (after `SETTLE`).
    plain: u64,
    secs: f64,
    busy: f64,
}

enum Verdict {
    Won,
    Lost,
    Undecided,
}

impl AutoLevel {
    /// zstd's controller (`ZSTD_RULES`).
    pub fn new(now: Instant) -> Self {
        Self::with_rules(now, ZSTD_RULES)
    }

    pub fn with_rules(now: Instant, rules: AutoRules) -> Self {
        Self {
            rules,
            rung: 0,
            window: Window::default(),
            recent: [None; RECENT],
            last_rate: None,
            stream_ratio: None,
            stream_speed: None,
            sample_ratio: [None; MAX_RUNGS],
            sample_speed: [None; MAX_RUNGS],
            checking: None,
            next_move: now,
            moved_at: now,
            backoff: MIN_BACKOFF,
            plain_total: 0,
            next_sample_at: 0,
            sample_gap: FIRST_SAMPLE_GAP,
            moves: 0,
        }
    }

    /// How long a lost move waits before the next one (for tests).
    #[cfg(test)]
    pub(crate) fn backoff(&self) -> Duration {
        self.backoff
    }

    /// How many times the setting changed (for tests).
    #[cfg(test)]
    pub(crate) fn moves(&self) -> u32 {
        self.moves
    }

    pub fn setting(&self) -> Setting {
        self.rules
            .ladder
            .get(self.rung)
            .copied()
            .unwrap_or(Setting::Stored)
    }

    fn top(&self) -> usize {
        self.rules.ladder.len().clamp(1, MAX_RUNGS) - 1
    }

    /// The settings to compress this packet (of `len` bytes) at aside, as
    /// samples, each then handed to `record_sample`: every compressed rung
    /// of the ladder when a sample is due, else none. While storing
    /// outruns what the cheapest level could reach (loopback), only that
    /// level is sampled: the slower ones cannot win either.
    pub fn samples_due(&mut self, len: usize) -> &'static [Setting] {
        if len < SAMPLE_MIN || self.plain_total < self.next_sample_at {
            return &[];
        }
        self.next_sample_at = self.plain_total + self.sample_gap;
        self.sample_gap = (self.sample_gap * 2).min(SAMPLE_EVERY);
        let outrun = self.rung == 0
            && self
                .last_rate
                .zip(self.speed_of(1))
                .is_some_and(|(rate, speed)| rate * GAIN >= speed / self.rules.headroom);
        let top = if outrun { 1 } else { self.top() };
        self.rules.ladder.get(1..=top).unwrap_or_default()
    }

    /// A sample at `setting`: `plain` bytes compressed to `compressed` in
    /// `cpu`.
    pub fn record_sample(
        &mut self,
        setting: Setting,
        plain: usize,
        compressed: usize,
        cpu: Duration,
    ) {
        let Some(rung) = self.rules.ladder.iter().position(|s| *s == setting) else {
            return;
        };
        let (Some(ratio), Some(best)) = (
            self.sample_ratio.get_mut(rung),
            self.sample_speed.get_mut(rung),
        ) else {
            return;
        };
        if plain == 0 || rung == 0 {
            return;
        }
        *ratio = Some(compressed as f64 / plain as f64);
        let secs = cpu.as_secs_f64();
        if secs > 0.0 {
            let speed = plain as f64 / secs;
            // The best seen, easing down: a sample the scheduler cut into
            // reads slow once, a busier machine reads slow every time.
            *best = Some(match *best {
                Some(s) if s > speed => s * 0.75 + speed * 0.25,
                _ => speed,
            });
        }
    }

    /// Rung `j`'s figure, from its samples scaled by how the current rung's
    /// stream compares with its own samples (a stream has history a sample
    /// lacks).
    fn estimate(
        &self,
        j: usize,
        samples: &[Option<f64>; MAX_RUNGS],
        stream: Option<f64>,
    ) -> Option<f64> {
        let sample = samples.get(j).copied().flatten();
        let here = samples.get(self.rung).copied().flatten();
        match (stream, here) {
            (Some(s), _) if j == self.rung => Some(s),
            (Some(s), Some(h)) if h > 0.0 => sample.map(|x| x * s / h),
            _ => sample,
        }
    }

    fn ratio_of(&self, j: usize) -> Option<f64> {
        if j == 0 {
            return Some(1.0);
        }
        self.estimate(j, &self.sample_ratio, self.stream_ratio)
    }

    fn speed_of(&self, j: usize) -> Option<f64> {
        if j == 0 {
            return Some(f64::INFINITY);
        }
        self.estimate(j, &self.sample_speed, self.stream_speed)
    }

    /// What rung `j` would reach if the link carries `wire_rate`.
    fn predict(&self, j: usize, wire_rate: f64) -> Option<f64> {
        let ratio = self.ratio_of(j)?;
        let speed = self.speed_of(j)?;
        (ratio > 0.0).then(|| (wire_rate / ratio).min(speed / self.rules.headroom))
    }

    /// Does the data compress enough to be worth it? The current level's
    /// ratio while compressing, the cheapest level's while storing.
    fn compresses(&self) -> bool {
        self.ratio_of(self.rung.max(1))
            .is_some_and(|r| r < self.rules.incompressible)
    }

    /// One packet went out: `plain` bytes in, `wire` bytes out, `busy`
    /// spent in the compressor, at `now`.
    pub fn observe(&mut self, now: Instant, plain: usize, wire: usize, busy: Duration) {
        self.plain_total += plain as u64;
        let start = *self.window.start.get_or_insert(now);
        self.window.plain += plain as u64;
        self.window.wire += wire as u64;
        self.window.busy += busy;
        let elapsed = now.saturating_duration_since(start);
        let (time, bytes) = match self.last_rate {
            None => (FIRST_WINDOW_TIME, FIRST_WINDOW_BYTES),
            Some(_) => (WINDOW_TIME, WINDOW_BYTES),
        };
        if elapsed < time || self.window.plain < bytes {
            return;
        }
        let w = std::mem::take(&mut self.window);
        self.decide(now, &w, elapsed.as_secs_f64());
    }

    fn decide(&mut self, now: Instant, w: &Window, secs: f64) {
        let rate = w.plain as f64 / secs;
        let wire_rate = w.wire as f64 / secs;
        let busy = w.busy.as_secs_f64() / secs;
        if self.rung > 0 && w.plain > 0 {
            self.stream_ratio = Some(w.wire as f64 / w.plain as f64);
            if !w.busy.is_zero() {
                self.stream_speed = Some(w.plain as f64 / w.busy.as_secs_f64());
            }
        }
        self.recent.rotate_left(1);
        self.recent[RECENT - 1] = Some(rate);
        self.last_rate = Some(rate);

        if self.checking.is_some() {
            self.check(now, w, secs);
            return;
        }
        if !self.compresses() {
            if self.rung > 0 {
                self.rung = 0;
                self.moved(now, now + self.backoff);
            }
            return;
        }
        if now < self.next_move {
            return;
        }
        if self.rung > 0 && busy >= BUSY_HIGH {
            // The compressor is the serial stage. If the link is too, the
            // rung below loses what its ratio is worse by at the same wire
            // rate: it goes down at once if that is little (level 2 under
            // level 3 on text, with a 1 MiB window), else only now and then.
            let lower = self.rung - 1;
            let little_lost = self
                .ratio_of(lower)
                .is_some_and(|r| r > 0.0 && wire_rate / r >= rate * LOWER_KEEPS);
            if little_lost || now >= self.moved_at + PROBE_DWELL {
                log::debug!(
                    "compression auto: rung {} -> {lower}: compressor busy {busy:.2}, moved {:.1} MB/s",
                    self.rung,
                    rate / 1e6
                );
                self.try_rung(now, lower);
                return;
            }
        }
        // From stored, at most the middle of the ladder: samples rank the
        // levels poorly (the costliest often wins a near tie), and the top
        // is reached later from a measured stream if it predicts more.
        let highest = if self.rung == 0 {
            self.top().div_ceil(2).max(1)
        } else {
            self.top()
        };
        let best = (self.rung + 1..=highest)
            .filter_map(|j| Some((j, self.predict(j, wire_rate)?)))
            .max_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((j, predicted)) = best
            && predicted > rate * GAIN
        {
            log::debug!(
                "compression auto: rung {} -> {j}: predicts {:.1} MB/s, moved {:.1} (wire {:.1})",
                self.rung,
                predicted / 1e6,
                rate / 1e6,
                wire_rate / 1e6
            );
            self.try_rung(now, j);
        }
    }

    fn try_rung(&mut self, now: Instant, to: usize) {
        // Up: the slowest recent window, since a pipe still filling makes
        // the first ones fast. Down: their mean, since a step down must
        // not be kept on one slow window.
        let recent: Vec<f64> = self.recent.iter().flatten().copied().collect();
        let before = if to > self.rung {
            recent.iter().copied().fold(f64::INFINITY, f64::min)
        } else {
            recent.iter().sum::<f64>() / recent.len().max(1) as f64
        };
        let before = if before.is_finite() { before } else { 0.0 };
        self.checking = Some(Check {
            from: self.rung,
            before,
            at: now,
            plain: 0,
            secs: 0.0,
            busy: 0.0,
        });
        self.rung = to;
        self.moved(now, now);
    }

    /// The setting changed at `now`: what was measured at the old one is
    /// dropped.
    fn moved(&mut self, now: Instant, next_move: Instant) {
        self.moved_at = now;
        self.recent = [None; RECENT];
        self.stream_ratio = None;
        self.stream_speed = None;
        self.next_move = next_move;
        self.moves += 1;
    }

    fn check(&mut self, now: Instant, w: &Window, secs: f64) {
        let Some(c) = self.checking.as_mut() else {
            return;
        };
        if now < c.at + SETTLE {
            return;
        }
        c.plain += w.plain;
        c.secs += secs;
        c.busy += w.busy.as_secs_f64();
        let rate = c.plain as f64 / c.secs;
        let verdict = if c.secs < VERIFY_TIME.as_secs_f64() {
            Verdict::Undecided
        } else if rate >= c.before * ACCEPT {
            Verdict::Won
        } else if rate < c.before * REVERT {
            Verdict::Lost
        } else if now >= c.at + VERIFY_MAX {
            // Neither: a deep queue still draining, or a limit elsewhere.
            // A step down stands (it is cheaper); a step up stands if cheap.
            if self.rung < c.from || c.busy / c.secs < NEUTRAL_BUSY {
                Verdict::Won
            } else {
                Verdict::Lost
            }
        } else {
            Verdict::Undecided
        };
        let from = c.from;
        if !matches!(verdict, Verdict::Undecided) {
            log::debug!(
                "compression auto: rung {from} -> {}: {} ({:.1} MB/s over {:.2} s, {:.1} before)",
                self.rung,
                if matches!(verdict, Verdict::Won) {
                    "kept"
                } else {
                    "undone"
                },
                rate / 1e6,
                c.secs,
                c.before / 1e6
            );
        }
        match verdict {
            Verdict::Undecided => {}
            Verdict::Won => {
                self.checking = None;
                self.backoff = MIN_BACKOFF;
                self.next_move = now;
            }
            Verdict::Lost => {
                self.checking = None;
                self.rung = from;
                self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
                self.moved(now, now + self.backoff);
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use std::collections::VecDeque;

    use super::*;

    /// How data compresses at each setting, and how fast.
    #[derive(Clone, Copy)]
    struct Data {
        ratio1: f64,
        ratio2: f64,
        ratio3: f64,
        speed1: f64,
        speed2: f64,
        speed3: f64,
    }

    /// Text like the scorecard's with a 1 MiB window: 2.9:1 at level 1,
    /// 3.4:1 at levels 2 and 3.
    const TEXT: Data = Data {
        ratio1: 0.35,
        ratio2: 0.30,
        ratio3: 0.29,
        speed1: 450e6,
        speed2: 250e6,
        speed3: 150e6,
    };
    const RANDOM: Data = Data {
        ratio1: 1.0,
        ratio2: 1.0,
        ratio3: 1.0,
        speed1: 450e6,
        speed2: 250e6,
        speed3: 150e6,
    };

    impl Data {
        fn at(&self, s: Setting) -> (f64, f64) {
            match s {
                Setting::Stored => (1.0, f64::INFINITY),
                Setting::Level(1) => (self.ratio1, self.speed1),
                Setting::Level(2) => (self.ratio2, self.speed2),
                Setting::Level(_) => (self.ratio3, self.speed3),
            }
        }
    }

    /// Hands `a` the samples it wants of one packet of `data`.
    fn sample(a: &mut AutoLevel, data: Data) {
        for s in a.samples_due(PACKET as usize) {
            let (r, sp) = data.at(*s);
            let n = SAMPLE_MAX as f64;
            a.record_sample(
                *s,
                SAMPLE_MAX,
                (n * r) as usize,
                Duration::from_secs_f64(n / sp),
            );
        }
    }

    /// A sender behind a link: at most `window` plain bytes unacknowledged,
    /// the link carrying `link` wire bytes a second after a queue, acks
    /// coming back `rtt` after a packet has left the queue. The sender's
    /// CPU seals `seal` bytes a second besides compressing.
    struct Link {
        link: f64,
        rtt: f64,
        window: u64,
        seal: f64,
        /// Seconds since the start.
        t: f64,
        link_free: f64,
        in_flight: VecDeque<(f64, u64)>,
        in_flight_bytes: u64,
        sent: u64,
    }

    const PACKET: u64 = 256 * 1024;

    impl Link {
        fn new(link: f64, rtt: f64, window: u64) -> Self {
            Self {
                link,
                rtt,
                window,
                seal: 2e9,
                t: 0.0,
                link_free: 0.0,
                in_flight: VecDeque::new(),
                in_flight_bytes: 0,
                sent: 0,
            }
        }

        /// Sends for `secs` with `a` choosing and `data` compressing as
        /// given; returns the plain bytes sent.
        fn run(&mut self, a: &mut AutoLevel, start: Instant, data: Data, secs: f64) -> u64 {
            let before = self.sent;
            let end = self.t + secs;
            while self.t < end {
                while self.in_flight_bytes + PACKET > self.window {
                    let (acked_at, n) = self.in_flight.pop_front().unwrap();
                    self.t = self.t.max(acked_at);
                    self.in_flight_bytes -= n;
                }
                let setting = a.setting();
                let (ratio, speed) = data.at(setting);
                let busy = PACKET as f64 / speed;
                let busy = if busy.is_finite() { busy } else { 0.0 };
                self.t += busy + PACKET as f64 / self.seal;
                sample(a, data);
                let wire = (PACKET as f64 * ratio) as u64;
                let leaves = self.t.max(self.link_free) + wire as f64 / self.link;
                self.link_free = leaves;
                self.in_flight.push_back((leaves + self.rtt, PACKET));
                self.in_flight_bytes += PACKET;
                self.sent += PACKET;
                let now = start + Duration::from_secs_f64(self.t);
                a.observe(
                    now,
                    PACKET as usize,
                    wire as usize,
                    Duration::from_secs_f64(busy),
                );
            }
            self.sent - before
        }
    }

    fn rate_over(link: f64, rtt: f64, window: u64, data: Data, secs: f64) -> (f64, AutoLevel) {
        let start = Instant::now();
        let mut a = AutoLevel::new(start);
        let mut l = Link::new(link, rtt, window);
        let sent = l.run(&mut a, start, data, secs);
        (sent as f64 / secs, a)
    }

    #[test]
    fn a_slow_link_with_text_climbs_past_level_1() {
        // 200 Mbit/s, 20 ms RTT, 16 MiB and 64 MiB in flight: levels 2 and
        // 3 carry 83-86 MB/s where level 1 carries 71 (over the 6 s, less
        // the stored bytes queued before the first move: 2.7 s of them
        // with 64 MiB).
        for (window, least) in [(16 << 20, 75e6), (64 << 20, 60e6)] {
            let (rate, a) = rate_over(25e6, 0.02, window, TEXT, 6.0);
            assert!(
                matches!(a.setting(), Setting::Level(2 | 3)),
                "window {window}: {:?}",
                a.setting()
            );
            assert!(rate > least, "window {window}: {:.1} MB/s", rate / 1e6);
        }
    }

    #[test]
    fn loopback_stays_stored() {
        // Storing runs at 1 GB/s, faster than zstd -1 compresses: no move.
        let (_, a) = rate_over(1.2e9, 0.0001, 16 << 20, TEXT, 3.0);
        assert_eq!(a.setting(), Setting::Stored);
        assert_eq!(a.moves(), 0);
    }

    #[test]
    fn random_data_stays_stored() {
        let (_, a) = rate_over(25e6, 0.02, 16 << 20, RANDOM, 3.0);
        assert_eq!(a.setting(), Setting::Stored);
        assert_eq!(a.moves(), 0);
    }

    #[test]
    fn a_fast_link_stays_at_level_1_where_level_3_would_be_the_serial_stage() {
        // 1 Gbit/s: level 1 carries 125 / 0.35 = 357 MB/s of which the CPU
        // reaches about 370; level 3 is held to 150 by its compressor.
        let (_, a) = rate_over(125e6, 0.02, 16 << 20, TEXT, 4.0);
        assert_eq!(a.setting(), Setting::Level(1));
    }

    #[test]
    fn a_busy_level_3_steps_down_to_a_level_2_that_compresses_as_well() {
        // 1 Gbit/s, and the first window (a pipeline still filling) looked
        // slow enough for level 3: its compressor is the serial stage, and
        // level 2 keeps the ratio at less CPU (run zstd-8).
        let start = Instant::now();
        let mut a = AutoLevel::new(start);
        let mut l = Link::new(25e6, 0.02, 16 << 20);
        l.run(&mut a, start, TEXT, 0.5);
        l.link = 125e6;
        l.run(&mut a, start, TEXT, 2.0);
        assert!(
            matches!(a.setting(), Setting::Level(1 | 2)),
            "{:?}",
            a.setting()
        );
    }

    #[test]
    fn a_slow_cpu_stays_stored() {
        // zstd -1 at 30 MB/s cannot beat a 25 MB/s link by the headroom.
        let slow = Data {
            speed1: 30e6,
            speed2: 18e6,
            speed3: 10e6,
            ..TEXT
        };
        let (_, a) = rate_over(25e6, 0.02, 16 << 20, slow, 3.0);
        assert_eq!(a.setting(), Setting::Stored);
    }

    #[test]
    fn data_that_stops_compressing_is_stored() {
        let start = Instant::now();
        let mut a = AutoLevel::new(start);
        let mut l = Link::new(25e6, 0.02, 16 << 20);
        l.run(&mut a, start, TEXT, 4.0);
        assert_ne!(a.setting(), Setting::Stored);
        l.run(&mut a, start, RANDOM, 2.0);
        assert_eq!(a.setting(), Setting::Stored);
    }

    #[test]
    fn a_link_that_speeds_up_brings_the_level_down() {
        let start = Instant::now();
        let mut a = AutoLevel::new(start);
        let mut l = Link::new(25e6, 0.02, 16 << 20);
        l.run(&mut a, start, TEXT, 4.0);
        let slow = a.setting();
        assert!(matches!(slow, Setting::Level(2 | 3)), "{slow:?}");
        l.link = 1.2e9;
        l.run(&mut a, start, TEXT, 3.0);
        assert!(a.setting().level() < slow.level(), "{:?}", a.setting());
    }

    #[test]
    fn level_3_held_by_both_the_link_and_its_compressor_stays() {
        // Level 3 compresses 104 MB/s, busy all the time, and the link
        // carries 100; levels 1 and 2 would move 62 and 66. Stored goes
        // to level 2 (the middle), then up to 3, and stays.
        let data = Data {
            ratio1: 0.40,
            ratio2: 0.38,
            ratio3: 0.25,
            speed3: 110e6,
            ..TEXT
        };
        let (rate, a) = rate_over(25e6, 0.02, 16 << 20, data, 3.0);
        assert_eq!(a.setting(), Setting::Level(3));
        assert_eq!(a.moves(), 2, "{:.1} MB/s", rate / 1e6);
    }

    #[test]
    fn a_move_that_loses_is_undone_and_the_next_waits_longer() {
        // The link looks slow, but the peer takes only 25 MB/s of plain
        // bytes whatever comes: compressing gains nothing, and level 1's
        // compressor here is slow enough (60 MB/s) to cost.
        let start = Instant::now();
        let mut a = AutoLevel::new(start);
        let mut t = start;
        let data = Data {
            speed1: 60e6,
            speed2: 35e6,
            speed3: 20e6,
            ..TEXT
        };
        let mut first = None;
        for _ in 0..400 {
            let s = a.setting();
            let (ratio, speed) = data.at(s);
            sample(&mut a, data);
            let busy = if s == Setting::Stored {
                0.0
            } else {
                PACKET as f64 / speed
            };
            // Compressing slows the peer-bound 25 MB/s by its CPU time.
            t += Duration::from_secs_f64(PACKET as f64 / 25e6 + busy * 0.5);
            a.observe(
                t,
                PACKET as usize,
                (PACKET as f64 * ratio) as usize,
                Duration::from_secs_f64(busy),
            );
            if s != Setting::Stored && first.is_none() {
                first = Some(t);
            }
        }
        assert!(first.is_some(), "level 1 was never tried");
        assert_eq!(a.setting(), Setting::Stored);
        assert!(a.backoff() > MIN_BACKOFF);
    }
}
