//! `auto` with a peer that has no zstd (OpenSSH): `none` until zlib pays,
//! then `zlib@openssh.com` for that direction by a rekey, and back to
//! `none` the same way if the switch did not pay.
//!
//! Offering zlib from the start cost more than it gave (BENCHMARKS.md,
//! run zstd-6): once zlib is agreed, sshd inflates every packet, stored
//! ones too, and on loopback sshd's one core is the upload's limit; sshd
//! also compresses its own sending at zlib's level 6 (30-40 MB/s per core
//! here) whatever the client asks. So the connection starts with `none`,
//! and this module watches it: per direction, the rate its SFTP channel
//! moves file data (the bytes of requests the server answered going out,
//! bytes received coming in), and a 32 KiB sample of that data compressed aside at the
//! level the sender would use (ours: zlib's fastest, 1; sshd's: 6). When
//! the sample shrinks to [`COMPRESSES`] or less and zlib would move at
//! least [`GAIN`] times what the link moves now, predicted as
//! `min(rate / ratio, sample speed / HEADROOM)`, the client rekeys with
//! `zlib@openssh.com` first in that direction's list. A rekey may change
//! every algorithm (RFC 4253 section 9) and OpenSSH starts delayed
//! compression at a rekey after authentication, with a fresh stream
//! (`ssh_set_newkeys`). The next whole window is the ramp; the one after
//! it is judged: zlib is kept if it moves [`KEEP`] times the rate before,
//! and otherwise turned off by another rekey and not tried again on that
//! connection (a long fast path, where sshd's 2 MiB channel window and
//! not the link is the limit of an upload, is such a case: run zstd-6
//! measured zlib at 0.87x there).
//!
//! [`Switch`] is the decision alone (rates and samples in, moves out),
//! tested without sockets; [`LinkProbe`] is what the SFTP client feeds;
//! [`run`] is the task that ties them to a connection.
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use russh::compression::{self, ZstdSettings};
use russh::Preferred;

use crate::compression::ConnectionCompression;

/// A sample compresses to at most this share of its size, or zlib is not
/// tried (`ZLIB_RULES`' threshold in russh).
pub const COMPRESSES: f64 = 0.8;
/// zlib is turned on when it is predicted to move this many times the
/// current rate: room for the prediction's error and the two rekeys.
pub const GAIN: f64 = 1.5;
/// How much slower a stream compresses than a 32 KiB sample of it: a
/// sample at zlib -1 ran 1.5x the sender's stream (run zstd-6, 222
/// against 144 MB/s).
pub const HEADROOM: f64 = 1.5;
/// A window that moved more than this many times the one before is a
/// connection still ramping up: not judged.
pub const RISING: f64 = 1.25;
/// After the ramp, zlib is kept if it moves this many times the rate
/// before it.
pub const KEEP: f64 = 1.15;
/// One measuring window: at least this long and at least
/// [`WINDOW_BYTES`] moved...
pub const WINDOW: Duration = Duration::from_secs(1);
/// ...the bytes (a slow link's share: with 2 connections on 20 Mbit/s
/// each moves about 1.2 MB/s, and a 1 MiB floor kept one of them from
/// ever deciding)...
pub const WINDOW_BYTES: u64 = 256 << 10;
/// ...or, if fewer bytes moved, this long: the direction was idle and the
/// window decides nothing.
pub const WINDOW_MAX: Duration = Duration::from_secs(4);
/// How often the task looks.
const TICK: Duration = Duration::from_millis(250);
/// The sample's size.
pub const SAMPLE: usize = 32 * 1024;
/// The level of our zlib sender (russh's `FerryZlib` with `zlib_auto`
/// off: every packet at zlib's fastest level, as `-C` sends)...
pub const OUR_LEVEL: u32 = 1;
/// ...and of OpenSSH's (`start_compression_out(ssh, 6)` in packet.c).
pub const OPENSSH_LEVEL: u32 = 6;

/// A direction of the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Client to server: uploads.
    Out,
    /// Server to client: downloads.
    In,
}

impl Direction {
    fn word(self) -> &'static str {
        match self {
            Direction::Out => "uploads",
            Direction::In => "downloads",
        }
    }
    fn level(self) -> u32 {
        match self {
            Direction::Out => OUR_LEVEL,
            Direction::In => OPENSSH_LEVEL,
        }
    }
}

/// A sample compressed aside: its size after / before, and how fast
/// (plain bytes per second of compressing).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    pub ratio: f64,
    pub speed: f64,
}

