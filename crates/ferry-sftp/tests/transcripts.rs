//! Wire transcripts: the bytes a peer sends, the typed message we must get,
//! and the bytes we must send back. Byte strings are written out by hand
//! from draft-ietf-secsh-filexfer-02 and OpenSSH's PROTOCOL, not produced by
//! our own encoder, so an encoder bug cannot hide behind a decoder bug.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use bytes::{Bytes, BytesMut};
use ferry_sftp::consts::*;
use ferry_sftp::*;

fn enc_req(r: &Request) -> Vec<u8> {
    let mut b = BytesMut::new();
    r.encode(&mut b);
    b.to_vec()
}

fn enc_resp(r: &Response) -> Vec<u8> {
    let mut b = BytesMut::new();
    r.encode(&mut b);
    b.to_vec()
}

/// Strip the 4-byte length prefix, checking it.
fn frame(bytes: &[u8]) -> Bytes {
    let len = u32::from_be_bytes(bytes[..4].try_into().unwrap()) as usize;
    assert_eq!(len, bytes.len() - 4, "length prefix");
    Bytes::copy_from_slice(&bytes[4..])
}

#[test]
fn client_init_is_nine_bytes() {
    // What OpenSSH's sftp sends first: length 5, SSH_FXP_INIT, version 3.
    let wire = [0, 0, 0, 5, 1, 0, 0, 0, 3];
    let init = Request::Init {
        version: 3,
        extensions: vec![],
    };
    assert_eq!(enc_req(&init), wire);
    assert_eq!(Request::decode(frame(&wire)).unwrap(), init);
}

