//! The receiving side of `zstd@ferry.invalid` (ferry's russh,
//! vendor/russh/src/compression/ferry_zstd.rs): packets from a peer, as
//! many as the input holds, fed to one decompressor in turn, as one
//! connection's stream would be. Nothing may panic and no packet may
//! inflate past the transport's packet limit (a compression bomb must be
//! an error, never an allocation). With the first byte odd, the input is
//! also compressed as packets by ferry's sender, at the level and with the
//! stored/compressed switches the input chooses, and must come back whole.

use russh::compression::{
    Setting, ZstdCompressor, ZstdDecompressor, ZstdLevel, ZstdSettings, MAX_DECOMPRESSED,
};

/// Splits `data` into packets: a two-byte big-endian length, then that
/// many bytes (fewer at the end).
fn packets(mut data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while data.len() >= 2 {
        let len = (usize::from(data[0]) << 8 | usize::from(data[1])).min(data.len() - 2);
        out.push(&data[2..2 + len]);
        data = &data[2 + len..];
    }
    out
}

/// One input of the `ssh_zstd` fuzz target: returns when it holds, panics
/// with what broke (the module documentation says what is checked).
pub fn ssh_zstd(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut d = ZstdDecompressor::new(&ZstdSettings::DEFAULT).unwrap();
    if mode & 1 == 0 {
        for p in packets(rest) {
            match d.decompress_to_vec(p) {
                Ok(plain) => assert!(plain.len() <= MAX_DECOMPRESSED),
                // A refused packet ends the connection.
                Err(_) => return,
            }
        }
        return;
    }
    let settings = ZstdSettings {
        level: ZstdLevel::Fixed(i32::from(mode >> 4) + 1),
        stats: None,
        zlib_auto: false,
    };
    let mut c = ZstdCompressor::new(&settings).unwrap();
    // Every SSH payload has at least its message type byte; the receiver
    // refuses a packet that decodes to nothing.
    for (i, p) in packets(rest)
        .into_iter()
        .filter(|p| !p.is_empty())
        .enumerate()
    {
        if mode & 2 != 0 && i % 3 == 1 {
            c.set_setting(Setting::Stored);
        } else {
            c.set_setting(Setting::Level(i32::from(mode >> 4) + 1));
        }
        let mut wire = Vec::new();
        c.compress_into(p, &mut wire, 0).unwrap();
        assert_eq!(d.decompress_to_vec(&wire).unwrap(), p);
    }
}
