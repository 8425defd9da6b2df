//! SSH compression as ferry offers it (`-C`/`--compress`), and what each
//! connection reports about it. docs/internals/compression.md has the wire
//! format, the memory bounds and how `auto` decides.
//!
//! Between ferry peers the method is `zstd@ferry.invalid` (ferry's russh,
//! vendor/russh/FERRY-PATCH.md); OpenSSH never lists it, so with sshd the
//! offer falls through to `zlib@openssh.com` or `none`. The zstd sender
//! changes its level while the transfer runs; in `auto` it starts by
//! storing packets and compresses only when it measures that compressing
//! moves more data (russh's `compression::AutoLevel`).
//!
//! With OpenSSH, `auto` starts with `none`: zlib offered from the start
//! cost more than it gave (BENCHMARKS.md, run zstd-6: once zlib is agreed
//! sshd inflates every packet, stored ones too, so uploads on loopback ran
//! 0.79-0.85x `-C=off`). Instead crate::zlib_switch turns
//! `zlib@openssh.com` on by a rekey, per direction, once it measures a
//! slow link and data that compresses, and off again if that did not pay.
//! `-C` (`on`) gets zlib both ways at zlib's fastest level from the start.
//! zlib's byte counts are reported like zstd's.

use std::str::FromStr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use russh::compression::{self, CompressionStats, ZstdLevel, ZstdSettings};

/// What `-C`/`--compress` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SshCompression {
    /// Offer only `none`.
    Off,
    /// The default. zstd between ferry peers, the level chosen while the
    /// transfer runs, starting by storing packets (on loopback it costs
    /// nothing measurable: run zstd-5 in BENCHMARKS.md). With OpenSSH,
    /// `none`, and zlib by a rekey where it is measured to pay
    /// (crate::zlib_switch). HTTP uploads to ferry serve
    /// read it as their own rule: plain unless a measured plain stretch
    /// says coding pays (ferry_http::encode::Verdict).
    #[default]
    Auto,
    /// Always compress: zstd level 1 between ferry peers, zlib (its fastest
    /// level) with OpenSSH.
    On,
    /// zstd at this level (1..=19) between ferry peers, zlib with OpenSSH.
    Level(i32),
}

impl FromStr for SshCompression {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            "on" | "yes" => Ok(Self::On),
            "off" | "no" => Ok(Self::Off),
            _ => match s.parse::<i32>() {
                Ok(l) if (1..=19).contains(&l) => Ok(Self::Level(l)),
                _ => Err(format!(
                    "{s:?}: expected auto, on, off or a zstd level from 1 to 19"
                )),
            },
        }
    }
}

/// What ferry cp offers in its key exchange, per direction, and how its
/// senders work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offer {
    /// Most wanted first, for uploads.
    pub client_to_server: Vec<compression::Name>,
    /// For downloads.
    pub server_to_client: Vec<compression::Name>,
    pub zstd_level: ZstdLevel,
    /// zlib (OpenSSH) stores until compressing pays (`AutoLevel` with
    /// `ZLIB_RULES`), instead of compressing every packet.
    pub zlib_auto: bool,
}

impl SshCompression {
    /// The methods to offer, most wanted first, and the senders' settings.
    pub fn offer(self) -> Offer {
        use compression::{NONE, ZLIB, ZLIB_LEGACY, ZSTD};
        let (client_to_server, server_to_client, zstd_level) = match self {
            Self::Off => (vec![NONE], vec![NONE], ZstdLevel::Auto),
            Self::Auto => (vec![ZSTD, NONE], vec![ZSTD, NONE], ZstdLevel::Auto),
            Self::On | Self::Level(_) => {
                let all = vec![ZSTD, ZLIB_LEGACY, ZLIB, NONE];
                let level = match self {
                    Self::Level(l) => l,
                    _ => 1,
                };
                (all.clone(), all, ZstdLevel::Fixed(level))
            }
        };
        Offer {
            client_to_server,
            server_to_client,
            zstd_level,
            zlib_auto: self == Self::Auto,
        }
    }
}

