use std::convert::TryFrom;

use delegate::delegate;
use ssh_encoding::Encode;

#[cfg(feature = "flate2")]
use crate::cipher::MAXIMUM_DECOMPRESSED_PACKET_LEN;

// ferry: zstd between ferry peers (compression/ferry_zstd.rs).
#[cfg(feature = "zstd")]
mod ferry_zstd;
#[cfg(feature = "zstd")]
pub use ferry_zstd::{
    CompressionStats, MAX_DECOMPRESSED, Setting, StoredPacket, WINDOW_LOG, ZstdCompressor,
    ZstdDecompressor, ZstdLevel, ZstdSettings,
};
// ferry: what `auto` sends each packet as (compression/ferry_auto.rs).
#[cfg(feature = "zstd")]
mod ferry_auto;
#[cfg(feature = "zstd")]
pub use ferry_auto::{AutoLevel, AutoRules, ZSTD_RULES};
// ferry: zlib as ferry sends it: counted, and stored or compressed as
// `AutoLevel` decides (compression/ferry_zlib.rs).
#[cfg(feature = "zstd")]
mod ferry_zlib;
#[cfg(feature = "zstd")]
pub use ferry_zlib::{ZLIB_HEADER, ZLIB_RULES, ZlibCompressor, ZlibDecompressor};

#[derive(Debug, Clone)]
pub enum Compression {
    None,
    #[cfg(feature = "flate2")]
    Zlib,
    #[cfg(feature = "flate2")]
    ZlibOpenSSH,
    /// ferry: `zstd@ferry.invalid`, with the level and counters ferry chose.
    #[cfg(feature = "zstd")]
    Zstd(ZstdSettings),
    /// ferry: `zlib@openssh.com` (`openssh`) or `zlib`, sent and received by
    /// ferry's zlib (compression/ferry_zlib.rs) with `settings`' counters
    /// and `zlib_auto`.
    #[cfg(feature = "zstd")]
    FerryZlib {
        openssh: bool,
        settings: ZstdSettings,
    },
}

#[derive(Debug)]
pub enum Compress {
    None,
    #[cfg(feature = "flate2")]
    Zlib(flate2::Compress),
    /// ferry: boxed, the zstd contexts being large.
    #[cfg(feature = "zstd")]
    Zstd(Box<ZstdCompressor>),
    #[cfg(feature = "zstd")]
    FerryZlib(Box<ZlibCompressor>),
}

#[derive(Debug)]
pub enum Decompress {
    None,
    #[cfg(feature = "flate2")]
    Zlib(flate2::Decompress),
    #[cfg(feature = "zstd")]
    Zstd(Box<ZstdDecompressor>),
    #[cfg(feature = "zstd")]
    FerryZlib(Box<ZlibDecompressor>),
}