/// What [`Switch`] wants done.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Move {
    /// Rekey with zlib on in this direction (`predicted` bytes/s).
    On { predicted: f64 },
    /// Rekey with zlib off again: it moved `rate` against `before`.
    Off { rate: f64, before: f64 },
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    /// `none`, looking for a window where zlib pays; the rate of the last
    /// window, if any.
    Watching { last: Option<f64> },
    /// zlib asked for; the windows since the rekey finished (the first is
    /// the ramp).
    Judging { before: f64, windows: u32 },
    /// zlib kept.
    On,
    /// zlib turned off again, or refused by the server: not tried again.
    Held,
}

/// One direction's decision, fed one window at a time.
#[derive(Debug, Clone)]
pub struct Switch {
    state: State,
}

impl Default for Switch {
    fn default() -> Self {
        Switch {
            state: State::Watching { last: None },
        }
    }
}

impl Switch {
    /// A finished window: the rate it moved (bytes/s, `None` if idle) and
    /// a sample of its data compressed aside, if one was taken.
    /// `switched` says whether the connection's method in this direction
    /// is zlib now (a rekey asked for may not have finished).
    ///
    /// `link` is the best rate this direction reached without zlib in
    /// any window of any connection to the server: the link carries at
    /// least that, and zlib must beat it too. A window that moved little
    /// because it had little to do (a connection joining late or running
    /// out of work on loopback) is then not taken for a slow link.
    ///
    /// `cap` is the most the direction can move whatever the compression
    /// (bytes/s; infinite when not known): an upload to sshd is held at
    /// its 2 MiB channel window per round trip, which counts plain bytes.
    pub fn window(
        &mut self,
        rate: Option<f64>,
        sample: Option<Sample>,
        switched: bool,
        link: f64,
        cap: f64,
    ) -> Option<Move> {
        let rate = rate?;
        match self.state {
            State::Watching { last } => {
                self.state = State::Watching { last: Some(rate) };
                // A rate still rising is a connection ramping up (slow
                // start, windows growing: 1 Gbit/s at 50 ms moved 5-8 MB/s
                // in its first second and was taken for a slow link), not
                // a link: only a steady one is judged.
                if last.is_none_or(|l| rate > RISING * l) {
                    return None;
                }
                let s = sample?;
                if s.ratio > COMPRESSES || s.ratio <= 0.0 {
                    return None;
                }
                let predicted = (rate / s.ratio).min(s.speed / HEADROOM).min(cap);
                (predicted >= GAIN * rate.max(link)).then(|| {
                    self.state = State::Judging {
                        before: rate,
                        windows: 0,
                    };
                    Move::On { predicted }
                })
            }
            State::Judging { before, windows } => {
                if !switched {
                    // The rekey has not finished; its windows do not count.
                    return None;
                }
                if windows == 0 {
                    self.state = State::Judging { before, windows: 1 };
                    return None;
                }
                if rate >= KEEP * before {
                    self.state = State::On;
                    None
                } else {
                    self.state = State::Held;
                    Some(Move::Off { rate, before })
                }
            }
            State::On | State::Held => None,
        }
    }

    /// The server did not agree zlib (its list has no zlib): stop.
    pub fn refused(&mut self) {
        self.state = State::Held;
    }

    /// Whether zlib is (to be) on in this direction.
    pub fn wants_zlib(&self) -> bool {
        matches!(self.state, State::Judging { .. } | State::On)
    }

    /// Whether a sample will be of use at the end of the next window.
    fn wants_sample(&self) -> bool {
        matches!(self.state, State::Watching { .. })
    }
}

/// The best rate without zlib that any connection to one server moved,
/// per direction (bytes/s): shared by the connections of a `Connector`.
#[derive(Debug, Default)]
pub struct LinkBest {
    out: AtomicU64,
    inn: AtomicU64,
}

impl LinkBest {
    fn of(&self, d: Direction) -> &AtomicU64 {
        match d {
            Direction::Out => &self.out,
            Direction::In => &self.inn,
        }
    }
    fn get(&self, d: Direction) -> f64 {
        self.of(d).load(Ordering::Relaxed) as f64
    }
    fn record(&self, d: Direction, rate: f64) {
        self.of(d).fetch_max(rate as u64, Ordering::Relaxed);
    }
}

