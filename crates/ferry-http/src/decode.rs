//! Content decoding for `--compressed` (zstd, gzip): the body arrives in
//! pieces and is decoded piece by piece, and what one piece decodes to is
//! handed out in slices of at most [`MAX_PIECE`] bytes, so a hostile
//! server's compression bomb never becomes a big buffer. zstd reaches
//! about 32,000:1 (1 GiB of zeros is 33,679 bytes at level 3), so a 16 KiB
//! network chunk can stand for ~512 MiB; decoded whole (the old
//! [`Decoder::feed`]) that was one allocation of that size.
//!
//! ```
//! use ferry_http::decode::{Decoder, MAX_PIECE};
//! let body = zstd::encode_all(&vec![0u8; 8 << 20][..], 3).unwrap();
//! let mut d = Decoder::for_encoding(Some("zstd")).unwrap();
//! let mut total = 0;
//! for chunk in body.chunks(16 * 1024) {
//!     let mut pieces = d.pieces(chunk);
//!     while let Some(plain) = pieces.next_piece().unwrap() {
//!         assert!(plain.len() <= MAX_PIECE);
//!         total += plain.len(); // write it out here
//!     }
//! }
//! total += d.finish().unwrap().len();
//! assert_eq!(total, 8 << 20);
//! ```
use std::io::{self, Write};

/// The most decoded bytes a [`Pieces`] step hands out (and the decoder
/// holds) at once. 256 KiB: two zstd blocks, large enough that the
/// per-piece work is noise next to decompression and writing, small
/// enough that a few hundred parallel downloads stay in tens of MiB.
pub const MAX_PIECE: usize = 256 * 1024;

/// gzip output is collected until this much is held, then handed out:
/// one `write` of flate2's decoder adds at most a few of its 32 KiB
/// buffers (see [`Pieces::next_piece`]), so the piece stays under
/// [`MAX_PIECE`].
const GZIP_YIELD_AT: usize = MAX_PIECE / 2;

/// zstd windows above 2^23 bytes (8 MiB) are refused: RFC 9659 makes that
/// the limit for the `zstd` content coding in HTTP (encoders must not
/// need more), and without it a frame header can ask the decoder for a
/// 128 MiB window (zstd's default limit, 2^27).
pub const ZSTD_WINDOW_LOG_MAX: u32 = 23;

enum Kind {
    Identity,
    Zstd {
        dec: Box<zstd::stream::raw::Decoder<'static>>,
        /// Where decoded bytes go; `MAX_PIECE` long once allocated.
        out: Vec<u8>,
        /// The last step filled `out`: zstd may hold more output even
        /// with no input left.
        maybe_more: bool,
        /// Inside a frame (zstd's hint was not 0): the body must not end
        /// here.
        mid_frame: bool,
    },
    /// flate2's write-side decoder into a Vec that is emptied at every
    /// step: it keeps the gzip header and trailer (CRC, size) checks of
    /// the decoder this replaced.
    Gzip(Box<flate2::write::GzDecoder<Vec<u8>>>),
}

/// Decodes one response body of a given Content-Encoding.
pub struct Decoder {
    kind: Kind,
}

impl Decoder {
    /// The decoder for a Content-Encoding value; `Err` for one we did not
    /// ask for.
    pub fn for_encoding(enc: Option<&str>) -> Result<Decoder, String> {
        let kind = match enc.map(|e| e.trim().to_ascii_lowercase()).as_deref() {
            None | Some("") | Some("identity") => Kind::Identity,
            Some("zstd") => {
                let mut dec =
                    zstd::stream::raw::Decoder::new().map_err(|e| format!("zstd: {e}"))?;
                dec.set_parameter(zstd::stream::raw::DParameter::WindowLogMax(
                    ZSTD_WINDOW_LOG_MAX,
                ))
                .map_err(|e| format!("zstd: {e}"))?;
                Kind::Zstd {
                    dec: Box::new(dec),
                    out: Vec::new(),
                    maybe_more: false,
                    mid_frame: false,
                }
            }
            Some("gzip") | Some("x-gzip") => {
                Kind::Gzip(Box::new(flate2::write::GzDecoder::new(Vec::new())))
            }
            Some(other) => return Err(format!("unsupported Content-Encoding {other:?}")),
        };
        Ok(Decoder { kind })
    }

