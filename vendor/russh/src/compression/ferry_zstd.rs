//! ferry: the `zstd@ferry.invalid` compression method, spoken only between
//! ferry peers (FERRY-PATCH.md, docs/internals/compression.md).
//!
//! Each direction is one zstd stream for the life of the keys: the sender
//! flushes it at the end of every packet (`ZSTD_e_flush`), so the receiver
//! decodes each packet at once and later packets can refer back to earlier
//! ones; both ends start a new stream at every key exchange. The window is
//! 2^`WINDOW_LOG` bytes and the receiver refuses frames asking for more, so
//! the memory a peer can make us hold is bounded (see `WINDOW_LOG`). A packet
//! that would inflate past the transport's packet limit is refused as soon
//! as the output reaches the limit: a compression bomb is a protocol error,
//! never a large allocation.
//!
//! The sender may change the level between packets. A level change ends the
//! current zstd frame (a few bytes) and starts the next one at the new level.
//! A "stored" packet is one zstd skippable frame (RFC 8878 section 3.1.2)
//! with the magic `STORED_MAGIC` whose user data is the SSH message itself:
//! 8 bytes in front of the message and nothing behind it, so the sender
//! seals it where the message was written and the receiver hands on a
//! slice of the packet, with no copy and no compressor pass on either side
//! (`ZstdCompressor::begin_stored`, `ZstdDecompressor::stored_offset`).
//! `AutoLevel` picks the level from what it measures (see there).

use std::sync::Arc;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::time::Instant;

use ::zstd::stream::raw::{Decoder, Encoder, InBuffer, Operation, OutBuffer};
use ::zstd::zstd_safe::{CParameter, DParameter};

use super::ferry_auto::{AutoLevel, SAMPLE_MAX};
use crate::cipher::MAXIMUM_DECOMPRESSED_PACKET_LEN;

/// log2 of the zstd window both ends use: 1 MiB. The sender sets it for
/// every level; the receiver refuses frames that ask for more
/// (`ZSTD_d_windowLogMax`). Memory per connection, both directions: the
/// decoder's window plus one 128 KiB block buffer (about 1.2 MiB), and the
/// encoder's window plus its match tables (about 1.5 MiB at level 1, 3 MiB
/// at level 3).
pub const WINDOW_LOG: u32 = 20;

/// The most one packet may inflate to: the transport's packet limit.
pub const MAX_DECOMPRESSED: usize = MAXIMUM_DECOMPRESSED_PACKET_LEN;

/// The largest zstd block (RFC 8878 section 3.1.1.2.4, Block_Maximum_Size).
const MAX_BLOCK: usize = 128 * 1024;

/// The magic of a stored packet's skippable frame (RFC 8878 section 3.1.2
/// allows 0x184D2A50..=0x184D2A5F; ferry uses the last). A stock zstd
/// decoder skips such a frame; ferry's receiver takes its user data as the
/// packet's SSH message. ferry's sender writes no other skippable frames.
const STORED_MAGIC: u32 = 0x184D_2A5F;

/// Magic and Frame_Size of a skippable frame.
const STORED_HEADER_LEN: usize = 8;

/// The last block of a frame when the stream is at a block boundary (after
/// a flush): an empty raw block with Last_Block set. With no checksum
/// (`ChecksumFlag` is off on the sender), this is the whole frame epilogue.
const FRAME_END: [u8; 3] = [1, 0, 0];

/// After a packet, the decoder's hint (the number of bytes it wants next)
/// is 0 when the packet ended a frame, and exactly the size of a block
/// header when it ended on a block boundary, which is where a flush leaves
/// the stream. Anything else means the packet stopped inside a block or a
/// header: it was truncated or malformed.
const BLOCK_HEADER_LEN: usize = 3;

/// What the sender does with the next packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZstdLevel {
    /// `AutoLevel` decides, from what it measures.
    Auto,
    /// Always this zstd level (1..=19). 0 stores every packet.
    Fixed(i32),
}

/// How a ferry peer configures `zstd@ferry.invalid` (`Preferred::zstd`),
/// and its zlib sender (compression/ferry_zlib.rs).
#[derive(Debug, Clone)]
pub struct ZstdSettings {
    pub level: ZstdLevel,
    /// Counters the application reads, e.g. for `--json`; zlib counts
    /// into them too.
    pub stats: Option<Arc<CompressionStats>>,
    /// zlib (`zlib@openssh.com`, `zlib`) stores or compresses as
    /// `AutoLevel` decides (`ZLIB_RULES`), instead of compressing every
    /// packet at zlib's fastest level.
    pub zlib_auto: bool,
}

impl ZstdSettings {
    pub const DEFAULT: ZstdSettings = ZstdSettings {
        level: ZstdLevel::Auto,
        stats: None,
        zlib_auto: false,
    };
}

