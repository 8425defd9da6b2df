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

#[test]
fn reads_far_past_the_budget_behind_a_small_window_all_come_back() {
    const PIECE: u32 = 32 * 1024;
    const READS: u32 = 1024; // 32 MiB asked: four times the session's 8 MiB budget
    let s = FerryServe::start(&[]);
    let data: Vec<u8> = (0..(PIECE * READS) as usize)
        .map(|i| (i * 7 % 251) as u8)
        .collect();
    std::fs::write(s.root().join("big.bin"), &data).unwrap();
    let port = s.sftp_port.unwrap();
    let key = s.key();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async move {
        let cfg = russh::client::Config {
            // The server waits for this client's WINDOW_ADJUST every 64 KiB.
            window_size: 64 * 1024,
            ..Default::default()
        };
        let mut ssh = russh::client::connect(Arc::new(cfg), ("127.0.0.1", port), TrustAll)
            .await
            .unwrap();
        let key = russh::keys::load_secret_key(&key, None).unwrap();
        let hash = ssh.best_supported_rsa_hash().await.unwrap().flatten();
        let auth = ssh
            .authenticate_publickey(
                common::current_user(),
                russh::keys::PrivateKeyWithHashAlg::new(Arc::new(key), hash),
            )
            .await
            .unwrap();
        assert!(auth.success(), "the key was refused");
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