    pub fn is_identity(&self) -> bool {
        matches!(self.kind, Kind::Identity)
    }

    /// Decodes `data` (the next bytes of the body) step by step: each
    /// [`Pieces::next_piece`] hands out at most [`MAX_PIECE`] decoded
    /// bytes, so what is held at once stays bounded whatever the ratio.
    pub fn pieces<'d, 'a>(&'d mut self, data: &'a [u8]) -> Pieces<'d, 'a> {
        Pieces {
            dec: self,
            input: data,
        }
    }

    /// Feed compressed bytes; returns everything they decode to, in one
    /// buffer. Unbounded: a compression bomb becomes one allocation of
    /// its full size. Kept for callers not yet moved to
    /// [`Decoder::pieces`], which it wraps.
    pub fn feed(&mut self, data: &[u8]) -> io::Result<Vec<u8>> {
        let mut all = Vec::new();
        let mut pieces = self.pieces(data);
        while let Some(p) = pieces.next_piece()? {
            all.extend_from_slice(p);
        }
        Ok(all)
    }

    /// End of body: the last decoded bytes (at most [`MAX_PIECE`]); fails
    /// on a truncated stream.
    pub fn finish(self) -> io::Result<Vec<u8>> {
        match self.kind {
            Kind::Identity => Ok(Vec::new()),
            Kind::Zstd {
                mut dec,
                mut out,
                maybe_more,
                mid_frame,
            } => {
                // Everything was handed out by the pieces, except when the
                // body's last step filled the buffer: one more step.
                let mut rest = Vec::new();
                let mut mid_frame = mid_frame;
                if maybe_more {
                    out.resize(MAX_PIECE, 0);
                    let st =
                        zstd::stream::raw::Operation::run_on_buffers(&mut *dec, &[], &mut out)?;
                    if st.bytes_written > 0 {
                        mid_frame = st.remaining != 0;
                    }
                    if st.bytes_written == out.len() {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            "zstd: more output after the last piece (read the body with pieces)",
                        ));
                    }
                    rest.extend_from_slice(out.get(..st.bytes_written).unwrap_or_default());
                }
                if mid_frame {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "zstd: the body ends inside a frame (truncated)",
                    ));
                }
                Ok(rest)
            }
            Kind::Gzip(d) => d.finish(),
        }
    }
}

/// The decoding of one piece of body, handed out in bounded steps
/// ([`Decoder::pieces`]).
pub struct Pieces<'d, 'a> {
    dec: &'d mut Decoder,
    input: &'a [u8],
}

impl<'a> Pieces<'_, 'a> {
    /// The input not consumed yet: a caller that stops between pieces
    /// keeps it for the next [`Decoder::pieces`].
    pub fn rest(&self) -> &'a [u8] {
        self.input
    }

    /// The next at most [`MAX_PIECE`] decoded bytes, or `None` once all
    /// the input is decoded and handed out. Use each slice (write it)
    /// before asking for the next: the decoder reuses its buffer.
    pub fn next_piece(&mut self) -> io::Result<Option<&[u8]>> {
        match &mut self.dec.kind {
            Kind::Identity => {
                let n = self.input.len().min(MAX_PIECE);
                let (piece, rest) = self.input.split_at(n);
                self.input = rest;
                Ok((!piece.is_empty()).then_some(piece))
            }
            Kind::Zstd {
                dec,
                out,
                maybe_more,
                mid_frame,
            } => {
                if self.input.is_empty() && !*maybe_more {
                    return Ok(None);
                }
                if out.len() != MAX_PIECE {
                    out.resize(MAX_PIECE, 0);
                }
                let mut filled = 0;
                // zstd stops at the end of its output or of its input;
                // the output not full means it flushed all it could.
                loop {
                    let st = zstd::stream::raw::Operation::run_on_buffers(
                        &mut **dec,
                        self.input,
                        out.get_mut(filled..).unwrap_or_default(),
                    )
                    .map_err(zstd_error)?;
                    self.input = self.input.get(st.bytes_read..).unwrap_or_default();
                    filled += st.bytes_written;
                    // A step that moved nothing answers with the size of
                    // the next frame's header: it says nothing of this one.
                    if st.bytes_read > 0 || st.bytes_written > 0 {
                        *mid_frame = st.remaining != 0;
                    }
                    *maybe_more = filled == out.len();
                    if *maybe_more || self.input.is_empty() {
                        break;
                    }
                    if st.bytes_read == 0 && st.bytes_written == 0 {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            "zstd: the decoder stopped making progress",
                        ));
                    }
                }
                Ok((filled > 0).then(|| out.get(..filled).unwrap_or_default()))
            }
            Kind::Gzip(d) => {
                d.get_mut().clear();
                // flate2's `write` consumes what fits its 32 KiB output
                // buffer (moving the previous one into our Vec first), so
                // each call adds a bounded amount; stop well before the
                // bound. `write_all` would decode the whole input at once.
                while !self.input.is_empty() && d.get_ref().len() < GZIP_YIELD_AT {
                    let n = d.write(self.input)?;
                    if n == 0 {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            "gzip: data after the end of the stream",
                        ));
                    }
                    self.input = self.input.get(n..).unwrap_or_default();
                }
                let held = d.get_ref();
                Ok((!held.is_empty()).then_some(held.as_slice()))
            }
        }
    }
}