/// What ferry serve offers: zstd for ferry cp (which adapts the level on
/// its side; the server's sender runs `auto` unless `ferry serve
/// --compress` fixes it), zlib for OpenSSH's `-C`, and `none`. A client's
/// order decides, so nobody gets compression it did not ask for.
pub const SERVER_OFFER: &[compression::Name] = &[
    compression::ZSTD,
    compression::ZLIB_LEGACY,
    compression::ZLIB,
    compression::NONE,
];

/// What ferry serve offers under `ferry serve --compress`: `off` offers
/// `none` alone (sshd's `Compression no`); anything else, `SERVER_OFFER`.
pub fn server_offer(c: SshCompression) -> &'static [compression::Name] {
    match c {
        SshCompression::Off => &[compression::NONE],
        _ => SERVER_OFFER,
    }
}

/// The zstd settings ferry serve uses for every connection: how it sends
/// (its download direction) under `ferry serve --compress`: `auto` as
/// ferry cp's, `on` zstd level 1, a level that level. The client still
/// chooses whether zstd is used at all.
pub fn server_zstd_settings(c: SshCompression) -> ZstdSettings {
    ZstdSettings {
        level: match c {
            SshCompression::Off | SshCompression::Auto => ZstdLevel::Auto,
            SshCompression::On => ZstdLevel::Fixed(1),
            SshCompression::Level(l) => ZstdLevel::Fixed(l),
        },
        stats: None,
        // OpenSSH's `sftp -C` asked for compression: it gets zlib's
        // fastest level, as from sshd.
        zlib_auto: false,
    }
}

/// One connection's compression: the methods the key exchange chose and
/// the counters zstd and zlib keep.
#[derive(Debug)]
pub(crate) struct ConnectionCompression {
    /// (client to server, server to client), set by `kex_done`.
    pub methods: Mutex<Option<(String, String)>>,
    pub stats: Arc<CompressionStats>,
    /// Finished key exchanges, the first included: more than one means
    /// the connection rekeyed (each resets the compression streams).
    pub key_exchanges: std::sync::atomic::AtomicU64,
    /// Rekeys `auto` asked for to turn zlib on or off with a peer that
    /// has no zstd (crate::zlib_switch).
    pub switches: std::sync::atomic::AtomicU64,
}

/// Every connection of this process, for the summary at the end
/// (`compression_report`). A process runs one copy, so a process-wide
/// list is the copy's list.
static CONNECTIONS: Mutex<Vec<Arc<ConnectionCompression>>> = Mutex::new(Vec::new());

/// A new connection's record; listed for `compression_report` if `listed`.
pub(crate) fn register(listed: bool) -> Arc<ConnectionCompression> {
    let c = Arc::new(ConnectionCompression {
        methods: Mutex::new(None),
        stats: Arc::new(CompressionStats::new()),
        key_exchanges: Default::default(),
        switches: Default::default(),
    });
    if listed {
        CONNECTIONS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(c.clone());
    }
    c
}

/// The name of a negotiated method, as on the wire.
pub(crate) fn method_name(c: &compression::Compression) -> &'static str {
    match c {
        compression::Compression::None => "none",
        compression::Compression::Zlib => "zlib",
        compression::Compression::ZlibOpenSSH => "zlib@openssh.com",
        compression::Compression::Zstd(_) => "zstd@ferry.invalid",
        compression::Compression::FerryZlib { openssh: true, .. } => "zlib@openssh.com",
        compression::Compression::FerryZlib { openssh: false, .. } => "zlib",
    }
}