/// What the SFTP client feeds: the bytes each way and, when asked, a
/// sample of them (a slice of a packet it already holds, no copy).
#[derive(Debug, Default)]
pub struct LinkProbe {
    /// Bytes of requests the server has answered: what crossed the link.
    /// Not what was handed to the channel: the first 16 requests in
    /// flight (4 MiB) would count as moved at once, and on a 2.5 MB/s link
    /// the first window read 10.4 MB/s.
    answered: AtomicU64,
    received: AtomicU64,
    want_out: AtomicBool,
    want_in: AtomicBool,
    sample_out: Mutex<Option<Bytes>>,
    sample_in: Mutex<Option<Bytes>>,
    /// The most uploads can move whatever the compression (f64 bits;
    /// 0: not known): the server's channel window per round trip.
    cap_out: AtomicU64,
}

impl LinkProbe {
    /// The server's channel window for our data and the path's round
    /// trip: uploads move at most `window / round trip`, whatever the
    /// compression, since the window counts plain bytes.
    pub(crate) fn set_upload_window(&self, window: u32, round_trip: Duration) {
        let secs = round_trip.as_secs_f64();
        if window > 0 && secs > 0.0 {
            self.cap_out
                .store((f64::from(window) / secs).to_bits(), Ordering::Relaxed);
        }
    }

    fn cap(&self, d: Direction) -> f64 {
        match (d, self.cap_out.load(Ordering::Relaxed)) {
            (Direction::Out, bits) if bits != 0 => f64::from_bits(bits),
            _ => f64::INFINITY,
        }
    }

    /// Bytes handed to the channel: a sample, if one is wanted.
    pub(crate) fn sent(&self, b: &Bytes) {
        Self::offer(&self.want_out, &self.sample_out, b);
    }

    /// Whether a sample of what is sent is wanted now: a WRITE read into
    /// its packets ([`crate::SftpClient::write_from`]) is read into a
    /// buffer instead, so that [`LinkProbe::sent`] can take it.
    pub(crate) fn wants_sent(&self) -> bool {
        self.want_out.load(Ordering::Relaxed)
    }

    /// A request of `len` bytes was answered.
    pub(crate) fn answered(&self, len: usize) {
        self.answered.fetch_add(len as u64, Ordering::Relaxed);
    }

    /// Bytes received on the channel.
    pub(crate) fn received(&self, b: &Bytes) {
        self.received.fetch_add(b.len() as u64, Ordering::Relaxed);
        Self::offer(&self.want_in, &self.sample_in, b);
    }

    fn offer(want: &AtomicBool, slot: &Mutex<Option<Bytes>>, b: &Bytes) {
        // A small message (a request, a status) says nothing of the data.
        // Every data message passes here: a plain load first, so the
        // swap's write happens once a window, not once a message.
        if b.len() >= SAMPLE / 2
            && want.load(Ordering::Relaxed)
            && want.swap(false, Ordering::Relaxed)
        {
            *lock(slot) = Some(b.slice(..b.len().min(SAMPLE)));
        }
    }

    fn count(&self, d: Direction) -> u64 {
        match d {
            Direction::Out => self.answered.load(Ordering::Relaxed),
            Direction::In => self.received.load(Ordering::Relaxed),
        }
    }

    fn ask_sample(&self, d: Direction) {
        match d {
            Direction::Out => self.want_out.store(true, Ordering::Relaxed),
            Direction::In => self.want_in.store(true, Ordering::Relaxed),
        }
    }