/// zstd's errors, with what a user can do about the one a legitimate
/// server may cause.
fn zstd_error(e: io::Error) -> io::Error {
    let text = e.to_string();
    if text.contains("too much memory") || text.contains("Frame requires") {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "zstd: {text} (the frame's window is larger than the 8 MiB HTTP allows, RFC 9659); rerun without --compressed"
            ),
        )
    } else {
        e
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn gzip(data: &[u8], level: u32) -> Vec<u8> {
        let mut g = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(level));
        g.write_all(data).unwrap();
        g.finish().unwrap()
    }

    /// Every piece of `packed` fed as `chunk`-byte network pieces: the
    /// decoded bytes and the largest piece handed out.
    fn decode_in_pieces(enc: &str, packed: &[u8], chunk: usize) -> io::Result<(Vec<u8>, usize)> {
        let mut d = Decoder::for_encoding(Some(enc)).unwrap();
        let mut out = Vec::new();
        let mut largest = 0;
        for c in packed.chunks(chunk) {
            let mut pieces = d.pieces(c);
            while let Some(p) = pieces.next_piece()? {
                largest = largest.max(p.len());
                out.extend_from_slice(p);
            }
        }
        let rest = d.finish()?;
        largest = largest.max(rest.len());
        out.extend(rest);
        Ok((out, largest))
    }

    #[test]
    fn zstd_and_gzip_in_pieces() {
        let data: Vec<u8> = (0..200_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        let z = zstd::encode_all(&data[..], 3).unwrap();
        let g = gzip(&data, 6);
        for (enc, packed) in [("zstd", z), ("gzip", g), ("identity", data.clone())] {
            let mut d = Decoder::for_encoding(Some(enc)).unwrap();
            let mut out = Vec::new();
            for piece in packed.chunks(1000) {
                out.extend(d.feed(piece).unwrap());
            }
            out.extend(d.finish().unwrap());
            assert_eq!(out, data, "{enc}");
            for chunk in [1, 7, 16 * 1024, packed.len()] {
                let (out, largest) = decode_in_pieces(enc, &packed, chunk).unwrap();
                assert_eq!(out, data, "{enc} in {chunk}-byte chunks");
                assert!(largest <= MAX_PIECE, "{enc}: {largest}");
            }
        }
        assert!(Decoder::for_encoding(Some("br")).is_err());
    }

    /// A server's 16 KiB of zstd standing for 512 MiB: each step holds at
    /// most MAX_PIECE, and the whole still comes out (#24).
    #[test]
    fn zstd_bomb_is_handed_out_in_bounded_pieces() {
        let zeros = io::Read::take(io::repeat(0), 512 << 20);
        let bomb = zstd::encode_all(zeros, 3).unwrap();
        assert!(bomb.len() < 17 * 1024, "{}", bomb.len());
        let mut d = Decoder::for_encoding(Some("zstd")).unwrap();
        let mut total = 0usize;
        let mut steps = 0usize;
        // The whole bomb as one network chunk: the worst case.
        let mut pieces = d.pieces(&bomb);
        while let Some(p) = pieces.next_piece().unwrap() {
            assert!(p.len() <= MAX_PIECE);
            assert_eq!(p.first(), Some(&0));
            total += p.len();
            steps += 1;
        }
        assert!(d.finish().unwrap().len() <= MAX_PIECE);
        assert_eq!(total, 512 << 20);
        assert!(steps >= (512 << 20) / MAX_PIECE, "{steps}");
    }

    /// gzip's best, about 1,000:1: 64 MiB of zeros in ~64 KiB, one chunk.
    #[test]
    fn gzip_bomb_is_handed_out_in_bounded_pieces() {
        let bomb = gzip(&vec![0u8; 64 << 20], 9);
        assert!(bomb.len() < 128 * 1024, "{}", bomb.len());
        for chunk in [bomb.len(), 16 * 1024] {
            let (out, largest) = decode_in_pieces("gzip", &bomb, chunk).unwrap();
            assert_eq!(out.len(), 64 << 20);
            assert!(largest <= MAX_PIECE, "{largest}");
        }
    }

    #[test]
    fn truncated_bodies_are_errors() {
        let data = vec![7u8; 300_000];
        let z = zstd::encode_all(&data[..], 3).unwrap();
        let g = gzip(&data, 6);
        for (enc, packed) in [("zstd", z), ("gzip", g)] {
            let cut = packed.get(..packed.len() - 3).unwrap();
            assert!(decode_in_pieces(enc, cut, 1000).is_err(), "{enc}");
            assert!(decode_in_pieces(enc, &packed, 1000).is_ok(), "{enc}");
        }
    }

    /// RFC 9659: a window above 8 MiB is refused, with what to do.
    #[test]
    fn zstd_window_above_8_mib_is_refused() {
        let data = vec![1u8; 20 << 20];
        let mut enc = zstd::stream::write::Encoder::new(Vec::new(), 1).unwrap();
        enc.set_parameter(zstd::stream::raw::CParameter::WindowLog(24))
            .unwrap();
        enc.include_contentsize(false).unwrap();
        enc.write_all(&data).unwrap();
        let big = enc.finish().unwrap();
        let e = decode_in_pieces("zstd", &big, 16 * 1024).unwrap_err();
        assert!(e.to_string().contains("RFC 9659"), "{e}");
        // 8 MiB itself is fine.
        let mut enc = zstd::stream::write::Encoder::new(Vec::new(), 1).unwrap();
        enc.set_parameter(zstd::stream::raw::CParameter::WindowLog(23))
            .unwrap();
        enc.include_contentsize(false).unwrap();
        enc.write_all(&data).unwrap();
        let ok = enc.finish().unwrap();
        assert_eq!(decode_in_pieces("zstd", &ok, 16 * 1024).unwrap().0, data);
    }

    /// This thread's CPU seconds (user + system), from /proc.
    fn thread_cpu() -> f64 {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap_or_default();
        // Fields after the command's closing parenthesis; utime and
        // stime are the 14th and 15th of the line, in clock ticks (100/s).
        let after = stat.rsplit(')').next().unwrap_or_default();
        let f: Vec<f64> = after
            .split_whitespace()
            .map(|x| x.parse().unwrap_or(0.0))
            .collect();
        (f.get(11).copied().unwrap_or(0.0) + f.get(12).copied().unwrap_or(0.0)) / 100.0
    }

    /// The decoder before #24's fix: every chunk decoded whole, as
    /// `feed` did (zstd's and flate2's write-side decoders).
    fn old_decode(enc: &str, packed: &[u8], chunk: usize, sink: &mut Vec<u8>) -> usize {
        let mut total = 0;
        if enc == "zstd" {
            let mut d = zstd::stream::write::Decoder::new(Vec::new()).unwrap();
            for c in packed.chunks(chunk) {
                d.write_all(c).unwrap();
                d.flush().unwrap();
                let out = std::mem::take(d.get_mut());
                sink.clear();
                sink.extend_from_slice(&out);
                total += out.len();
            }
        } else {
            let mut d = flate2::write::GzDecoder::new(Vec::new());
            for c in packed.chunks(chunk) {
                d.write_all(c).unwrap();
                let out = std::mem::take(d.get_mut());
                sink.clear();
                sink.extend_from_slice(&out);
                total += out.len();
            }
            total += d.finish().unwrap().len();
        }
        total
    }

    fn new_decode(enc: &str, packed: &[u8], chunk: usize, sink: &mut Vec<u8>) -> usize {
        let mut d = Decoder::for_encoding(Some(enc)).unwrap();
        let mut total = 0;
        for c in packed.chunks(chunk) {
            let mut pieces = d.pieces(c);
            while let Some(p) = pieces.next_piece().unwrap() {
                sink.clear();
                sink.extend_from_slice(p);
                total += p.len();
            }
        }
        total + d.finish().unwrap().len()
    }

    /// Decoding speed before and after the bound, interleaved, median of
    /// 7 (BENCHMARKS.md, decode-1). Run with
    /// `cargo test -p ferry-http --lib decode::tests::decode_speed -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement: prints, asserts nothing about speed"]
    fn decode_speed() {
        // 64 MiB of word-like text (compresses ~3:1 like logs or source)
        // and 64 MiB of zeros (the other extreme), from a fixed LCG.
        let words: Vec<&[u8]> = [
            "ferry",
            "moves",
            "files",
            "between",
            "machines",
            "as",
            "fast",
            "the",
            "link",
            "and",
            "CPUs",
            "allow",
            "over",
            "protocols",
            "servers",
            "already",
            "run",
            "\n",
        ]
        .iter()
        .map(|w| w.as_bytes())
        .collect();
        let mut text = Vec::with_capacity(64 << 20);
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        while text.len() < 64 << 20 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            text.extend_from_slice(words[(x >> 33) as usize % words.len()]);
            text.push(if x & 0x70 == 0 {
                b'0' + (x >> 8) as u8 % 10
            } else {
                b' '
            });
        }
        text.truncate(64 << 20);
        let zeros = vec![0u8; 64 << 20];
        let mut sink = Vec::with_capacity(MAX_PIECE.max(1 << 20));
        for (name, data) in [("text", &text), ("zeros", &zeros)] {
            // ferry serve's level (1), and gzip's default (6).
            let z = zstd::encode_all(&data[..], 1).unwrap();
            let g = gzip(data, 6);
            for (enc, packed) in [("zstd", &z), ("gzip", &g)] {
                let (mut old_w, mut new_w, mut old_c, mut new_c) = (vec![], vec![], vec![], vec![]);
                for _ in 0..7 {
                    for new in [false, true] {
                        let (t0, c0) = (std::time::Instant::now(), thread_cpu());
                        let n = if new {
                            new_decode(enc, packed, 16 * 1024, &mut sink)
                        } else {
                            old_decode(enc, packed, 16 * 1024, &mut sink)
                        };
                        let (w, c) = (t0.elapsed().as_secs_f64(), thread_cpu() - c0);
                        assert_eq!(n, data.len());
                        if new {
                            new_w.push(w);
                            new_c.push(c);
                        } else {
                            old_w.push(w);
                            old_c.push(c);
                        }
                    }
                }
                let med = |v: &mut Vec<f64>| {
                    v.sort_by(f64::total_cmp);
                    v[v.len() / 2]
                };
                let (ow, nw, oc, nc) = (
                    med(&mut old_w),
                    med(&mut new_w),
                    med(&mut old_c),
                    med(&mut new_c),
                );
                println!(
                    "{name} {enc}: {} -> {} bytes; old {:.0} MB/s ({ow:.3} s, cpu {oc:.2} s), bounded {:.0} MB/s ({nw:.3} s, cpu {nc:.2} s); new/old time {:.3}, cpu {:.3}",
                    packed.len(),
                    data.len(),
                    data.len() as f64 / ow / 1e6,
                    data.len() as f64 / nw / 1e6,
                    nw / ow,
                    nc / oc.max(0.01),
                );
            }
        }
    }
}