#[derive(Debug, PartialEq, Eq, Copy, Clone, Hash)]
pub struct Name(&'static str);
impl AsRef<str> for Name {
    fn as_ref(&self) -> &str {
        self.0
    }
}

impl Encode for Name {
    delegate! { to self.as_ref() {
        fn encoded_len(&self) -> Result<usize, ssh_encoding::Error>;
        fn encode(&self, writer: &mut impl ssh_encoding::Writer) -> Result<(), ssh_encoding::Error>;
    }}
}

impl TryFrom<&str> for Name {
    type Error = ();
    fn try_from(s: &str) -> Result<Name, ()> {
        ALL_COMPRESSION_ALGORITHMS
            .iter()
            .find(|x| x.0 == s)
            .map(|x| **x)
            .ok_or(())
    }
}

pub const NONE: Name = Name("none");
#[cfg(feature = "flate2")]
pub const ZLIB: Name = Name("zlib");
#[cfg(feature = "flate2")]
pub const ZLIB_LEGACY: Name = Name("zlib@openssh.com");
/// ferry: zstd, offered only by ferry cp and ferry serve. RFC 4251 section 6
/// wants the part after the `@` to be a domain the definer controls; ferry
/// has none, and `.invalid` (RFC 2606) is one nobody can ever register, so
/// the name cannot clash with anyone else's definition
/// (docs/internals/compression.md).
#[cfg(feature = "zstd")]
pub const ZSTD: Name = Name("zstd@ferry.invalid");

pub const ALL_COMPRESSION_ALGORITHMS: &[&Name] = &[
    &NONE,
    #[cfg(feature = "flate2")]
    &ZLIB,
    #[cfg(feature = "flate2")]
    &ZLIB_LEGACY,
    #[cfg(feature = "zstd")]
    &ZSTD,
];

#[cfg(feature = "flate2")]
impl Compression {
    pub fn new(name: &Name) -> Self {
        if name == &ZLIB {
            Compression::Zlib
        } else if name == &ZLIB_LEGACY {
            Compression::ZlibOpenSSH
        } else {
            Compression::None
        }
    }

    /// ferry: `new`, with the settings of `Preferred::zstd`; zlib is
    /// ferry's (counted, and under `zlib_auto` stored when it does not pay).
    #[cfg(feature = "zstd")]
    pub fn new_with_zstd(name: &Name, zstd: &ZstdSettings) -> Self {
        if name == &ZSTD {
            Compression::Zstd(zstd.clone())
        } else if name == &ZLIB || name == &ZLIB_LEGACY {
            Compression::FerryZlib {
                openssh: name == &ZLIB_LEGACY,
                settings: zstd.clone(),
            }
        } else {
            Self::new(name)
        }
    }

    pub fn init_compress(&self, comp: &mut Compress) {
        match *self {
            // ferry: a new stream at each key exchange, one context for the
            // life of the connection.
            #[cfg(feature = "zstd")]
            Compression::Zstd(ref settings) => {
                let fresh = match comp {
                    Compress::Zstd(c) => c.reset().is_ok(),
                    _ => false,
                };
                if !fresh {
                    *comp = match ZstdCompressor::new(settings) {
                        Ok(c) => Compress::Zstd(Box::new(c)),
                        Err(e) => {
                            // Only an allocation failure gets here; the
                            // peer then fails to decode and disconnects.
                            log::error!("zstd compressor: {e}");
                            Compress::None
                        }
                    };
                }
            }
            // ferry: a new zlib stream at each key exchange, the controller
            // kept.
            #[cfg(feature = "zstd")]
            Compression::FerryZlib { ref settings, .. } => {
                if let Compress::FerryZlib(ref mut c) = *comp {
                    c.reset()
                } else {
                    *comp = Compress::FerryZlib(Box::new(ZlibCompressor::new(settings)))
                }
            }
            Compression::Zlib | Compression::ZlibOpenSSH => {
                if let Compress::Zlib(ref mut c) = *comp {
                    c.reset()
                } else {
                    *comp = Compress::Zlib(flate2::Compress::new(flate2::Compression::fast(), true))
                }
            }
            Compression::None => {
                *comp = Compress::None;
            }
        }
    }

    pub fn init_decompress(&self, comp: &mut Decompress) {
        match *self {
            #[cfg(feature = "zstd")]
            Compression::Zstd(ref settings) => {
                let fresh = match comp {
                    Decompress::Zstd(d) => d.reset().is_ok(),
                    _ => false,
                };
                if !fresh {
                    *comp = match ZstdDecompressor::new(settings) {
                        Ok(d) => Decompress::Zstd(Box::new(d)),
                        Err(e) => {
                            log::error!("zstd decompressor: {e}");
                            Decompress::None
                        }
                    };
                }
            }
            #[cfg(feature = "zstd")]
            Compression::FerryZlib { ref settings, .. } => {
                if let Decompress::FerryZlib(ref mut d) = *comp {
                    d.reset()
                } else {
                    *comp = Decompress::FerryZlib(Box::new(ZlibDecompressor::new(settings)))
                }
            }
            Compression::Zlib | Compression::ZlibOpenSSH => {
                if let Decompress::Zlib(ref mut c) = *comp {
                    c.reset(true)
                } else {
                    *comp = Decompress::Zlib(flate2::Decompress::new(true))
                }
            }
            Compression::None => {
                *comp = Decompress::None;
            }
        }
    }
}

impl Compression {
    /// Returns true if compression should be deferred until after authentication.
    /// "zlib@openssh.com" defers; RFC 4253 "zlib" does not.
    pub fn is_deferred(&self) -> bool {
        match self {
            #[cfg(feature = "flate2")]
            Compression::ZlibOpenSSH => true,
            // ferry: like zlib@openssh.com, so that an unauthenticated peer
            // cannot make us decompress anything.
            #[cfg(feature = "zstd")]
            Compression::Zstd(_) => true,
            #[cfg(feature = "zstd")]
            Compression::FerryZlib { openssh, .. } => *openssh,
            _ => false,
        }
    }
}

#[cfg(not(feature = "flate2"))]
impl Compression {
    pub fn new(_name: &Name) -> Self {
        Compression::None
    }

    pub fn init_compress(&self, _: &mut Compress) {}

    pub fn init_decompress(&self, _: &mut Decompress) {}
}

#[cfg(not(feature = "flate2"))]
impl Compress {
    pub fn compress<'a>(
        &mut self,
        input: &'a [u8],
        _: &'a mut Vec<u8>,
    ) -> Result<&'a [u8], crate::Error> {
        Ok(input)
    }

    pub fn compress_into(
        &mut self,
        input: &[u8],
        output: &mut Vec<u8>,
        start_len: usize,
    ) -> Result<usize, crate::Error> {
        output.truncate(start_len);
        output.extend_from_slice(input);
        Ok(input.len())
    }
}