impl Default for ZstdSettings {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Byte counts and levels of one connection's compression, both
/// directions. "plain" is SSH payload before compression (or after
/// decompression), "wire" the compressed payload.
#[derive(Debug, Default)]
pub struct CompressionStats {
    pub sent_plain: AtomicU64,
    pub sent_wire: AtomicU64,
    pub received_wire: AtomicU64,
    pub received_plain: AtomicU64,
    /// Bit 0: a packet was stored; bit n: a packet was sent at level n.
    levels_used: AtomicU64,
    /// The level of the last packet sent (0: stored; -1: none yet).
    current_level: AtomicI32,
    pub level_changes: AtomicU64,
}

impl CompressionStats {
    pub fn new() -> Self {
        Self {
            current_level: AtomicI32::new(-1),
            ..Self::default()
        }
    }

    /// The levels packets were sent at, ascending; 0 means stored.
    pub fn levels_used(&self) -> Vec<i32> {
        let bits = self.levels_used.load(Ordering::Relaxed);
        (0..64).filter(|i| bits & (1 << i) != 0).collect()
    }

    /// The level of the last packet sent (0: stored), if any was.
    pub fn current_level(&self) -> Option<i32> {
        let level = self.current_level.load(Ordering::Relaxed);
        (level >= 0).then_some(level)
    }

    pub(crate) fn sent(&self, setting: Setting, plain: usize, wire: usize) {
        self.sent_plain.fetch_add(plain as u64, Ordering::Relaxed);
        self.sent_wire.fetch_add(wire as u64, Ordering::Relaxed);
        let level = setting.level();
        self.levels_used
            .fetch_or(1 << level.clamp(0, 63), Ordering::Relaxed);
        if self.current_level.swap(level, Ordering::Relaxed) != level {
            self.level_changes.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// One packet's treatment (zstd's or zlib's level; 0 is not a level).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    Stored,
    Level(i32),
}

impl Setting {
    pub(crate) fn level(self) -> i32 {
        match self {
            Setting::Stored => 0,
            Setting::Level(l) => l,
        }
    }
}

fn zstd_error(what: &str, e: std::io::Error) -> crate::Error {
    crate::Error::Zstd(format!("{what}: {e}"))
}

/// The sending side of one direction.
pub struct ZstdCompressor {
    encoder: Encoder<'static>,
    /// A compressed frame has been started and not ended.
    frame_open: bool,
    /// The level the encoder is set to (for the next frame it starts).
    encoder_level: i32,
    setting: Setting,
    auto: Option<AutoLevel>,
    /// Compresses sample packets aside for `auto` (`AutoLevel::samples_due`).
    sampler: Option<::zstd::bulk::Compressor<'static>>,
    stats: Option<Arc<CompressionStats>>,
}

impl std::fmt::Debug for ZstdCompressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZstdCompressor")
            .field("setting", &self.setting)
            .finish()
    }
}

impl ZstdCompressor {
    pub fn new(settings: &ZstdSettings) -> Result<Self, crate::Error> {
        let (setting, auto) = match settings.level {
            ZstdLevel::Auto => {
                let auto = AutoLevel::new(Instant::now());
                (auto.setting(), Some(auto))
            }
            ZstdLevel::Fixed(l) if l <= 0 => (Setting::Stored, None),
            ZstdLevel::Fixed(l) => (Setting::Level(l.min(19)), None),
        };
        let encoder_level = match setting {
            Setting::Level(l) => l,
            Setting::Stored => 1,
        };
        let mut encoder = Encoder::new(encoder_level).map_err(|e| zstd_error("encoder", e))?;
        encoder
            .set_parameter(CParameter::WindowLog(WINDOW_LOG))
            .map_err(|e| zstd_error("encoder window", e))?;
        // A stored packet ends an open frame with `FRAME_END` alone, which
        // is the whole epilogue only without a checksum.
        encoder
            .set_parameter(CParameter::ChecksumFlag(false))
            .map_err(|e| zstd_error("encoder checksum", e))?;
        Ok(Self {
            encoder,
            frame_open: false,
            encoder_level,
            setting,
            auto,
            sampler: None,
            stats: settings.stats.clone(),
        })
    }

    /// A new key exchange: the next packet starts a new stream. The level
    /// and what `AutoLevel` has learnt are kept.
    pub fn reset(&mut self) -> Result<(), crate::Error> {
        self.encoder
            .reinit()
            .map_err(|e| zstd_error("encoder reset", e))?;
        self.frame_open = false;
        Ok(())
    }

    pub fn setting(&self) -> Setting {
        self.setting
    }

    /// Fixes the treatment of the next packets (and turns `auto` off), as a
    /// fuzzer or a test wants.
    pub fn set_setting(&mut self, setting: Setting) {
        self.auto = None;
        self.setting = setting;
    }

