//! The content hashes ferry compares files with: their names on the wire
//! and running hashers over them. No I/O: the engine hashes local files
//! and reads through backends with these, and ferry serve answers SFTP's
//! `check-file-name` with them.
//!
//! | algorithm | bytes | who computes it where the file lives |
//! |---|---|---|
//! | XXH3-128 | 16 | ferry's local backend, ferry serve (SFTP) |
//! | BLAKE3 | 32 | ferry serve (SFTP, HTTP `Repr-Digest`, FTP `HASH`), `b3sum` over exec |
//! | SHA-256 | 32 | the same, and `sha256sum` over exec |
//! | CRC32 | 4 | S3 (`x-amz-checksum-crc32`); local files |
//!
//! XXH3-128 is not a cryptographic hash: it detects changed content (as
//! rsync's `--checksum` does with the same hash), not a forger.

/// A content hash algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algo {
    Blake3,
    Sha256,
    /// XXH3 with 128-bit output, as `xxh128sum` prints it (big-endian).
    /// rsync 3.2's `--checksum` compares with it too; here it costs about
    /// a fifth of BLAKE3's CPU per byte.
    Xxh128,
    /// CRC32 (IEEE), as S3 keeps it (`x-amz-checksum-crc32`): what the
    /// store has without reading the object back; cheap to compute for a
    /// local file.
    Crc32,
}

impl Algo {
    /// The name used on the wire (`check-file-name`) and in output.
    pub fn name(self) -> &'static str {
        match self {
            Algo::Blake3 => "blake3",
            Algo::Sha256 => "sha256",
            Algo::Xxh128 => "xxh128",
            Algo::Crc32 => "crc32",
        }
    }

    pub fn from_name(n: &str) -> Option<Algo> {
        match n.trim() {
            "blake3" => Some(Algo::Blake3),
            "sha256" | "sha-256" => Some(Algo::Sha256),
            "xxh128" | "xxh3-128" => Some(Algo::Xxh128),
            "crc32" => Some(Algo::Crc32),
            _ => None,
        }
    }

    /// The first name in a comma-separated list (a peer's) that names one
    /// of `among`: names not known here, or known but not among them, are
    /// passed over.
    pub fn first_in(list: &[u8], among: &[Algo]) -> Option<Algo> {
        list.split(|&c| c == b',')
            .filter_map(|n| std::str::from_utf8(n).ok().and_then(Algo::from_name))
            .find(|a| among.contains(a))
    }

    /// Where this algorithm stands in ferry's order of preference, when
    /// both ends offer several (lower first): the cheapest per byte that
    /// still tells changed content apart, then the cryptographic ones,
    /// then CRC32, which only S3 keeps.
    pub fn preference(self) -> u8 {
        match self {
            Algo::Xxh128 => 0,
            Algo::Blake3 => 1,
            Algo::Sha256 => 2,
            Algo::Crc32 => 3,
        }
    }

    /// How many bytes one hash of this algorithm is.
    pub fn bytes(self) -> usize {
        match self {
            Algo::Blake3 | Algo::Sha256 => 32,
            Algo::Xxh128 => 16,
            Algo::Crc32 => 4,
        }
    }
}

/// One running hash.
pub enum Hasher {
    Blake3(Box<blake3::Hasher>),
    Sha256(sha2::Sha256),
    Xxh128(Box<twox_hash::XxHash3_128>),
    Crc32(crc32fast::Hasher),
}

impl Hasher {
    pub fn new(algo: Algo) -> Hasher {
        match algo {
            Algo::Blake3 => Hasher::Blake3(Box::new(blake3::Hasher::new())),
            Algo::Sha256 => Hasher::Sha256(<sha2::Sha256 as sha2::Digest>::new()),
            Algo::Xxh128 => Hasher::Xxh128(Box::new(twox_hash::XxHash3_128::new())),
            Algo::Crc32 => Hasher::Crc32(crc32fast::Hasher::new()),
        }
    }

    pub fn update(&mut self, data: &[u8]) {
        match self {
            Hasher::Blake3(h) => {
                h.update(data);
            }
            Hasher::Sha256(h) => sha2::Digest::update(h, data),
            Hasher::Xxh128(h) => h.write(data),
            Hasher::Crc32(h) => h.update(data),
        }
    }

    /// The hash's bytes: XXH3-128 and CRC32 big-endian, as `xxh128sum`
    /// prints the one and S3 sends the other (in base64).
    pub fn finish(self) -> Vec<u8> {
        match self {
            Hasher::Blake3(h) => h.finalize().as_bytes().to_vec(),
            Hasher::Sha256(h) => sha2::Digest::finalize(h).to_vec(),
            Hasher::Xxh128(h) => h.finish_128().to_be_bytes().to_vec(),
            Hasher::Crc32(h) => h.finalize().to_be_bytes().to_vec(),
        }
    }
}

/// The hash of `data` in one call.
pub fn of(algo: Algo, data: &[u8]) -> Vec<u8> {
    let mut h = Hasher::new(algo);
    h.update(data);
    h.finish()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn hex(h: &[u8]) -> String {
        h.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Known answers: `printf abc | xxh128sum`, `b3sum`, `sha256sum`,
    /// and CRC32's check value.
    #[test]
    fn known_answers() {
        let cases: [(Algo, &[u8], &str); 5] = [
            (Algo::Xxh128, b"", "99aa06d3014798d86001c324468d497f"),
            (Algo::Xxh128, b"abc", "06b05ab6733a618578af5f94892f3950"),
            (
                Algo::Sha256,
                b"abc",
                "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
            ),
            (
                Algo::Blake3,
                b"abc",
                "6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85",
            ),
            (Algo::Crc32, b"123456789", "cbf43926"),
        ];
        for (algo, input, want) in cases {
            assert_eq!(hex(&of(algo, input)), want, "{algo:?} of {input:?}");
        }
    }

    /// Fed in pieces, every hasher gives the one-call hash, whose length
    /// is the algorithm's.
    #[test]
    fn pieces_give_the_whole_hash() {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        for algo in [Algo::Blake3, Algo::Sha256, Algo::Xxh128, Algo::Crc32] {
            let whole = of(algo, &data);
            assert_eq!(whole.len(), algo.bytes());
            for piece in [1, 63, 64, 4096, 100_003] {
                let mut h = Hasher::new(algo);
                data.chunks(piece).for_each(|c| h.update(c));
                assert_eq!(h.finish(), whole, "{algo:?} in pieces of {piece}");
            }
        }
    }

    #[test]
    fn names_round_trip_and_lists_pick_the_first_offered() {
        for algo in [Algo::Blake3, Algo::Sha256, Algo::Xxh128, Algo::Crc32] {
            assert_eq!(Algo::from_name(algo.name()), Some(algo));
        }
        let all = [Algo::Xxh128, Algo::Blake3, Algo::Sha256, Algo::Crc32];
        assert_eq!(
            Algo::first_in(b"md5, xxh128,blake3", &all),
            Some(Algo::Xxh128)
        );
        assert_eq!(Algo::first_in(b"sha1,md5", &all), None);
        assert_eq!(Algo::first_in(b"\xff,sha256", &all), Some(Algo::Sha256));
        // Known but not offered: passed over, not the end of the search.
        let some = [Algo::Blake3, Algo::Sha256];
        assert_eq!(
            Algo::first_in(b"crc32,xxh128,sha256", &some),
            Some(Algo::Sha256)
        );
        assert_eq!(Algo::first_in(b"crc32", &some), None);
    }
}