#[cfg(not(feature = "flate2"))]
impl Decompress {
    pub(crate) fn stored_offset(&mut self, _: &[u8]) -> Result<Option<usize>, crate::Error> {
        Ok(None)
    }

    pub(crate) fn decompress_to_bytes(
        &mut self,
        input: &[u8],
    ) -> Result<bytes::Bytes, crate::Error> {
        Ok(bytes::Bytes::copy_from_slice(input))
    }

    pub fn decompress<'a>(
        &mut self,
        input: &'a [u8],
        _: &'a mut Vec<u8>,
    ) -> Result<&'a [u8], crate::Error> {
        Ok(input)
    }
}

#[cfg(all(test, feature = "flate2"))]
mod tests {
    use std::io::Write;

    use flate2::write::ZlibEncoder;

    use super::*;

    #[test]
    fn decompressed_packet_at_limit_is_accepted() {
        let payload = vec![b'A'; MAXIMUM_DECOMPRESSED_PACKET_LEN];
        let mut encoder = ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        encoder.write_all(&payload).unwrap();
        let compressed = encoder.finish().unwrap();

        let mut decompressor = Decompress::Zlib(flate2::Decompress::new(true));
        let mut output = Vec::new();

        let decompressed = decompressor.decompress(&compressed, &mut output).unwrap();
        assert_eq!(decompressed.len(), MAXIMUM_DECOMPRESSED_PACKET_LEN);
    }

    #[test]
    fn oversized_decompressed_packet_is_rejected() {
        let payload = vec![b'A'; MAXIMUM_DECOMPRESSED_PACKET_LEN + 1024];
        let mut encoder = ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        encoder.write_all(&payload).unwrap();
        let compressed = encoder.finish().unwrap();

        let mut decompressor = Decompress::Zlib(flate2::Decompress::new(true));
        let mut output = Vec::new();

        let err = decompressor
            .decompress(&compressed, &mut output)
            .unwrap_err();
        assert!(
            matches!(err, crate::Error::PacketSize(len) if len > MAXIMUM_DECOMPRESSED_PACKET_LEN)
        );
    }

    #[test]
    fn empty_compressed_packet_does_not_spin() {
        let compressed = Vec::new();
        let mut decompressor = Decompress::Zlib(flate2::Decompress::new(true));
        let mut output = Vec::new();

        let decompressed = decompressor.decompress(&compressed, &mut output).unwrap();
        assert!(decompressed.is_empty());
    }

    #[test]
    fn incompressible_packets_round_trip() {
        // Incompressible input makes deflate output land on or past the
        // `input.len() + 10` reservation, so the compress loops must keep
        // going when the buffer comes back exactly full, on both `compress`
        // and `compress_into`.
        let mut comp = Compress::None;
        let mut decomp = Decompress::None;
        Compression::Zlib.init_compress(&mut comp);
        Compression::Zlib.init_decompress(&mut decomp);

        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        for &len in &[1usize, 100, 4096, 32768, 65536, 200_000, 262_144] {
            let payload: Vec<u8> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    (seed >> 24) as u8
                })
                .collect();