    /// Whether the next packet goes out stored (what `AutoLevel` chooses now,
    /// or the fixed setting). The packet writer then builds it in place
    /// (`begin_stored`, the message, `finish_stored`).
    pub fn next_is_stored(&mut self) -> bool {
        if let Some(auto) = &self.auto {
            self.setting = auto.setting();
        }
        self.setting == Setting::Stored
    }

    /// Appends the header of a stored packet to `output` (after ending an
    /// open frame); the SSH message is to follow it, then `finish_stored`.
    /// Nothing changes here until `finish_stored` succeeds, so a packet the
    /// caller drops leaves the stream as it was.
    pub fn begin_stored(&mut self, output: &mut Vec<u8>) -> StoredPacket {
        let started = Instant::now();
        let payload_start = output.len();
        if self.frame_open {
            output.extend_from_slice(&FRAME_END);
        }
        output.extend_from_slice(&STORED_MAGIC.to_le_bytes());
        let size_at = output.len();
        output.extend_from_slice(&[0; 4]);
        StoredPacket {
            started,
            payload_start,
            size_at,
        }
    }

    /// Completes the stored packet `begin_stored` started in `output`, the
    /// SSH message having been appended since. Returns the packet's payload
    /// length (0, and `output` cut back, if the message is empty).
    pub fn finish_stored(
        &mut self,
        output: &mut Vec<u8>,
        packet: StoredPacket,
    ) -> Result<usize, crate::Error> {
        let message_start = packet.size_at + 4;
        let message_len = output.len().saturating_sub(message_start);
        if message_len == 0 {
            output.truncate(packet.payload_start);
            return Ok(0);
        }
        let size = u32::try_from(message_len).map_err(|_| crate::Error::PacketSize(message_len))?;
        if let Some(field) = output.get_mut(packet.size_at..message_start) {
            field.copy_from_slice(&size.to_le_bytes());
        }
        if self.frame_open {
            // `FRAME_END` ended the frame on the wire; the encoder must
            // start the next one afresh.
            self.encoder
                .reinit()
                .map_err(|e| zstd_error("encoder reset", e))?;
            self.frame_open = false;
        }
        let wire = output.len() - packet.payload_start;
        self.after_packet(
            Setting::Stored,
            output.get(message_start..).unwrap_or_default(),
            wire,
            packet.started,
        )?;
        Ok(wire)
    }

    /// Appends the compressed form of `input` to `output`, which is first
    /// cut to `start_len`; returns the number of bytes appended.
    pub fn compress_into(
        &mut self,
        input: &[u8],
        output: &mut Vec<u8>,
        start_len: usize,
    ) -> Result<usize, crate::Error> {
        output.truncate(start_len);
        if self.next_is_stored() {
            output.reserve(FRAME_END.len() + STORED_HEADER_LEN + input.len());
            let packet = self.begin_stored(output);
            output.extend_from_slice(input);
            return self.finish_stored(output, packet);
        }
        let started = Instant::now();
        let setting = self.setting;
        if let Setting::Level(level) = setting {
            if level != self.encoder_level {
                // zstd applies a new level at the next frame only.
                self.end_frame(output)?;
                self.encoder
                    .set_parameter(CParameter::CompressionLevel(level))
                    .map_err(|e| zstd_error("level", e))?;
                self.encoder_level = level;
            }
            self.compress_flushed(input, output)?;
        }
        let wire = output.len() - start_len;
        self.after_packet(setting, input, wire, started)?;
        Ok(wire)
    }

    /// Counts one packet sent and lets `AutoLevel` see it (and sample it
    /// when a sample is due).
    fn after_packet(
        &mut self,
        setting: Setting,
        input: &[u8],
        wire: usize,
        started: Instant,
    ) -> Result<(), crate::Error> {
        if let Some(stats) = &self.stats {
            stats.sent(setting, input.len(), wire);
        }
        if let Some(auto) = &mut self.auto {
            let busy = started.elapsed();
            // The first SAMPLE_MAX bytes only: the whole packet (up to
            // 256 KiB every 32 MiB) cost the storing sender ~0.03 CPU s
            // per GiB, 4-5% of a loopback copy (zstd5).
            let part = input.get(..SAMPLE_MAX).unwrap_or(input);
            for setting in auto.samples_due(input.len()) {
                let Setting::Level(level) = *setting else {
                    continue;
                };
                let sampler = match &mut self.sampler {
                    Some(s) => s,
                    None => self.sampler.insert(
                        ::zstd::bulk::Compressor::new(level)
                            .map_err(|e| zstd_error("sampler", e))?,
                    ),
                };
                sampler
                    .set_compression_level(level)
                    .map_err(|e| zstd_error("sampler level", e))?;
                let t = Instant::now();
                let sample = sampler
                    .compress(part)
                    .map_err(|e| zstd_error("sample", e))?;
                auto.record_sample(*setting, part.len(), sample.len(), t.elapsed());
            }
            auto.observe(Instant::now(), input.len(), wire, busy);
        }
        Ok(())
    }

