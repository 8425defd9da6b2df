//! Content decoding for `--compressed`: the body arrives in pieces and is
//! decoded piece by piece (zstd, gzip), never held whole in memory.
use std::io::Write;

pub enum Decoder {
    Identity,
    Zstd(Box<zstd::stream::write::Decoder<'static, Vec<u8>>>),
    Gzip(Box<flate2::write::GzDecoder<Vec<u8>>>),
}

impl Decoder {
    /// The decoder for a Content-Encoding value; `Err` for one we did not
    /// ask for.
    pub fn for_encoding(enc: Option<&str>) -> Result<Decoder, String> {
        match enc.map(|e| e.trim().to_ascii_lowercase()).as_deref() {
            None | Some("") | Some("identity") => Ok(Decoder::Identity),
            Some("zstd") => zstd::stream::write::Decoder::new(Vec::new())
                .map(|d| Decoder::Zstd(Box::new(d)))
                .map_err(|e| format!("zstd: {e}")),
            Some("gzip") | Some("x-gzip") => Ok(Decoder::Gzip(Box::new(
                flate2::write::GzDecoder::new(Vec::new()),
            ))),
            Some(other) => Err(format!("unsupported Content-Encoding {other:?}")),
        }
    }

    pub fn is_identity(&self) -> bool {
        matches!(self, Decoder::Identity)
    }

    /// Feed compressed bytes; returns the decoded bytes available so far.
    pub fn feed(&mut self, data: &[u8]) -> std::io::Result<Vec<u8>> {
        match self {
            Decoder::Identity => Ok(data.to_vec()),
            Decoder::Zstd(d) => {
                d.write_all(data)?;
                d.flush()?;
                Ok(std::mem::take(d.get_mut()))
            }
            Decoder::Gzip(d) => {
                d.write_all(data)?;
                Ok(std::mem::take(d.get_mut()))
            }
        }
    }

    /// End of body: the last decoded bytes; fails on a truncated stream.
    pub fn finish(self) -> std::io::Result<Vec<u8>> {
        match self {
            Decoder::Identity => Ok(Vec::new()),
            Decoder::Zstd(mut d) => {
                d.flush()?;
                Ok(d.into_inner())
            }
            Decoder::Gzip(d) => d.finish(),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn zstd_and_gzip_in_pieces() {
        let data: Vec<u8> = (0..200_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        let z = zstd::encode_all(&data[..], 3).unwrap();
        let mut g = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        g.write_all(&data).unwrap();
        let g = g.finish().unwrap();
        for (enc, packed) in [("zstd", z), ("gzip", g)] {
            let mut d = Decoder::for_encoding(Some(enc)).unwrap();
            let mut out = Vec::new();
            for piece in packed.chunks(1000) {
                out.extend(d.feed(piece).unwrap());
            }
            out.extend(d.finish().unwrap());
            assert_eq!(out, data, "{enc}");
        }
        assert!(Decoder::for_encoding(Some("br")).is_err());
    }
}