            let mut cbuf = Vec::new();
            let compressed = comp.compress(&payload, &mut cbuf).unwrap().to_vec();
            let mut dbuf = Vec::new();
            let out = decomp.decompress(&compressed, &mut dbuf).unwrap();
            assert_eq!(out, payload.as_slice(), "compress: {len} bytes");

            let prefix = b"hdr".len();
            let mut cbuf = b"hdr".to_vec();
            let n = comp.compress_into(&payload, &mut cbuf, prefix).unwrap();
            assert_eq!(&cbuf[..prefix], b"hdr");
            assert_eq!(cbuf.len(), prefix + n);
            let mut dbuf = Vec::new();
            let out = decomp.decompress(&cbuf[prefix..], &mut dbuf).unwrap();
            assert_eq!(out, payload.as_slice(), "compress_into: {len} bytes");
        }
    }

    #[test]
    fn partial_flush_packets_round_trip() {
        // Real SSH packets are partial flushes on one continuous stream, not
        // a finished stream, and routinely decompress to more than twice
        // their compressed size.
        let mut comp = Compress::None;
        let mut decomp = Decompress::None;
        Compression::Zlib.init_compress(&mut comp);
        Compression::Zlib.init_decompress(&mut decomp);

        for len in 1..=4096usize {
            let payload: Vec<u8> = (0..len).map(|i| b"abcdefgh"[i % 8]).collect();
            let mut cbuf = Vec::new();
            let compressed = comp.compress(&payload, &mut cbuf).unwrap().to_vec();
            let mut dbuf = Vec::new();
            let out = decomp.decompress(&compressed, &mut dbuf).unwrap();
            assert_eq!(
                out,
                payload.as_slice(),
                "payload of {len} bytes came back wrong"
            );
        }
    }
}

#[cfg(feature = "flate2")]
impl Compress {
    fn zlib_output_reserve_bound(input_len: usize) -> usize {
        input_len.saturating_add(10)
    }

    pub fn compress<'a>(
        &mut self,
        input: &'a [u8],
        output: &'a mut Vec<u8>,
    ) -> Result<&'a [u8], crate::Error> {
        if let Compress::None = *self {
            return Ok(input);
        }
        let n_out_ = self.compress_into(input, output, 0)?;
        #[allow(clippy::indexing_slicing)] // length checked
        Ok(&output[..n_out_])
    }

    pub fn compress_into(
        &mut self,
        input: &[u8],
        output: &mut Vec<u8>,
        start_len: usize,
    ) -> Result<usize, crate::Error> {
        match *self {
            Compress::None => {
                output.truncate(start_len);
                output.extend_from_slice(input);
                Ok(input.len())
            }
            #[cfg(feature = "zstd")]
            Compress::Zstd(ref mut z) => z.compress_into(input, output, start_len),
            #[cfg(feature = "zstd")]
            Compress::FerryZlib(ref mut z) => z.compress_into(input, output, start_len),
            Compress::Zlib(ref mut z) => {
                output.truncate(start_len);
                let n_in = z.total_in() as usize;
                let n_out = z.total_out() as usize;
                let reserve = Self::zlib_output_reserve_bound(input.len());
                output.resize(start_len + reserve, 0);
                let flush = flate2::FlushCompress::Partial;
                loop {
                    let n_in_ = z.total_in() as usize - n_in;
                    let n_out_ = z.total_out() as usize - n_out;
                    #[allow(clippy::indexing_slicing)] // length checked
                    let c =
                        z.compress(&input[n_in_..], &mut output[start_len + n_out_..], flush)?;
                    // See `compress`: full buffer on `Ok` means more pending.
                    let output_full = start_len + (z.total_out() as usize - n_out) == output.len();
                    match c {
                        flate2::Status::BufError => {
                            let growth = output.len().saturating_sub(start_len).max(1);
                            output.resize(output.len() + growth, 0);
                        }
                        _ if output_full => {
                            let growth = output.len().saturating_sub(start_len).max(1);
                            output.resize(output.len() + growth, 0);
                        }
                        _ => break,
                    }
                }
                let n_out_ = z.total_out() as usize - n_out;
                output.truncate(start_len + n_out_);
                Ok(n_out_)
            }
        }
    }
}

