//! ferry serve's SFTP session against a raw SSH client that asks for much
//! more than the session's budget, one READ per SSH packet, behind a
//! small window, and reads no reply until it has asked for everything.
//! The server must keep reading its channel while the budget is spent:
//! russh hands each CHANNEL_DATA to the session before it reads the next
//! packet, so an unread channel stopped the whole connection, the
//! client's WINDOW_ADJUST with it, and the replies that held the budget
//! could never leave (a download from ferry serve hung so, 2026-11-30).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use common::serve::FerryServe;
use ferry_sftp::{FileAttrs, Framer, OpenFlags, Request, Response};
use russh::ChannelMsg;

struct TrustAll;

impl russh::client::Handler for TrustAll {
    type Error = russh::Error;

    async fn check_server_key(
        &mut self,
        _key: &russh::keys::PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        Ok(true)
    }
}

fn packet(r: &Request) -> Bytes {
    let mut b = BytesMut::new();
    r.encode(&mut b);
    b.freeze()
}

/// The next SFTP reply on `ch`.
async fn reply(ch: &mut russh::Channel<russh::client::Msg>, framer: &mut Framer) -> Response {
    loop {
        if let Some(f) = framer.next_frame().unwrap() {
            return Response::decode(f).unwrap();
        }
        match ch.wait().await {
            Some(ChannelMsg::Data { data }) => framer.push_bytes(data),
            Some(ChannelMsg::WindowAdjusted { .. }) | Some(ChannelMsg::Success) => {}
            other => panic!("the channel ended: {other:?}"),
        }
    }
}

/// A logged-in raw SSH connection to `s`, with this receive window.
async fn logged_in(s: &FerryServe, window: u32) -> russh::client::Handle<TrustAll> {
    let cfg = russh::client::Config {
        window_size: window,
        ..Default::default()
    };
    let port = s.sftp_port.unwrap();
    let mut ssh = russh::client::connect(Arc::new(cfg), ("127.0.0.1", port), TrustAll)
        .await
        .unwrap();
    let key = russh::keys::load_secret_key(s.key(), None).unwrap();
    let hash = ssh.best_supported_rsa_hash().await.unwrap().flatten();
    let auth = ssh
        .authenticate_publickey(
            common::current_user(),
            russh::keys::PrivateKeyWithHashAlg::new(Arc::new(key), hash),
        )
        .await
        .unwrap();
    assert!(auth.success(), "the key was refused");
    ssh
}

/// A new channel running SFTP, past INIT and VERSION.
async fn sftp_channel(
    ssh: &russh::client::Handle<TrustAll>,
) -> (russh::Channel<russh::client::Msg>, Framer) {
    let mut ch = ssh.channel_open_session().await.unwrap();
    ch.request_subsystem(true, "sftp").await.unwrap();
    let mut framer = Framer::new(1 << 20);
    ch.data(
        &packet(&Request::Init {
            version: 3,
            extensions: vec![],
        })[..],
    )
    .await
    .unwrap();
    assert!(matches!(
        reply(&mut ch, &mut framer).await,
        Response::Version { .. }
    ));
    (ch, framer)
}

/// A session channel that asks for no subsystem and sends data anyway
/// (more messages than russh queues for a channel) must not stop the
/// connection: another channel on it still gets SFTP. It did: the
/// unclaimed channel was never read, russh waited on it, and the
/// connection's other channels waited with it.
#[test]
fn a_channel_with_no_subsystem_that_talks_stops_no_other() {
    let s = FerryServe::start(&[]);
    std::fs::write(s.root().join("f.txt"), b"hello").unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async move {
        let ssh = logged_in(&s, 2 << 20).await;
        let idle = ssh.channel_open_session().await.unwrap();
        for _ in 0..300 {
            idle.data(&[0u8; 1024][..]).await.unwrap();
        }
        let other = async {
            let (mut ch, mut framer) = sftp_channel(&ssh).await;
            let stat = Request::Stat {
                id: 1,
                path: Bytes::from_static(b"/f.txt"),
            };
            ch.data(&packet(&stat)[..]).await.unwrap();
            match reply(&mut ch, &mut framer).await {
                Response::Attrs { attrs, .. } => assert_eq!(attrs.size, Some(5)),
                other => panic!("not attributes: {other:?}"),
            }
        };
        tokio::time::timeout(Duration::from_secs(20), other)
            .await
            .expect("the connection stopped behind the channel with no subsystem");
        drop(idle);
    });
}

#[test]
fn reads_far_past_the_budget_behind_a_small_window_all_come_back() {
    const PIECE: u32 = 32 * 1024;
    const READS: u32 = 1024; // 32 MiB asked: four times the session's 8 MiB budget
    let s = FerryServe::start(&[]);
    let data: Vec<u8> = (0..(PIECE * READS) as usize)
        .map(|i| (i * 7 % 251) as u8)
        .collect();
    std::fs::write(s.root().join("big.bin"), &data).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async move {
        // The server waits for this client's WINDOW_ADJUST every 64 KiB.
        let ssh = logged_in(&s, 64 * 1024).await;
        let (mut ch, mut framer) = sftp_channel(&ssh).await;
        let open = Request::Open {
            id: 1,
            path: Bytes::from_static(b"/big.bin"),
            flags: OpenFlags::READ,
            attrs: FileAttrs::default(),
        };
        ch.data(&packet(&open)[..]).await.unwrap();
        let Response::Handle { handle, .. } = reply(&mut ch, &mut framer).await else {
            panic!("no handle for /big.bin");
        };
        // Every READ in a packet of its own, none of the replies read.
        for i in 0..READS {
            let read = Request::Read {
                id: 2 + i,
                handle: handle.clone(),
                offset: u64::from(i * PIECE),
                len: PIECE,
            };
            ch.data(&packet(&read)[..]).await.unwrap();
        }
        let mut got = vec![0u8; data.len()];
        let all = async {
            for _ in 0..READS {
                match reply(&mut ch, &mut framer).await {
                    Response::Data { id, data } => {
                        let at = ((id - 2) * PIECE) as usize;
                        got[at..at + data.len()].copy_from_slice(&data);
                    }
                    other => panic!("not data: {other:?}"),
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(60), all)
            .await
            .expect("the replies stopped: the session no longer reads its channel");
        assert!(got == data, "the bytes differ");
    });
}