#[test]
fn server_version_with_extensions() {
    let mut wire = vec![0, 0, 0, 0, SSH_FXP_VERSION, 0, 0, 0, 3];
    for (name, data) in [
        ("posix-rename@openssh.com", "1"),
        ("limits@openssh.com", "1"),
    ] {
        wire.extend((name.len() as u32).to_be_bytes());
        wire.extend(name.as_bytes());
        wire.extend((data.len() as u32).to_be_bytes());
        wire.extend(data.as_bytes());
    }
    let len = (wire.len() - 4) as u32;
    wire[..4].copy_from_slice(&len.to_be_bytes());
    match Response::decode(frame(&wire)).unwrap() {
        Response::Version {
            version,
            extensions,
        } => {
            assert_eq!(version, 3);
            assert_eq!(extensions.len(), 2);
            assert_eq!(&extensions[0].0[..], b"posix-rename@openssh.com");
            assert_eq!(&extensions[1].1[..], b"1");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn read_request_layout() {
    // READ id=7 handle="h1" offset=0x1_0000_0000 len=32768
    let wire = [
        0,
        0,
        0,
        23,
        SSH_FXP_READ,
        0,
        0,
        0,
        7,
        0,
        0,
        0,
        2,
        b'h',
        b'1',
        0,
        0,
        0,
        1,
        0,
        0,
        0,
        0,
        0,
        0,
        0x80,
        0,
    ];
    let req = Request::Read {
        id: 7,
        handle: Bytes::from_static(b"h1"),
        offset: 1 << 32,
        len: 32768,
    };
    assert_eq!(enc_req(&req), wire);
    assert_eq!(Request::decode(frame(&wire)).unwrap(), req);
}

#[test]
fn data_reply_is_a_slice_not_a_copy() {
    let wire = [
        0,
        0,
        0,
        12,
        SSH_FXP_DATA,
        0,
        0,
        0,
        9,
        0,
        0,
        0,
        3,
        b'a',
        b'b',
        b'c',
    ];
    let f = frame(&wire);
    let base = f.as_ptr() as usize;
    match Response::decode(f).unwrap() {
        Response::Data { id, data } => {
            assert_eq!(id, 9);
            assert_eq!(&data[..], b"abc");
            assert_eq!(data.as_ptr() as usize, base + 9);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn status_with_message() {
    let msg = b"No such file";
    let mut wire = vec![0, 0, 0, 0, SSH_FXP_STATUS, 0, 0, 0, 1, 0, 0, 0, 2];
    wire.extend((msg.len() as u32).to_be_bytes());
    wire.extend(msg);
    wire.extend([0, 0, 0, 2, b'e', b'n']);
    let len = (wire.len() - 4) as u32;
    wire[..4].copy_from_slice(&len.to_be_bytes());
    let resp = Response::decode(frame(&wire)).unwrap();
    assert_eq!(
        resp,
        Response::Status {
            id: 1,
            code: StatusCode::NO_SUCH_FILE,
            message: Bytes::from_static(msg),
            lang: Bytes::from_static(b"en"),
        }
    );
    assert_eq!(enc_resp(&resp), wire);
}

#[test]
fn status_without_message_from_old_servers() {
    let wire = [0, 0, 0, 9, SSH_FXP_STATUS, 0, 0, 0, 1, 0, 0, 0, 1];
    match Response::decode(frame(&wire)).unwrap() {
        Response::Status { code, message, .. } => {
            assert_eq!(code, StatusCode::EOF);
            assert!(message.is_empty());
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn attrs_all_fields() {
    // ATTRS id=3: size=5, uid/gid=1000/1001, perms=0o100644, atime/mtime, 1 extended pair.
    let mut wire = vec![0, 0, 0, 0, SSH_FXP_ATTRS, 0, 0, 0, 3];
    wire.extend(0x8000_000fu32.to_be_bytes());
    wire.extend(5u64.to_be_bytes());
    wire.extend(1000u32.to_be_bytes());
    wire.extend(1001u32.to_be_bytes());
    wire.extend(0o100644u32.to_be_bytes());
    wire.extend(1_000_000_000u32.to_be_bytes());
    wire.extend(1_000_000_001u32.to_be_bytes());
    wire.extend(1u32.to_be_bytes());
    wire.extend([0, 0, 0, 1, b'k', 0, 0, 0, 1, b'v']);
    let len = (wire.len() - 4) as u32;
    wire[..4].copy_from_slice(&len.to_be_bytes());
    let resp = Response::decode(frame(&wire)).unwrap();
    let Response::Attrs { attrs, .. } = &resp else {
        panic!()
    };
    assert_eq!(attrs.size, Some(5));
    assert_eq!(attrs.uid_gid, Some((1000, 1001)));
    assert!(attrs.is_regular());
    assert_eq!(attrs.mtime(), Some(1_000_000_001));
    assert_eq!(enc_resp(&resp), wire);
}

#[test]
fn openssh_limits_reply() {
    // What OpenSSH 9.x sftp-server answers: 256 KiB packets, 255 KiB reads/writes.
    let mut data = vec![];
    for v in [262144u64, 261120, 261120, 0] {
        data.extend(v.to_be_bytes());
    }
    let l = Limits::decode(Bytes::from(data.clone())).unwrap();
    assert_eq!(l.max_read_len, 261120);
    assert_eq!(l.max_open_handles, 0);
    assert_eq!(&l.encode()[..], &data[..]);
}

#[test]
fn extended_requests_round_trip() {
    let reqs = [
        Request::Extended {
            id: 1,
            request: ferry_sftp_extended::posix_rename(),
        },
        Request::Extended {
            id: 2,
            request: ferry_sftp_extended::limits(),
        },
    ];
    for r in reqs {
        let b = enc_req(&r);
        assert_eq!(Request::decode(frame(&b)).unwrap(), r);
    }
}

mod ferry_sftp_extended {
    use ferry_sftp::packet_ext::Extended;
    pub fn posix_rename() -> Extended {
        Extended::PosixRename {
            from: "a".into(),
            to: "b".into(),
        }
    }
    pub fn limits() -> Extended {
        Extended::Limits
    }
}

#[test]
fn posix_rename_wire() {
    use ferry_sftp::packet_ext::Extended;
    let r = Request::Extended {
        id: 5,
        request: Extended::PosixRename {
            from: "a".into(),
            to: "b".into(),
        },
    };
    let name = b"posix-rename@openssh.com";
    let mut wire = vec![0, 0, 0, 0, SSH_FXP_EXTENDED, 0, 0, 0, 5];
    wire.extend((name.len() as u32).to_be_bytes());
    wire.extend(name);
    wire.extend([0, 0, 0, 1, b'a', 0, 0, 0, 1, b'b']);
    let len = (wire.len() - 4) as u32;
    wire[..4].copy_from_slice(&len.to_be_bytes());
    assert_eq!(enc_req(&r), wire);
}

#[test]
fn every_request_round_trips() {
    use ferry_sftp::packet_ext::Extended;
    let h = Bytes::from_static(b"\x00\x01handle");
    let p = Bytes::from_static("dir/ünï cödé".as_bytes());
    let a = FileAttrs {
        size: Some(1),
        permissions: Some(0o644),
        atime_mtime: Some((1, 2)),
        ..Default::default()
    };
    let all = vec![
        Request::Open {
            id: 1,
            path: p.clone(),
            flags: OpenFlags::WRITE | OpenFlags::CREATE | OpenFlags::TRUNCATE,
            attrs: a.clone(),
        },
        Request::Close {
            id: 2,
            handle: h.clone(),
        },
        Request::Write {
            id: 3,
            handle: h.clone(),
            offset: 9,
            data: Bytes::from_static(b"xyz"),
        },
        Request::Lstat {
            id: 4,
            path: p.clone(),
        },
        Request::Fstat {
            id: 5,
            handle: h.clone(),
        },
        Request::Setstat {
            id: 6,
            path: p.clone(),
            attrs: a.clone(),
        },
        Request::Fsetstat {
            id: 7,
            handle: h.clone(),
            attrs: a.clone(),
        },
        Request::Opendir {
            id: 8,
            path: p.clone(),
        },
        Request::Readdir {
            id: 9,
            handle: h.clone(),
        },
        Request::Remove {
            id: 10,
            path: p.clone(),
        },
        Request::Mkdir {
            id: 11,
            path: p.clone(),
            attrs: FileAttrs::default(),
        },
        Request::Rmdir {
            id: 12,
            path: p.clone(),
        },
        Request::Realpath {
            id: 13,
            path: p.clone(),
        },
        Request::Stat {
            id: 14,
            path: p.clone(),
        },
        Request::Rename {
            id: 15,
            from: p.clone(),
            to: p.clone(),
        },
        Request::Readlink {
            id: 16,
            path: p.clone(),
        },
        Request::Symlink {
            id: 17,
            target: p.clone(),
            link: p.clone(),
        },
        Request::Extended {
            id: 18,
            request: Extended::Statvfs { path: p.clone() },
        },
        Request::Extended {
            id: 19,
            request: Extended::Fstatvfs { handle: h.clone() },
        },
        Request::Extended {
            id: 20,
            request: Extended::Hardlink {
                from: p.clone(),
                to: p.clone(),
            },
        },
        Request::Extended {
            id: 21,
            request: Extended::Fsync { handle: h.clone() },
        },
        Request::Extended {
            id: 22,
            request: Extended::ExpandPath { path: p.clone() },
        },
        Request::Extended {
            id: 23,
            request: Extended::CopyData {
                read_handle: h.clone(),
                read_offset: 1,
                read_len: 2,
                write_handle: h.clone(),
                write_offset: 3,
            },
        },
        Request::Extended {
            id: 24,
            request: Extended::Lsetstat {
                path: p.clone(),
                attrs: a.clone(),
            },
        },
        Request::Extended {
            id: 26,
            request: Extended::CheckFileName {
                path: p.clone(),
                algorithms: "blake3,sha256".into(),
                start: 0,
                length: 0,
                block_size: 0,
            },
        },
        Request::Extended {
            id: 25,
            request: Extended::Other {
                name: "x@y".into(),
                data: Bytes::from_static(b"raw"),
            },
        },
    ];
    for r in all {
        let b = enc_req(&r);
        assert_eq!(Request::decode(frame(&b)).unwrap(), r, "{r:?}");
    }
}

#[test]
fn check_file_reply_round_trips() {
    let r = ferry_sftp::CheckFileReply {
        algorithm: "sha256".into(),
        hash: Bytes::from(vec![7u8; 32]),
    };
    assert_eq!(ferry_sftp::CheckFileReply::decode(r.encode()).unwrap(), r);
    // A reply cut inside its header is an error, not a panic.
    assert!(ferry_sftp::CheckFileReply::decode(Bytes::from_static(b"\0\0\0\x0acheck")).is_err());
}

#[test]
fn every_response_round_trips() {
    let all = vec![
        Response::Handle {
            id: 1,
            handle: Bytes::from_static(b"h"),
        },
        Response::Data {
            id: 2,
            data: Bytes::from_static(b""),
        },
        Response::Name {
            id: 3,
            entries: vec![NameEntry {
                filename: "a b".into(),
                longname: "-rw-r--r-- a b".into(),
                attrs: FileAttrs {
                    size: Some(0),
                    ..Default::default()
                },
            }],
        },
        Response::ExtendedReply {
            id: 4,
            data: Statvfs {
                bsize: 4096,
                frsize: 4096,
                bavail: 10,
                ..Default::default()
            }
            .encode(),
        },
    ];
    for r in all {
        let b = enc_resp(&r);
        assert_eq!(Response::decode(frame(&b)).unwrap(), r);
    }
}

#[test]
fn write_prefix_plus_data_equals_write_packet() {
    let data = b"0123456789";
    let full = enc_req(&Request::Write {
        id: 77,
        handle: Bytes::from_static(b"hh"),
        offset: 4096,
        data: Bytes::from_static(data),
    });
    let mut b = BytesMut::new();
    Request::encode_write_prefix(&mut b, 77, b"hh", 4096, data.len() as u32);
    b.extend_from_slice(data);
    assert_eq!(b.to_vec(), full);
}

// --- hostile input -------------------------------------------------------

#[test]
fn string_length_beyond_packet_is_truncated_not_allocated() {
    // DATA claiming 4 GiB of data in a 12-byte packet.
    let wire = [SSH_FXP_DATA, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0, 0, 0];
    assert!(matches!(
        Response::decode(Bytes::copy_from_slice(&wire)),
        Err(DecodeError::Truncated { .. })
    ));
}

#[test]
fn name_count_beyond_packet_is_refused_before_allocating() {
    let wire = [SSH_FXP_NAME, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff];
    assert!(matches!(
        Response::decode(Bytes::copy_from_slice(&wire)),
        Err(DecodeError::BadCount { .. })
    ));
}

#[test]
fn unknown_type_and_empty_and_trailing() {
    assert_eq!(
        Request::decode(Bytes::from_static(&[99, 0, 0, 0, 1])),
        Err(DecodeError::UnknownType(99))
    );
    assert_eq!(Request::decode(Bytes::new()), Err(DecodeError::Empty));
    let wire = [SSH_FXP_CLOSE, 0, 0, 0, 1, 0, 0, 0, 1, b'h', b'!'];
    assert!(matches!(
        Request::decode(Bytes::copy_from_slice(&wire)),
        Err(DecodeError::TrailingBytes { .. })
    ));
    // A server takes it as OpenSSH's sftp-server does: the fields, and the
    // rest ignored.
    assert_eq!(
        Request::decode_lenient(Bytes::copy_from_slice(&wire)),
        Ok((
            Request::Close {
                id: 1,
                handle: Bytes::from_static(b"h")
            },
            1
        ))
    );
}

/// Go's pkg/sftp (rclone's SFTP backend) sends WRITE packets whose length
/// covers its whole 32 KiB buffer while the data string holds fewer bytes.
#[test]
fn write_with_slack_after_data() {
    let mut wire = vec![SSH_FXP_WRITE, 0, 0, 0, 7, 0, 0, 0, 1, b'h'];
    wire.extend_from_slice(&5u64.to_be_bytes());
    wire.extend_from_slice(&3u32.to_be_bytes());
    wire.extend_from_slice(b"abc");
    wire.extend_from_slice(&[0u8; 100]);
    let (req, extra) = Request::decode_lenient(Bytes::from(wire)).expect("decodes");
    assert_eq!(extra, 100);
    assert_eq!(
        req,
        Request::Write {
            id: 7,
            handle: Bytes::from_static(b"h"),
            offset: 5,
            data: Bytes::from_static(b"abc")
        }
    );
}

#[test]
fn framer_refuses_huge_length_before_buffering() {
    let mut f = Framer::new(256 * 1024);
    f.push(&[0x7f, 0xff, 0xff, 0xff, 1]);
    assert!(matches!(f.next_frame(), Err(FrameError::TooLong { .. })));
    let mut f = Framer::new(1024);
    f.push(&[0, 0, 0, 0]);
    assert_eq!(f.next_frame(), Err(FrameError::Empty));
}

/// `n` DATA replies back to back; reply `i` carries `len(i)` bytes.
fn data_replies(n: u32, len: impl Fn(u32) -> usize) -> Bytes {
    let mut stream = BytesMut::new();
    for i in 0..n {
        Response::Data {
            id: i,
            data: Bytes::from(vec![i as u8; len(i)]),
        }
        .encode(&mut stream);
    }
    stream.freeze()
}

#[test]
fn framer_reassembles_packets_split_anywhere() {
    let stream = data_replies(50, |i| i as usize * 37);
    for step in [1usize, 3, 7, 4096] {
        let mut f = Framer::new(1 << 20);
        let mut got = vec![];
        for chunk in stream.chunks(step) {
            f.push(chunk);
            while let Some(fr) = f.next_frame().unwrap() {
                got.push(Response::decode(fr).unwrap());
            }
        }
        assert_eq!(got.len(), 50);
        for (i, r) in got.iter().enumerate() {
            assert_eq!(r.id(), Some(i as u32));
        }
        assert_eq!(f.buffered(), 0);
    }
}

#[test]
fn framer_push_bytes_reassembles_split_anywhere_and_mixed() {
    let stream = data_replies(50, |i| i as usize * 37);
    for step in [1usize, 3, 7, 4096, 1 << 20] {
        for mixed in [false, true] {
            let mut f = Framer::new(1 << 20);
            let mut got = vec![];
            let mut at = 0;
            let mut n = 0;
            while at < stream.len() {
                let end = (at + step).min(stream.len());
                if mixed && n % 2 == 1 {
                    f.push(&stream[at..end]);
                } else {
                    f.push_bytes(stream.slice(at..end));
                }
                at = end;
                n += 1;
                while let Some(fr) = f.next_frame().unwrap() {
                    got.push(Response::decode(fr).unwrap());
                }
            }
            assert_eq!(got.len(), 50, "step {step} mixed {mixed}");
            for (i, r) in got.iter().enumerate() {
                assert_eq!(r.id(), Some(i as u32));
                match r {
                    Response::Data { data, .. } => assert_eq!(data.len(), i * 37),
                    other => panic!("{other:?}"),
                }
            }
            assert_eq!(f.buffered(), 0);
        }
    }
}

#[test]
fn framer_push_bytes_returns_whole_packets_without_copy() {
    let stream = data_replies(3, |_| 1000);
    let mut f = Framer::new(1 << 20);
    f.push_bytes(stream.clone());
    let mut at = 0;
    while let Some(fr) = f.next_frame().unwrap() {
        // Each frame is a view into the pushed buffer, after its length.
        assert_eq!(fr.as_ptr(), stream[at + 4..].as_ptr());
        at += 4 + fr.len();
    }
    assert_eq!(at, stream.len());
    // Hostile lengths are refused on the zero-copy path as well.
    let mut f = Framer::new(1024);
    f.push_bytes(Bytes::from_static(&[0x7f, 0xff, 0xff, 0xff, 1]));
    assert!(matches!(f.next_frame(), Err(FrameError::TooLong { .. })));
    let mut f = Framer::new(1024);
    f.push_bytes(Bytes::from_static(&[0, 0, 0, 0]));
    assert_eq!(f.next_frame(), Err(FrameError::Empty));
}

// --- request table -------------------------------------------------------

#[test]
fn table_matches_out_of_order_replies() {
    let mut t = RequestTable::new(1000);
    let ids: Vec<u32> = (0..1000).map(|i| t.insert(i).unwrap()).collect();
    assert!(t.is_full());
    assert_eq!(t.insert(5000), Err(TableFull));
    // Replies arrive in reverse order.
    for (i, id) in ids.iter().enumerate().rev() {
        assert_eq!(t.take(*id), Some(i));
    }
    assert!(t.is_empty());
}

#[test]
fn table_rejects_stale_and_unknown_ids() {
    let mut t = RequestTable::new(4);
    let a = t.insert("a").unwrap();
    assert_eq!(t.take(a), Some("a"));
    // Same slot, next generation.
    let b = t.insert("b").unwrap();
    assert_ne!(a, b);
    assert_eq!(
        t.take(a),
        None,
        "a reply to an old id must not match the new request"
    );
    assert_eq!(t.take(0xdead_beef), None);
    assert_eq!(t.take(b), Some("b"));
    assert_eq!(t.take(b), None, "a duplicated reply must not match twice");
}

#[test]
fn table_reuses_slots_so_memory_is_bounded() {
    let mut t = RequestTable::new(8);
    for round in 0..100_000u32 {
        let id = t.insert(round).unwrap();
        assert_eq!(t.take(id), Some(round));
    }
    let ids: Vec<_> = (0..8).map(|i| t.insert(i).unwrap()).collect();
    let drained = t.drain();
    assert_eq!(drained.len(), 8);
    assert!(t.is_empty());
    for id in ids {
        assert_eq!(t.take(id), None);
    }
    assert!(t.insert(1).is_ok());
}

#[test]
fn data_prefix_matches_the_encoder() {
    let payload = b"hello, file";
    let mut buf = vec![0u8; ferry_sftp::packet_ext::DATA_PREFIX_LEN + payload.len()];
    buf[ferry_sftp::packet_ext::DATA_PREFIX_LEN..].copy_from_slice(payload);
    assert!(Response::fill_data_prefix(
        &mut buf,
        77,
        payload.len() as u32
    ));
    let expected = enc_resp(&Response::Data {
        id: 77,
        data: Bytes::from_static(payload),
    });
    assert_eq!(buf, expected);
    assert!(!Response::fill_data_prefix(&mut [0u8; 5], 1, 0));
}