#[cfg(feature = "flate2")]
impl Decompress {
    /// ferry: if this packet is a zstd stored packet, where its message
    /// starts in it (the caller slices it out without a copy).
    pub(crate) fn stored_offset(&mut self, input: &[u8]) -> Result<Option<usize>, crate::Error> {
        #[cfg(feature = "zstd")]
        if let Decompress::Zstd(z) = self {
            return z.stored_offset(input);
        }
        #[cfg(not(feature = "zstd"))]
        let _ = input;
        Ok(None)
    }

    /// ferry: one packet's payload decompressed into `Bytes`; zstd's output
    /// buffer becomes the `Bytes` without another copy.
    pub(crate) fn decompress_to_bytes(
        &mut self,
        input: &[u8],
    ) -> Result<bytes::Bytes, crate::Error> {
        #[cfg(feature = "zstd")]
        if let Decompress::Zstd(z) = self {
            return Ok(bytes::Bytes::from(z.decompress_to_vec(input)?));
        }
        let mut output = Vec::new();
        Ok(bytes::Bytes::copy_from_slice(
            self.decompress(input, &mut output)?,
        ))
    }

    pub fn decompress<'a>(
        &mut self,
        input: &'a [u8],
        output: &'a mut Vec<u8>,
    ) -> Result<&'a [u8], crate::Error> {
        match *self {
            Decompress::None => Ok(input),
            #[cfg(feature = "zstd")]
            Decompress::Zstd(ref mut z) => {
                *output = z.decompress_to_vec(input)?;
                Ok(output.as_slice())
            }
            #[cfg(feature = "zstd")]
            Decompress::FerryZlib(ref mut z) => {
                let n = z.decompress_into(input, output)?;
                #[allow(clippy::indexing_slicing)] // length checked
                Ok(&output[..n])
            }
            Decompress::Zlib(ref mut z) => {
                // ferry: the loop is `zlib_decompress_into`, shared with
                // ferry's counted zlib.
                let n = zlib_decompress_into(z, input, output)?;
                #[allow(clippy::indexing_slicing)] // length checked
                Ok(&output[..n])
            }
        }
    }
}

/// ferry: inflates one packet's payload into `output` (its first bytes
/// after the call), at most `MAXIMUM_DECOMPRESSED_PACKET_LEN`; returns the
/// length. Was the body of `Decompress::decompress`'s zlib arm.
#[cfg(feature = "flate2")]
pub(crate) fn zlib_decompress_into(
    z: &mut flate2::Decompress,
    input: &[u8],
    output: &mut Vec<u8>,
) -> Result<usize, crate::Error> {
    output.clear();
    let n_in = z.total_in() as usize;
    let n_out = z.total_out() as usize;
    let max_output_len = MAXIMUM_DECOMPRESSED_PACKET_LEN
        .checked_add(1)
        .ok_or(crate::Error::PacketSize(usize::MAX))?;
    output.resize(input.len().clamp(1, max_output_len), 0);
    let flush = flate2::FlushDecompress::None;
    loop {
        let n_in_ = z.total_in() as usize - n_in;
        let n_out_ = z.total_out() as usize - n_out;
        #[allow(clippy::indexing_slicing)] // length checked
        let d = z.decompress(&input[n_in_..], &mut output[n_out_..], flush);
        match d? {
            flate2::Status::Ok | flate2::Status::BufError => {
                let made_progress = z.total_in() as usize - n_in != n_in_
                    || z.total_out() as usize - n_out != n_out_;
                let output_full = z.total_out() as usize - n_out == output.len();

                // Keep going while calls still produce output: the
                // inflater can return `BufError` with all input
                // consumed and decoded bytes still buffered inside
                // it (miniz_oxide >= 0.9 does exactly that). Only
                // a call that moves nothing means we're done.
                if !output_full && !made_progress {
                    break;
                }

                if output_full {
                    if output.len() == max_output_len {
                        break;
                    }
                    let next_len = output
                        .len()
                        .checked_mul(2)
                        .map(|len| len.min(max_output_len))
                        .ok_or(crate::Error::PacketSize(usize::MAX))?;
                    output.resize(next_len, 0);
                }
            }
            _ => break,
        }
    }
    let n_out_ = z.total_out() as usize - n_out;
    if n_out_ > MAXIMUM_DECOMPRESSED_PACKET_LEN {
        return Err(crate::Error::PacketSize(n_out_));
    }
    Ok(n_out_)
}