    fn take_sample(&self, d: Direction) -> Option<Bytes> {
        match d {
            Direction::Out => lock(&self.sample_out).take(),
            Direction::In => lock(&self.sample_in).take(),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Compress `data` aside at zlib `level`: its ratio and speed.
pub fn measure(data: &[u8], level: u32) -> Sample {
    let mut c = flate2::Compress::new(flate2::Compression::new(level), true);
    let mut out = Vec::with_capacity(data.len() + 64);
    let start = Instant::now();
    let _ = c.compress_vec(data, &mut out, flate2::FlushCompress::Sync);
    let took = start.elapsed().as_secs_f64().max(1e-6);
    Sample {
        ratio: out.len() as f64 / data.len().max(1) as f64,
        speed: data.len() as f64 / took,
    }
}

/// The algorithm lists with zlib on or off in each direction, from the
/// lists the connection started with.
fn preferred_with(base: &Preferred, out_zlib: bool, in_zlib: bool) -> Preferred {
    use compression::{NONE, ZLIB, ZLIB_LEGACY};
    let list = |on: bool| -> Vec<compression::Name> {
        if on {
            vec![ZLIB_LEGACY, ZLIB, NONE]
        } else {
            vec![NONE]
        }
    };
    Preferred {
        compression: list(out_zlib).into(),
        compression_server_to_client: Some(list(in_zlib).into()),
        zstd: ZstdSettings {
            // Every packet at zlib's fastest level, as `-C` sends: the
            // switch has already judged that compressing pays.
            zlib_auto: false,
            ..base.zstd.clone()
        },
        ..base.clone()
    }
}

/// One direction as [`run`] watches it.
struct Watched {
    dir: Direction,
    switch: Switch,
    /// When the window began, and the probe's count then.
    start: Instant,
    at_start: u64,
    /// The method in this direction is zlib now.
    zlib_now: bool,
}

/// A rekey asked for and not yet seen finished.
struct Asked {
    /// Key exchanges finished when it was asked for.
    kex_before: u64,
    at: Instant,
}

/// A rekey asked for while another key exchange ran is dropped by russh:
/// asked again after this long.
const ASK_AGAIN: Duration = Duration::from_secs(3);

/// Watch one connection until it closes (see the module's doc). `base` is
/// the algorithm lists it was opened with; `label` names it in the log.
pub(crate) async fn run(
    rekeyer: russh::client::Rekeyer,
    probe: Arc<LinkProbe>,
    link: Arc<LinkBest>,
    compress: Arc<ConnectionCompression>,
    base: Preferred,
    label: String,
) {
    let mut dirs = [Direction::Out, Direction::In].map(|dir| {
        probe.ask_sample(dir);
        Watched {
            dir,
            switch: Switch::default(),
            start: Instant::now(),
            at_start: probe.count(dir),
            zlib_now: false,
        }
    });
    let mut asked: Option<Asked> = None;
    loop {
        tokio::time::sleep(TICK).await;
        if rekeyer.is_closed() {
            return;
        }
        if let Some((out, inn)) = lock(&compress.methods).as_ref() {
            for w in dirs.iter_mut() {
                let m = if w.dir == Direction::Out { out } else { inn };
                w.zlib_now = m.starts_with("zlib");
            }
        }
        // `ask`: a rekey to ask for; `new_move`: a move, not a rekey
        // asked again.
        let (mut ask, mut new_move) = (false, false);
        if let Some(a) = &asked {
            if compress.key_exchanges.load(Ordering::Relaxed) > a.kex_before {
                // It finished: did the server agree?
                asked = None;
                for w in dirs.iter_mut() {
                    if w.switch.wants_zlib() && !w.zlib_now {
                        tracing::info!(
                            "{label}: the server did not agree zlib for {}; staying with none",
                            w.dir.word()
                        );
                        w.switch.refused();
                    }
                }
            } else if a.at.elapsed() >= ASK_AGAIN {
                ask = true;
            }
        }
        for w in dirs.iter_mut() {
            let elapsed = w.start.elapsed();
            let count = probe.count(w.dir);
            let moved = count.saturating_sub(w.at_start);
            if elapsed < WINDOW || (moved < WINDOW_BYTES && elapsed < WINDOW_MAX) {
                continue;
            }
            w.start = Instant::now();
            w.at_start = count;
            let rate = (moved >= WINDOW_BYTES).then(|| moved as f64 / elapsed.as_secs_f64());
            let sample = probe
                .take_sample(w.dir)
                .filter(|_| rate.is_some())
                .map(|b| measure(&b, w.dir.level()));
            let best = link.get(w.dir);
            let decided = w
                .switch
                .window(rate, sample, w.zlib_now, best, probe.cap(w.dir));
            tracing::debug!(
                "{label}: {} window {:.2} s, {moved} bytes, sample {sample:?}, link {:.1} MB/s, zlib {}: {decided:?}",
                w.dir.word(),
                elapsed.as_secs_f64(),
                best / 1e6,
                w.zlib_now
            );
            if let (Some(r), false) = (rate, w.zlib_now) {
                link.record(w.dir, r);
            }
            match decided {
                Some(Move::On { predicted }) => {
                    tracing::info!(
                        "{label}: zlib on for {}: {:.1} MB/s now, {:.1} predicted",
                        w.dir.word(),
                        rate.unwrap_or(0.0) / 1e6,
                        predicted / 1e6
                    );
                    (ask, new_move) = (true, true);
                }
                Some(Move::Off { rate, before }) => {
                    tracing::info!(
                        "{label}: zlib off again for {}: {:.1} MB/s with it, {:.1} before",
                        w.dir.word(),
                        rate / 1e6,
                        before / 1e6
                    );
                    (ask, new_move) = (true, true);
                }
                None => {}
            }
            if w.switch.wants_sample() {
                probe.ask_sample(w.dir);
            }
        }
        if !ask {
            continue;
        }
        let [out, inn] = &dirs;
        let lists = preferred_with(&base, out.switch.wants_zlib(), inn.switch.wants_zlib());
        let kex_before = compress.key_exchanges.load(Ordering::Relaxed);
        if new_move {
            compress.switches.fetch_add(1, Ordering::Relaxed);
        }
        if rekeyer.rekey_with(lists).await.is_err() {
            return;
        }
        asked = Some(Asked {
            kex_before,
            at: Instant::now(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: f64 = 1e6;

    fn text_sample() -> Sample {
        Sample {
            ratio: 0.3,
            speed: 90.0 * MB,
        }
    }

    /// A window of `rate` with a text sample, zlib off, nothing known of
    /// the link.
    fn text_window(s: &mut Switch, rate: f64) -> Option<Move> {
        s.window(Some(rate), Some(text_sample()), false, 0.0, f64::INFINITY)
    }

    /// A switch that has seen one window at `rate` (the first is never
    /// judged: the rate may still be rising).
    fn steady_at(rate: f64, link: f64) -> Switch {
        let mut s = Switch::default();
        assert_eq!(
            s.window(Some(rate), Some(text_sample()), false, link, f64::INFINITY),
            None
        );
        s
    }

    #[test]
    fn zlib_goes_on_where_the_link_is_slow_and_the_data_compresses() {
        // (rate, sample, turned on?)
        let cases = [
            // 100 Mbit/s, text: predicted min(40, 60) = 40 >= 18.
            (12.0 * MB, text_sample(), true),
            // Loopback: predicted min(1667, 60) = 60 < 750.
            (500.0 * MB, text_sample(), false),
            // 1 Gbit/s: min(333, 60) < 150.
            (100.0 * MB, text_sample(), false),
            // Random data does not compress.
            (
                12.0 * MB,
                Sample {
                    ratio: 1.0,
                    speed: 200.0 * MB,
                },
                false,
            ),
            // Compresses a little: 0.85 > COMPRESSES.
            (
                1.0 * MB,
                Sample {
                    ratio: 0.85,
                    speed: 90.0 * MB,
                },
                false,
            ),
            // A slow compressor (sshd's level 6 on a slow CPU): min(40, 13.3) < 18.
            (
                12.0 * MB,
                Sample {
                    ratio: 0.3,
                    speed: 20.0 * MB,
                },
                false,
            ),
        ];
        for (rate, sample, on) in cases {
            let mut s = steady_at(rate, 0.0);
            let m = s.window(Some(rate), Some(sample), false, 0.0, f64::INFINITY);
            assert_eq!(matches!(m, Some(Move::On { .. })), on, "{rate} {sample:?}");
            assert_eq!(s.wants_zlib(), on);
        }
    }

    #[test]
    fn a_slow_window_on_a_link_known_to_be_fast_is_not_a_slow_link() {
        // A connection out of work on loopback, where others moved 95 MB/s.
        let mut s = steady_at(2.0 * MB, 95.0 * MB);
        assert_eq!(
            s.window(
                Some(2.0 * MB),
                Some(text_sample()),
                false,
                95.0 * MB,
                f64::INFINITY
            ),
            None
        );
        // Two connections sharing 20 Mbit/s: each moves half of the best.
        let mut s = steady_at(1.2 * MB, 2.4 * MB);
        assert!(matches!(
            s.window(
                Some(1.2 * MB),
                Some(text_sample()),
                false,
                2.4 * MB,
                f64::INFINITY
            ),
            Some(Move::On { .. })
        ));
    }

    #[test]
    fn a_rising_rate_is_a_ramp_not_a_slow_link() {
        // 1 Gbit/s at 50 ms: 5 MB/s in the first second, 20 in the next.
        let mut s = steady_at(5.0 * MB, 0.0);
        assert_eq!(text_window(&mut s, 20.0 * MB), None);
        // Steady at 40: min(133, 60) < 60.
        assert_eq!(text_window(&mut s, 40.0 * MB), None);
    }

    #[test]
    fn uploads_held_by_the_servers_window_gain_nothing_from_zlib() {
        // sshd's 2 MiB window per 50 ms: 42 MB/s whatever the compression.
        let mut s = steady_at(30.0 * MB, 0.0);
        let cap = 2.0 * 1048576.0 / 0.05;
        let fast = Sample {
            ratio: 0.3,
            speed: 200.0 * MB,
        };
        assert_eq!(s.window(Some(30.0 * MB), Some(fast), false, 0.0, cap), None);
        // The same without the cap: min(100, 133) >= 45.
        let mut s = steady_at(30.0 * MB, 0.0);
        assert!(s
            .window(Some(30.0 * MB), Some(fast), false, 0.0, f64::INFINITY)
            .is_some());
    }

    #[test]
    fn idle_windows_and_missing_samples_decide_nothing() {
        let mut s = Switch::default();
        assert_eq!(
            s.window(None, Some(text_sample()), false, 0.0, f64::INFINITY),
            None
        );
        assert_eq!(
            s.window(Some(12.0 * MB), None, false, 0.0, f64::INFINITY),
            None
        );
        assert!(s.wants_sample());
    }

    #[test]
    fn a_switch_that_pays_is_kept_and_one_that_does_not_is_undone_for_good() {
        for (after, kept) in [(30.0 * MB, true), (12.5 * MB, false)] {
            let mut s = steady_at(12.0 * MB, 0.0);
            assert!(text_window(&mut s, 12.0 * MB).is_some());
            // Windows before the rekey finished do not count.
            assert_eq!(
                s.window(Some(1.0 * MB), None, false, 0.0, f64::INFINITY),
                None
            );
            // The first after it is the ramp.
            assert_eq!(
                s.window(Some(1.0 * MB), None, true, 0.0, f64::INFINITY),
                None
            );
            let m = s.window(Some(after), None, true, 0.0, f64::INFINITY);
            if kept {
                assert_eq!(m, None);
                assert!(s.wants_zlib());
            } else {
                assert_eq!(
                    m,
                    Some(Move::Off {
                        rate: after,
                        before: 12.0 * MB
                    })
                );
                assert!(!s.wants_zlib());
            }
            // Either way, never again.
            assert_eq!(
                s.window(
                    Some(1.0 * MB),
                    Some(text_sample()),
                    true,
                    0.0,
                    f64::INFINITY
                ),
                None
            );
            assert!(!s.wants_sample());
        }
    }

    #[test]
    fn a_refused_switch_is_not_asked_again() {
        let mut s = steady_at(12.0 * MB, 0.0);
        assert!(text_window(&mut s, 12.0 * MB).is_some());
        s.refused();
        assert!(!s.wants_zlib());
        assert_eq!(text_window(&mut s, 12.0 * MB), None);
    }

    #[test]
    fn samples_are_taken_only_when_asked_and_only_of_data() {
        let p = LinkProbe::default();
        p.sent(&Bytes::from(vec![b'a'; 100_000]));
        assert!(p.take_sample(Direction::Out).is_none());
        p.ask_sample(Direction::Out);
        p.sent(&Bytes::from_static(b"small request"));
        assert!(p.take_sample(Direction::Out).is_none());
        p.sent(&Bytes::from(vec![b'b'; 100_000]));
        assert_eq!(p.take_sample(Direction::Out).map(|b| b.len()), Some(SAMPLE));
        // Counted once answered, not when sent.
        assert_eq!(p.count(Direction::Out), 0);
        p.answered(100_000);
        assert_eq!(p.count(Direction::Out), 100_000);
        assert_eq!(p.count(Direction::In), 0);
    }

    #[test]
    fn a_text_sample_measures_as_compressible_and_random_does_not() {
        let text: Vec<u8> = b"the ferry copies files over sftp and http\n"
            .iter()
            .cycle()
            .take(SAMPLE)
            .copied()
            .collect();
        let t = measure(&text, OUR_LEVEL);
        assert!(t.ratio < 0.2 && t.speed > 0.0, "{t:?}");
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let random: Vec<u8> = (0..SAMPLE)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        assert!(measure(&random, OPENSSH_LEVEL).ratio > COMPRESSES);
    }

    #[test]
    fn the_lists_put_zlib_first_only_where_asked() {
        use compression::{NONE, ZLIB, ZLIB_LEGACY};
        let base = Preferred::default();
        let p = preferred_with(&base, true, false);
        assert_eq!(&p.compression[..], &[ZLIB_LEGACY, ZLIB, NONE]);
        assert_eq!(p.compression_server_to_client.as_deref(), Some(&[NONE][..]));
        assert!(!p.zstd.zlib_auto);
        assert_eq!(p.cipher, base.cipher);
    }
}