    /// Ends the open frame, if any: its epilogue goes in front of this
    /// packet's data, and the receiver's decoder then starts a new frame.
    fn end_frame(&mut self, output: &mut Vec<u8>) -> Result<(), crate::Error> {
        if !self.frame_open {
            return Ok(());
        }
        loop {
            output.reserve(64);
            let pos = output.len();
            let mut out = OutBuffer::around_pos(output, pos);
            let remaining = self
                .encoder
                .finish(&mut out, true)
                .map_err(|e| zstd_error("end of frame", e))?;
            if remaining == 0 {
                break;
            }
        }
        self.frame_open = false;
        Ok(())
    }

    fn compress_flushed(&mut self, input: &[u8], output: &mut Vec<u8>) -> Result<(), crate::Error> {
        let mut inb = InBuffer::around(input);
        // zstd's bound for one block plus the frame header and flush.
        output.reserve(input.len() + input.len() / 128 + 64);
        while inb.pos() < input.len() {
            if output.len() == output.capacity() {
                output.reserve(MAX_BLOCK);
            }
            let pos = output.len();
            let mut out = OutBuffer::around_pos(output, pos);
            self.encoder
                .run(&mut inb, &mut out)
                .map_err(|e| zstd_error("compress", e))?;
        }
        self.frame_open = true;
        loop {
            if output.len() == output.capacity() {
                output.reserve(MAX_BLOCK);
            }
            let pos = output.len();
            let mut out = OutBuffer::around_pos(output, pos);
            let remaining = self
                .encoder
                .flush(&mut out)
                .map_err(|e| zstd_error("flush", e))?;
            if remaining == 0 {
                return Ok(());
            }
        }
    }
}

/// A stored packet being built in place (`ZstdCompressor::begin_stored`).
#[derive(Debug)]
pub struct StoredPacket {
    started: Instant,
    /// Where the packet's payload (the compressed form) starts in the output.
    payload_start: usize,
    /// Where the 4-byte Frame_Size goes; the SSH message follows it.
    size_at: usize,
}

/// The receiving side of one direction.
pub struct ZstdDecompressor {
    decoder: Decoder<'static>,
    /// The last packet left a compressed frame open (it ended on a block
    /// boundary, not at the end of a frame).
    frame_open: bool,
    stats: Option<Arc<CompressionStats>>,
}

impl std::fmt::Debug for ZstdDecompressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZstdDecompressor").finish()
    }
}

impl ZstdDecompressor {
    pub fn new(settings: &ZstdSettings) -> Result<Self, crate::Error> {
        let mut decoder = Decoder::new().map_err(|e| zstd_error("decoder", e))?;
        decoder
            .set_parameter(DParameter::WindowLogMax(WINDOW_LOG))
            .map_err(|e| zstd_error("decoder window", e))?;
        Ok(Self {
            decoder,
            frame_open: false,
            stats: settings.stats.clone(),
        })
    }

    /// A new key exchange: the next packet starts a new stream.
    pub fn reset(&mut self) -> Result<(), crate::Error> {
        self.frame_open = false;
        self.decoder
            .reinit()
            .map_err(|e| zstd_error("decoder reset", e))
    }

    /// If `input` (one packet's payload) is a stored packet, where its SSH
    /// message starts in it: the caller takes the message as a slice of
    /// the packet, without a copy. `None` for a compressed packet, which
    /// goes to `decompress_to_vec`.
    ///
    /// A stored packet is `FRAME_END` (only while a compressed frame is
    /// open), then a skippable frame with `STORED_MAGIC` whose Frame_Size
    /// is exactly the rest of the packet, at least 1 byte (every SSH message
    /// has a type) and at most the packet limit. Inside an open frame, a
    /// compressed packet cannot begin with those 7 bytes from ferry's
    /// sender: after `FRAME_END` a new frame begins with zstd's frame magic.
    pub fn stored_offset(&mut self, input: &[u8]) -> Result<Option<usize>, crate::Error> {
        let at = if self.frame_open {
            if !input.starts_with(&FRAME_END) {
                return Ok(None);
            }
            FRAME_END.len()
        } else {
            0
        };
        let Some(header) = input.get(at..at + STORED_HEADER_LEN) else {
            return Ok(None);
        };
        let (magic, size) = header.split_at(4);
        if magic != STORED_MAGIC.to_le_bytes() {
            return Ok(None);
        }
        let size = size
            .try_into()
            .map(u32::from_le_bytes)
            .map_err(|_| crate::Error::Zstd("stored packet header".into()))?
            as usize;
        let message_start = at + STORED_HEADER_LEN;
        let message_len = input.len() - message_start;
        if size != message_len {
            return Err(crate::Error::Zstd(format!(
                "stored packet says {size} bytes and holds {message_len}"
            )));
        }
        if size == 0 {
            return Err(crate::Error::Zstd("packet decodes to nothing".into()));
        }
        if size > MAX_DECOMPRESSED {
            return Err(crate::Error::PacketSize(size));
        }
        if self.frame_open {
            // `FRAME_END` closed the frame: the decoder starts the next one
            // afresh, as it would after decoding those three bytes.
            self.decoder
                .reinit()
                .map_err(|e| zstd_error("decoder reset", e))?;
            self.frame_open = false;
        }
        if let Some(stats) = &self.stats {
            stats
                .received_wire
                .fetch_add(input.len() as u64, Ordering::Relaxed);
            stats
                .received_plain
                .fetch_add(size as u64, Ordering::Relaxed);
        }
        Ok(Some(message_start))
    }

