//! Decoders against hostile input: random bytes, and valid packets with
//! every byte flipped and every length truncated, must give an error or a
//! value, never a panic. A cheap, deterministic stand-in for a fuzzer that
//! runs in every `cargo test` (no nightly toolchain needed).
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use bytes::{Bytes, BytesMut};
use ferry_sftp::packet_ext::Extended;
use ferry_sftp::*;

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn samples() -> Vec<Vec<u8>> {
    let a = FileAttrs {
        size: Some(5),
        uid_gid: Some((1, 2)),
        permissions: Some(0o100644),
        atime_mtime: Some((3, 4)),
        extended: vec![(Bytes::from_static(b"k"), Bytes::from_static(b"v"))],
    };
    let mut out = Vec::new();
    let reqs = [
        Request::Open {
            id: 1,
            path: "p".into(),
            flags: OpenFlags::READ,
            attrs: a.clone(),
        },
        Request::Write {
            id: 2,
            handle: "h".into(),
            offset: 9,
            data: Bytes::from_static(b"data"),
        },
        Request::Extended {
            id: 3,
            request: Extended::CopyData {
                read_handle: "a".into(),
                read_offset: 1,
                read_len: 2,
                write_handle: "b".into(),
                write_offset: 3,
            },
        },
        Request::Extended {
            id: 4,
            request: Extended::Lsetstat {
                path: "p".into(),
                attrs: a.clone(),
            },
        },
    ];
    for r in reqs {
        let mut b = BytesMut::new();
        r.encode(&mut b);
        out.push(b[4..].to_vec());
    }
    let resps = [
        Response::Name {
            id: 5,
            entries: vec![
                NameEntry {
                    filename: "f".into(),
                    longname: "l".into(),
                    attrs: a.clone()
                };
                3
            ],
        },
        Response::Attrs { id: 6, attrs: a },
        Response::Status {
            id: 7,
            code: StatusCode::FAILURE,
            message: "m".into(),
            lang: "en".into(),
        },
    ];
    for r in resps {
        let mut b = BytesMut::new();
        r.encode(&mut b);
        out.push(b[4..].to_vec());
    }
    out
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for _ in 0..200_000 {
        let len = (rng.next() % 64) as usize;
        let mut v: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        // Make the type byte plausible half of the time, to get past it.
        if let Some(t) = v.first_mut() {
            if rng.next().is_multiple_of(2) {
                *t = [
                    3, 4, 5, 6, 11, 12, 17, 18, 20, 200, 101, 102, 103, 104, 105, 201,
                ][(rng.next() % 16) as usize];
            }
        }
        let _ = Request::decode(Bytes::from(v.clone()));
        let _ = Response::decode(Bytes::from(v.clone()));
        let _ = Limits::decode(Bytes::from(v.clone()));
        let _ = Statvfs::decode(Bytes::from(v));
    }
}

#[test]
fn mutated_and_truncated_packets_never_panic() {
    for s in samples() {
        for cut in 0..s.len() {
            let _ = Request::decode(Bytes::copy_from_slice(&s[..cut]));
            let _ = Response::decode(Bytes::copy_from_slice(&s[..cut]));
        }
        for i in 0..s.len() {
            for x in [0x00u8, 0x01, 0x7f, 0x80, 0xff] {
                let mut m = s.clone();
                m[i] = x;
                let _ = Request::decode(Bytes::from(m.clone()));
                let _ = Response::decode(Bytes::from(m));
            }
        }
    }
}

#[test]
fn framer_survives_random_streams() {
    let mut rng = Rng(42);
    for _ in 0..2_000 {
        let mut f = Framer::new(1 << 16);
        for _ in 0..20 {
            let len = (rng.next() % 40) as usize;
            let chunk: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            f.push(&chunk);
            while let Ok(Some(fr)) = f.next_frame() {
                let _ = Response::decode(fr);
            }
        }
    }
}