/// Compression over all SSH connections this process made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompressionReport {
    /// Client to server (uploads), e.g. `zstd@ferry.invalid`.
    pub method_out: String,
    /// Server to client (downloads).
    pub method_in: String,
    /// Levels our side sent packets at (zstd's, or zlib's: 1), 0 meaning
    /// stored. The server's levels (downloads) are its own and not known
    /// here (sshd's zlib: level 6).
    pub levels_sent: Vec<i32>,
    /// SSH payload bytes before and after compression, as sent by us...
    pub sent_plain: u64,
    pub sent_wire: u64,
    /// ...and as received (after and before decompression), zstd and
    /// zlib alike.
    pub received_plain: u64,
    pub received_wire: u64,
    /// Key exchanges over all connections (one each, plus rekeys).
    pub key_exchanges: u64,
    /// Rekeys `auto` asked for to turn zlib on or off with OpenSSH.
    pub zlib_switches: u64,
}

/// The compression used by this process's SSH connections, if any
/// connection finished its key exchange.
pub fn compression_report() -> Option<CompressionReport> {
    let all = CONNECTIONS.lock().unwrap_or_else(|e| e.into_inner());
    let mut report: Option<CompressionReport> = None;
    for c in all.iter() {
        let Some((out, inn)) = c.methods.lock().unwrap_or_else(|e| e.into_inner()).clone() else {
            continue;
        };
        let r = report.get_or_insert_with(|| CompressionReport {
            method_out: out.clone(),
            method_in: inn.clone(),
            levels_sent: Vec::new(),
            sent_plain: 0,
            sent_wire: 0,
            received_plain: 0,
            received_wire: 0,
            key_exchanges: 0,
            zlib_switches: 0,
        });
        // Connections may differ (one turned zlib on, another did not):
        // each method once, as first seen.
        for (all, m) in [(&mut r.method_out, &out), (&mut r.method_in, &inn)] {
            if !all.split(", ").any(|x| x == m) {
                all.push_str(", ");
                all.push_str(m);
            }
        }
        let s = &c.stats;
        for l in s.levels_used() {
            if !r.levels_sent.contains(&l) {
                r.levels_sent.push(l);
            }
        }
        r.sent_plain += s.sent_plain.load(Ordering::Relaxed);
        r.sent_wire += s.sent_wire.load(Ordering::Relaxed);
        r.received_plain += s.received_plain.load(Ordering::Relaxed);
        r.received_wire += s.received_wire.load(Ordering::Relaxed);
        r.key_exchanges += c.key_exchanges.load(Ordering::Relaxed);
        r.zlib_switches += c.switches.load(Ordering::Relaxed);
    }
    if let Some(r) = &mut report {
        r.levels_sent.sort_unstable();
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compress_flag_values() {
        assert_eq!("auto".parse(), Ok(SshCompression::Auto));
        assert_eq!("on".parse(), Ok(SshCompression::On));
        assert_eq!("off".parse(), Ok(SshCompression::Off));
        assert_eq!("3".parse(), Ok(SshCompression::Level(3)));
        assert!("0".parse::<SshCompression>().is_err());
        assert!("20".parse::<SshCompression>().is_err());
        assert!("fast".parse::<SshCompression>().is_err());
    }

    #[test]
    fn auto_offers_zstd_then_none_and_on_adds_zlib() {
        use compression::{NONE, ZLIB, ZLIB_LEGACY, ZSTD};
        // ferry serve lists zstd: it wins both ways. sshd does not: none.
        let auto = SshCompression::Auto.offer();
        assert_eq!(auto.client_to_server, vec![ZSTD, NONE]);
        assert_eq!(auto.server_to_client, vec![ZSTD, NONE]);
        assert!(auto.zlib_auto);
        assert_eq!(auto.zstd_level, ZstdLevel::Auto);
        let on = SshCompression::On.offer();
        assert_eq!(on.client_to_server, vec![ZSTD, ZLIB_LEGACY, ZLIB, NONE]);
        assert_eq!(on.server_to_client, on.client_to_server);
        assert!(!on.zlib_auto);
        assert_eq!(on.zstd_level, ZstdLevel::Fixed(1));
        assert_eq!(
            SshCompression::Level(5).offer().zstd_level,
            ZstdLevel::Fixed(5)
        );
        let off = SshCompression::Off.offer();
        assert_eq!(off.client_to_server, vec![NONE]);
        assert_eq!(off.server_to_client, vec![NONE]);
    }
}