    /// Decompresses one packet's payload. The output may not exceed
    /// `MAXIMUM_DECOMPRESSED_PACKET_LEN` (`Error::PacketSize` as soon as it
    /// would), and the packet must end on a block boundary, where the
    /// sender's flush leaves it (`Error::Zstd` otherwise).
    /// A stored packet comes back as a copy of its message (the transport
    /// slices it instead, see `stored_offset`).
    pub fn decompress_to_vec(&mut self, input: &[u8]) -> Result<Vec<u8>, crate::Error> {
        if let Some(start) = self.stored_offset(input)? {
            return Ok(input.get(start..).unwrap_or_default().to_vec());
        }
        self.decompress_limited(input, MAXIMUM_DECOMPRESSED_PACKET_LEN)
    }

    fn decompress_limited(&mut self, input: &[u8], limit: usize) -> Result<Vec<u8>, crate::Error> {
        // One more byte than the limit: filling it proves the packet too big.
        let cap = limit.saturating_add(1);
        // ferry: eight times the packet, so that a full packet of text
        // (4-5:1 at level 1) decodes without the buffer growing: growing
        // it copied ~244 KiB per 255 KiB packet.
        let mut output = Vec::with_capacity(input.len().saturating_mul(8).max(4096).min(cap));
        let mut inb = InBuffer::around(input);
        let hint = loop {
            if output.len() == output.capacity() {
                if output.len() >= cap {
                    return Err(crate::Error::PacketSize(output.len()));
                }
                let grow = output.len().min(cap - output.len());
                output.reserve_exact(grow.max(1));
            }
            let (pos, consumed) = (output.len(), inb.pos());
            let mut out = OutBuffer::around_pos(&mut output, pos);
            let hint = self
                .decoder
                .run(&mut inb, &mut out)
                .map_err(|e| zstd_error("malformed data", e))?;
            if inb.pos() == input.len() && output.len() < output.capacity() {
                break hint;
            }
            if inb.pos() == consumed && output.len() == pos {
                // Room on both sides and nothing moved: never loop on it.
                return Err(crate::Error::Zstd("decoder made no progress".into()));
            }
        };
        if output.len() > limit {
            return Err(crate::Error::PacketSize(output.len()));
        }
        // Every SSH payload has a message type: a packet that decodes to
        // nothing was cut short (at a block boundary, which the hint below
        // cannot tell from a flush).
        if output.is_empty() {
            return Err(crate::Error::Zstd("packet decodes to nothing".into()));
        }
        if hint != 0 && hint != BLOCK_HEADER_LEN {
            return Err(crate::Error::Zstd(format!(
                "packet ends inside a block ({hint} more bytes expected): truncated or malformed"
            )));
        }
        self.frame_open = hint != 0;
        if let Some(stats) = &self.stats {
            stats
                .received_wire
                .fetch_add(input.len() as u64, Ordering::Relaxed);
            stats
                .received_plain
                .fetch_add(output.len() as u64, Ordering::Relaxed);
        }
        Ok(output)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn settings(level: ZstdLevel) -> ZstdSettings {
        ZstdSettings {
            level,
            stats: Some(Arc::new(CompressionStats::new())),
            zlib_auto: false,
        }
    }

    fn text(len: usize, seed: u64) -> Vec<u8> {
        let words = [
            "ferry ", "copies ", "files ", "over ", "sftp ", "and ", "http ", "zstd ", "42 ",
            "window\n",
        ];
        let mut s = seed;
        let mut out = Vec::with_capacity(len + 8);
        while out.len() < len {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            out.extend_from_slice(words[(s % words.len() as u64) as usize].as_bytes());
        }
        out.truncate(len);
        out
    }

    fn random(len: usize, mut s: u64) -> Vec<u8> {
        (0..len)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 24) as u8
            })
            .collect()
    }

    fn pack(c: &mut ZstdCompressor, input: &[u8]) -> Vec<u8> {
        let mut out = b"hdr".to_vec();
        let n = c.compress_into(input, &mut out, 3).unwrap();
        assert_eq!(&out[..3], b"hdr");
        assert_eq!(out.len(), 3 + n);
        out.split_off(3)
    }

    #[test]
    fn packets_round_trip_each_decoded_alone_at_every_level() {
        for level in [
            ZstdLevel::Fixed(0),
            ZstdLevel::Fixed(1),
            ZstdLevel::Fixed(3),
            ZstdLevel::Auto,
        ] {
            let s = settings(level);
            let mut c = ZstdCompressor::new(&s).unwrap();
            let mut d = ZstdDecompressor::new(&s).unwrap();
            for (i, len) in [
                1usize, 5, 100, 4096, 65_536, 131_072, 131_073, 200_000, 261_000,
            ]
            .into_iter()
            .enumerate()
            {
                let payload = if i % 2 == 0 {
                    text(len, i as u64 + 1)
                } else {
                    random(len, i as u64 + 1)
                };
                // Flushed per packet: the receiver decodes each packet as it
                // comes, before the sender has sent the next one.
                let wire = pack(&mut c, &payload);
                assert_eq!(
                    d.decompress_to_vec(&wire).unwrap(),
                    payload,
                    "{level:?} {len}"
                );
            }
            let st = s.stats.unwrap();
            assert_eq!(
                st.sent_plain.load(Ordering::Relaxed),
                st.received_plain.load(Ordering::Relaxed)
            );
            assert_eq!(
                st.sent_wire.load(Ordering::Relaxed),
                st.received_wire.load(Ordering::Relaxed)
            );
        }
    }

    #[test]
    fn text_compresses_and_later_packets_refer_to_earlier_ones() {
        let s = settings(ZstdLevel::Fixed(1));
        let mut c = ZstdCompressor::new(&s).unwrap();
        let mut d = ZstdDecompressor::new(&s).unwrap();
        let payload = text(32 * 1024, 7);
        let first = pack(&mut c, &payload);
        let second = pack(&mut c, &payload);
        assert!(first.len() < payload.len() / 2, "{} bytes", first.len());
        // The same data again is a reference into the window.
        assert!(second.len() < 1000, "{} bytes", second.len());
        assert_eq!(d.decompress_to_vec(&first).unwrap(), payload);
        assert_eq!(d.decompress_to_vec(&second).unwrap(), payload);
    }

    #[test]
    fn level_changes_between_packets_need_no_notice() {
        let s = settings(ZstdLevel::Fixed(1));
        let mut c = ZstdCompressor::new(&s).unwrap();
        let mut d = ZstdDecompressor::new(&s).unwrap();
        for (i, setting) in [
            Setting::Level(1),
            Setting::Stored,
            Setting::Stored,
            Setting::Level(3),
            Setting::Level(1),
            Setting::Stored,
            Setting::Level(1),
        ]
        .into_iter()
        .enumerate()
        {
            c.set_setting(setting);
            let payload = text(50_000 + i, i as u64 + 3);
            let wire = pack(&mut c, &payload);
            assert_eq!(d.decompress_to_vec(&wire).unwrap(), payload, "{setting:?}");
        }
        assert_eq!(s.stats.unwrap().levels_used(), vec![0, 1, 3]);
    }

    #[test]
    fn stored_packet_is_a_skippable_frame_holding_the_message() {
        let s = settings(ZstdLevel::Fixed(0));
        let mut c = ZstdCompressor::new(&s).unwrap();
        let payload = random(200_000, 9);
        let wire = pack(&mut c, &payload);
        // 8 bytes in front, nothing behind: the message is sealed where it
        // was written and sliced where it is received.
        assert_eq!(wire.len(), payload.len() + STORED_HEADER_LEN);
        assert_eq!(&wire[..4], &STORED_MAGIC.to_le_bytes());
        assert_eq!(&wire[4..8], &(payload.len() as u32).to_le_bytes());
        assert_eq!(&wire[8..], &payload[..]);
        let mut d = ZstdDecompressor::new(&s).unwrap();
        assert_eq!(d.stored_offset(&wire).unwrap(), Some(STORED_HEADER_LEN));
    }

    #[test]
    fn mixed_stream_is_valid_zstd_and_stored_packets_are_sliced() {
        // Compressed, stored inside an open frame, stored, compressed,
        // stored: each decoded alone by ferry's receiver; the whole stream
        // is valid zstd, a stock decoder skipping the stored packets.
        let s = settings(ZstdLevel::Fixed(1));
        let mut c = ZstdCompressor::new(&s).unwrap();
        let mut d = ZstdDecompressor::new(&s).unwrap();
        let mut stream = Vec::new();
        let mut compressed_plain = Vec::new();
        for (i, setting) in [
            Setting::Level(1),
            Setting::Stored,
            Setting::Stored,
            Setting::Level(1),
            Setting::Level(3),
            Setting::Stored,
            Setting::Level(1),
        ]
        .into_iter()
        .enumerate()
        {
            c.set_setting(setting);
            let payload = text(70_000 + i, i as u64 + 21);
            let frame_was_open = d.frame_open;
            let wire = pack(&mut c, &payload);
            match setting {
                Setting::Stored => {
                    let at = d.stored_offset(&wire).unwrap().unwrap();
                    assert_eq!(at, STORED_HEADER_LEN + if frame_was_open { 3 } else { 0 });
                    assert_eq!(&wire[at..], &payload[..]);
                }
                Setting::Level(_) => {
                    assert_eq!(d.stored_offset(&wire).unwrap(), None);
                    assert_eq!(d.decompress_to_vec(&wire).unwrap(), payload);
                    compressed_plain.extend_from_slice(&payload);
                }
            }
            stream.extend_from_slice(&wire);
        }
        // Close the last frame so that a stock decoder sees a whole stream.
        stream.extend_from_slice(&FRAME_END);
        assert_eq!(
            ::zstd::stream::decode_all(&stream[..]).unwrap(),
            compressed_plain
        );
        let st = s.stats.unwrap();
        assert_eq!(
            st.sent_wire.load(Ordering::Relaxed),
            st.received_wire.load(Ordering::Relaxed)
        );
        assert_eq!(
            st.sent_plain.load(Ordering::Relaxed),
            st.received_plain.load(Ordering::Relaxed)
        );
    }

    #[test]
    fn stored_packet_built_in_place_matches_and_an_empty_one_changes_nothing() {
        let s = settings(ZstdLevel::Fixed(1));
        let mut c = ZstdCompressor::new(&s).unwrap();
        let mut d = ZstdDecompressor::new(&s).unwrap();
        let first = text(10_000, 1);
        assert_eq!(d.decompress_to_vec(&pack(&mut c, &first)).unwrap(), first);
        c.set_setting(Setting::Stored);
        assert!(c.next_is_stored());
        // A packet whose message turns out empty is dropped whole: the
        // frame stays open and the next compressed packet continues it.
        let mut out = b"hdr".to_vec();
        let p = c.begin_stored(&mut out);
        assert_eq!(c.finish_stored(&mut out, p).unwrap(), 0);
        assert_eq!(out, b"hdr");
        c.set_setting(Setting::Level(1));
        let second = text(10_000, 2);
        assert_eq!(d.decompress_to_vec(&pack(&mut c, &second)).unwrap(), second);
        // In place: header, then the message appended by the writer.
        c.set_setting(Setting::Stored);
        let mut out = b"hdr".to_vec();
        let p = c.begin_stored(&mut out);
        out.extend_from_slice(b"\x5emessage");
        let n = c.finish_stored(&mut out, p).unwrap();
        assert_eq!(out.len(), 3 + n);
        assert_eq!(d.decompress_to_vec(&out[3..]).unwrap(), b"\x5emessage");
    }

    #[test]
    fn malformed_stored_packets_are_refused() {
        let s = settings(ZstdLevel::Fixed(0));
        let mut c = ZstdCompressor::new(&s).unwrap();
        let wire = pack(&mut c, &random(5000, 3));
        // Cut short or padded: the size no longer matches.
        for bad in [&wire[..wire.len() - 1], &wire[..9]] {
            let mut d = ZstdDecompressor::new(&s).unwrap();
            assert!(matches!(d.stored_offset(bad), Err(crate::Error::Zstd(_))));
        }
        let mut longer = wire.clone();
        longer.push(0);
        let mut d = ZstdDecompressor::new(&s).unwrap();
        assert!(d.decompress_to_vec(&longer).is_err());
        // Empty, and larger than any packet may be.
        let mut empty = STORED_MAGIC.to_le_bytes().to_vec();
        empty.extend_from_slice(&[0; 4]);
        assert!(
            ZstdDecompressor::new(&s)
                .unwrap()
                .decompress_to_vec(&empty)
                .is_err()
        );
        let big = vec![7u8; MAX_DECOMPRESSED + 1];
        let mut huge = STORED_MAGIC.to_le_bytes().to_vec();
        huge.extend_from_slice(&(big.len() as u32).to_le_bytes());
        huge.extend_from_slice(&big);
        assert!(matches!(
            ZstdDecompressor::new(&s).unwrap().decompress_to_vec(&huge),
            Err(crate::Error::PacketSize(_))
        ));
        // Only a header: shorter than 8 bytes is not a stored packet and
        // goes to zstd, which refuses it.
        assert!(
            ZstdDecompressor::new(&s)
                .unwrap()
                .decompress_to_vec(&wire[..6])
                .is_err()
        );
    }

    #[test]
    fn compression_bomb_is_refused_without_a_big_allocation() {
        // 64 MiB of zeros in our own stream format (window 2^20, no
        // content size) are a few KiB: one packet's worth on the wire that
        // would inflate to far more than any packet may.
        let mut c = ZstdCompressor::new(&settings(ZstdLevel::Fixed(19))).unwrap();
        let bomb = pack(&mut c, &vec![0u8; 64 << 20]);
        assert!(bomb.len() < 256 * 1024, "{}", bomb.len());
        let mut d = ZstdDecompressor::new(&ZstdSettings::DEFAULT).unwrap();
        match d.decompress_to_vec(&bomb) {
            Err(crate::Error::PacketSize(n)) => assert_eq!(n, MAXIMUM_DECOMPRESSED_PACKET_LEN + 1),
            other => panic!("bomb not refused: {other:?}"),
        }
        // The same as one frame that declares its size: refused before
        // anything is decoded, the window it needs being too large.
        let declared = ::zstd::bulk::compress(&vec![0u8; 64 << 20], 19).unwrap();
        let mut d = ZstdDecompressor::new(&ZstdSettings::DEFAULT).unwrap();
        assert!(matches!(
            d.decompress_to_vec(&declared),
            Err(crate::Error::Zstd(_))
        ));
    }

    #[test]
    fn packet_at_the_limit_is_accepted_one_over_is_not() {
        let s = settings(ZstdLevel::Fixed(1));
        let mut c = ZstdCompressor::new(&s).unwrap();
        let mut d = ZstdDecompressor::new(&s).unwrap();
        let at = vec![b'a'; MAXIMUM_DECOMPRESSED_PACKET_LEN];
        assert_eq!(
            d.decompress_to_vec(&pack(&mut c, &at)).unwrap().len(),
            at.len()
        );
        let over = vec![b'a'; MAXIMUM_DECOMPRESSED_PACKET_LEN + 1];
        assert!(matches!(
            d.decompress_to_vec(&pack(&mut c, &over)),
            Err(crate::Error::PacketSize(_))
        ));
    }

    #[test]
    fn window_larger_than_ours_is_refused() {
        let mut enc = Encoder::new(1).unwrap();
        enc.set_parameter(CParameter::WindowLog(WINDOW_LOG + 2))
            .unwrap();
        let mut wire = Vec::with_capacity(1 << 16);
        let input = text(10_000, 1);
        let mut inb = InBuffer::around(&input);
        let mut out = OutBuffer::around(&mut wire);
        enc.run(&mut inb, &mut out).unwrap();
        while enc.flush(&mut out).unwrap() != 0 {}
        let mut d = ZstdDecompressor::new(&ZstdSettings::DEFAULT).unwrap();
        assert!(matches!(
            d.decompress_to_vec(&wire),
            Err(crate::Error::Zstd(_))
        ));
    }

    #[test]
    fn truncated_and_malformed_packets_are_refused() {
        let s = settings(ZstdLevel::Fixed(1));
        let payload = text(100_000, 5);
        let mut c = ZstdCompressor::new(&s).unwrap();
        let wire = pack(&mut c, &payload);
        for cut in [1, 3, 4, 5, 9, 20, wire.len() / 2, wire.len() - 1] {
            let mut d = ZstdDecompressor::new(&s).unwrap();
            let r = d.decompress_to_vec(&wire[..cut]);
            assert!(r.is_err(), "cut at {cut} of {} accepted", wire.len());
        }
        let stored = pack(
            &mut ZstdCompressor::new(&settings(ZstdLevel::Fixed(0))).unwrap(),
            &payload,
        );
        for cut in [5, 9, 12, 1000, stored.len() - 1] {
            let mut d = ZstdDecompressor::new(&s).unwrap();
            assert!(
                d.decompress_to_vec(&stored[..cut]).is_err(),
                "stored cut at {cut}"
            );
        }
        let mut d = ZstdDecompressor::new(&s).unwrap();
        assert!(d.decompress_to_vec(b"not zstd at all").is_err());
        let mut bad = wire.clone();
        bad[0] ^= 0xff;
        assert!(
            ZstdDecompressor::new(&s)
                .unwrap()
                .decompress_to_vec(&bad)
                .is_err()
        );
    }

    #[test]
    fn reset_at_rekey_starts_a_new_stream_on_both_ends() {
        let s = settings(ZstdLevel::Fixed(1));
        let mut c = ZstdCompressor::new(&s).unwrap();
        let mut d = ZstdDecompressor::new(&s).unwrap();
        let payload = text(40_000, 11);
        assert_eq!(
            d.decompress_to_vec(&pack(&mut c, &payload)).unwrap(),
            payload
        );
        c.reset().unwrap();
        d.reset().unwrap();
        let after = pack(&mut c, &payload);
        // A new stream: no reference back to the first packet.
        assert!(after.len() > 1000, "{}", after.len());
        assert_eq!(d.decompress_to_vec(&after).unwrap(), payload);

        // A decoder that was not reset is mid-frame and cannot take the
        // new stream's first packet: both ends must reset together.
        let mut c2 = ZstdCompressor::new(&s).unwrap();
        let mut d2 = ZstdDecompressor::new(&s).unwrap();
        assert_eq!(
            d2.decompress_to_vec(&pack(&mut c2, &payload)).unwrap(),
            payload
        );
        c2.reset().unwrap();
        assert!(d2.decompress_to_vec(&pack(&mut c2, &payload)).is_err());
    }
}
