//! The engine against the in-memory backend, with faults injected: plan,
//! ranges, retries, stalls, a full disk, failed renames, cancellation and
//! resume, without a socket. Each test says what must hold for a user:
//! no wrong file under a final name, what was there kept unless the copy
//! completed, every failure reported once per file.
#![allow(clippy::unwrap_used, clippy::expect_used)]
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_engine::backend::memory::{Faults, Memory};
use ferry_engine::{BackendPath, CopyOptions, ErrorKind, Event, Report, Transfer};

fn data(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 9) as u8)
        .collect()
}

fn at(m: &Memory, p: &str) -> BackendPath {
    BackendPath {
        backend: Arc::new(m.clone()),
        path: p.into(),
    }
}

async fn run(t: Transfer) -> (Report, Vec<Event>) {
    let mut h = t.start();
    let mut events = Vec::new();
    while let Some(e) = h.next_event().await {
        events.push(e);
    }
    (h.wait().await, events)
}

/// The last progress event's byte count (0 without one).
fn last_progress(events: &[Event]) -> u64 {
    events
        .iter()
        .rev()
        .find_map(|e| match e {
            Event::Progress { bytes_done, .. } => Some(*bytes_done),
            _ => None,
        })
        .unwrap_or(0)
}

/// Run `t` and cancel it when its first file is done.
async fn cancel_after_first_file(t: Transfer) -> Report {
    let mut h = t.start();
    while let Some(e) = h.next_event().await {
        if let Event::FileDone(_) = e {
            h.cancel();
        }
    }
    h.wait().await
}

fn opts() -> CopyOptions {
    CopyOptions {
        timeout: Duration::from_secs(5),
        ..CopyOptions::default()
    }
}

fn parts(m: &Memory) -> Vec<String> {
    m.files()
        .into_iter()
        .filter(|f| f.contains(".ferry-part"))
        .collect()
}

#[tokio::test]
async fn one_file_into_a_directory_with_events_in_order() {
    let (a, b) = (Memory::new("a"), Memory::new("b"));
    a.put("/src/f.bin", &data(300_000, 1), 1_700_000_000);
    b.mkdir("/dst");
    let (r, ev) = run(Transfer::between(
        vec![at(&a, "/src/f.bin")],
        at(&b, "/dst"),
        opts(),
    ))
    .await;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(b.get("/dst/f.bin").as_deref(), Some(&data(300_000, 1)[..]));
    assert!(parts(&b).is_empty());
    assert_eq!(r.files.len(), 1);
    assert_eq!(r.bytes, 300_000);
    assert!(matches!(
        ev.first(),
        Some(Event::Planned {
            files: 1,
            bytes: 300_000
        })
    ));
    assert!(ev.iter().any(|e| matches!(e, Event::FileStarted { .. })));
    assert!(ev
        .iter()
        .any(|e| matches!(e, Event::FileDone(f) if f.error.is_none())));
    assert!(matches!(
        ev.last(),
        Some(Event::Progress {
            bytes_done: 300_000,
            ..
        })
    ));
}

#[tokio::test]
async fn tree_with_odd_names_and_times_kept() {
    let (a, b) = (Memory::new("a"), Memory::new("b"));
    let names = [
        "/t/a b.txt",
        "/t/ünï/ç%d+.bin",
        "/t/x/y/z/deep",
        "/t/empty.dat",
    ];
    for (i, n) in names.iter().enumerate() {
        let len = if n.ends_with("empty.dat") {
            0
        } else {
            1000 * (i + 1)
        };
        a.put(n, &data(len, i as u8), 1_600_000_000 + i as i64);
    }
    a.mkdir("/t/emptydir");
    let o = CopyOptions {
        recursive: true,
        preserve: true,
        ..opts()
    };
    let (r, _) = run(Transfer::between(vec![at(&a, "/t")], at(&b, "/copy"), o)).await;
    assert!(r.error.is_none(), "{:?}", r.error);
    for (i, n) in names.iter().enumerate() {
        let d = n.replacen("/t/", "/copy/", 1);
        assert_eq!(b.get(&d), a.get(n), "{d}");
        assert_eq!(b.mtime(&d), Some(1_600_000_000 + i as i64), "{d}");
    }
    assert!(parts(&b).is_empty());
    assert_eq!(r.files.len(), names.len());
}

#[tokio::test]
async fn a_big_file_in_ranges_finishing_out_of_order() {
    let (a, b) = (Memory::new("a"), Memory::new("b"));
    let body = data(5_000_000, 7);
    a.put("/big", &body, 0);
    a.set_faults(Faults {
        reorder: true,
        ..Faults::default()
    });
    b.set_faults(Faults {
        short_writes: false,
        ..Faults::default()
    });
    let o = CopyOptions {
        split_min: 1_000_000,
        streams: Some(4),
        ..opts()
    };
    let (r, _) = run(Transfer::between(
        vec![at(&a, "/big")],
        at(&b, "/big.copy"),
        o,
    ))
    .await;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(b.get("/big.copy").as_deref(), Some(&body[..]));
    // Four ranges, four reads.
    assert_eq!(
        a.counters.reads.load(std::sync::atomic::Ordering::Relaxed),
        4
    );
}

/// A store that keeps each file's CRC32 (S3), split into reordered
/// ranges: the file's CRC32 is combined from its ranges' as they pass, so
/// the part is not read again; a wrong one keeps nothing; after a retried
/// range the part is hashed where it lies instead.
#[tokio::test]
async fn a_split_file_is_checked_against_the_stores_crc32() {
    use ferry_engine::backend::memory::Crc32Digest;
    use std::sync::atomic::Ordering::Relaxed;
    let body = data(5_000_000, 21);
    let o = || CopyOptions {
        split_min: 1_000_000,
        streams: Some(4),
        ..opts()
    };
    let copy = |digest, fail_read_after| {
        let (a, b) = (Memory::new("a"), Memory::new("b"));
        a.put("/big", &body, 0);
        a.set_faults(Faults {
            reorder: true,
            crc32_digest: Some(digest),
            fail_read_after,
            transient_reads: 1,
            ..Faults::default()
        });
        let t = Transfer::between(vec![at(&a, "/big")], at(&b, "/big.copy"), o());
        async move { (run(t).await.0, b) }
    };

    let (r, b) = copy(Crc32Digest::Right, None).await;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(b.get("/big.copy").as_deref(), Some(&body[..]));
    assert_eq!(
        b.counters.hashed.load(Relaxed),
        0,
        "combined, not read again"
    );

    let (r, b) = copy(Crc32Digest::Wrong, None).await;
    let e = r.error.expect("a wrong CRC32 fails the copy");
    assert!(e.to_string().contains("does not match"), "{e}");
    assert_eq!(b.get("/big.copy"), None);
    assert!(parts(&b).is_empty(), "{:?}", parts(&b));

    let (r, b) = copy(Crc32Digest::Right, Some(300_000)).await;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(b.get("/big.copy").as_deref(), Some(&body[..]));
    assert_eq!(b.counters.hashed.load(Relaxed), 1, "a retried range: read");
}

#[tokio::test]
async fn short_writes_keep_every_byte_in_place() {
    let (a, b) = (Memory::new("a"), Memory::new("b"));
    let body = data(40_000, 3);
    a.put("/f", &body, 0);
    b.set_faults(Faults {
        short_writes: true,
        ..Faults::default()
    });
    let (r, _) = run(Transfer::between(vec![at(&a, "/f")], at(&b, "/g"), opts())).await;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(b.get("/g").as_deref(), Some(&body[..]));
}

#[tokio::test]
async fn transient_failures_are_retried_and_said() {
    let (a, b) = (Memory::new("a"), Memory::new("b"));
    let body = data(1_000_000, 9);
    a.put("/f", &body, 0);
    a.set_faults(Faults {
        fail_read_after: Some(200_000),
        transient_reads: 2,
        ..Faults::default()
    });
    let (r, ev) = run(Transfer::between(vec![at(&a, "/f")], at(&b, "/g"), opts())).await;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(b.get("/g").as_deref(), Some(&body[..]));
    let retries = ev
        .iter()
        .filter(|e| matches!(e, Event::Warning(w) if w.contains("retrying")))
        .count();
    assert_eq!(retries, 2);
    // Bytes of failed attempts are not counted twice.
    assert_eq!(r.bytes, 1_000_000);
}

#[tokio::test]
async fn a_server_lost_while_planning_is_tried_again() {
    let (a, b) = (Memory::new("a"), Memory::new("b"));
    a.put("/f", b"body", 0);
    b.set_faults(Faults {
        lost_stats: 2,
        ..Faults::default()
    });
    let (r, ev) = run(Transfer::between(vec![at(&a, "/f")], at(&b, "/g"), opts())).await;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(b.get("/g").as_deref(), Some(&b"body"[..]));
    let said = ev
        .iter()
        .filter(|e| matches!(e, Event::Warning(w) if w.contains("connection lost") && w.contains("retrying")))
        .count();
    assert_eq!(said, 2);

    // Out of attempts: the network error is the copy's, nothing written.
    b.set_faults(Faults {
        lost_stats: 3,
        ..Faults::default()
    });
    let mut o = opts();
    o.retries = 3;
    let (r, _) = run(Transfer::between(vec![at(&a, "/f")], at(&b, "/h"), o)).await;
    assert_eq!(r.error.map(|e| e.kind()), Some(ErrorKind::Network));
    assert!(b.get("/h").is_none());
}

#[tokio::test]
async fn one_refused_file_fails_alone_and_is_reported_once() {
    let (a, b) = (Memory::new("a"), Memory::new("b"));
    for i in 0..5 {
        a.put(&format!("/d/f{i}"), &data(10_000, i), 0);
    }
    a.set_faults(Faults {
        refuse_path: Some(b"/d/f2".to_vec()),
        ..Faults::default()
    });
    let o = CopyOptions {
        recursive: true,
        ..opts()
    };
    let (r, ev) = run(Transfer::between(vec![at(&a, "/d")], at(&b, "/e"), o)).await;
    let failed: Vec<_> = r.files.iter().filter(|f| f.error.is_some()).collect();
    assert_eq!(failed.len(), 1);
    let err = failed[0]
        .error
        .as_ref()
        .map(|e| (e.kind, e.message.clone()));
    assert!(
        matches!(&err, Some((ErrorKind::Remote, m)) if m.contains("/d/f2") && m.contains("permission denied")),
        "{err:?}"
    );
    assert_eq!(r.error.as_ref().map(|e| e.exit_code()), Some(4));
    assert_eq!(b.get("/e/f2"), None);
    for i in [0, 1, 3, 4] {
        assert_eq!(b.get(&format!("/e/f{i}")), a.get(&format!("/d/f{i}")));
    }
    let done_events = ev
        .iter()
        .filter(|e| matches!(e, Event::FileDone(f) if f.error.is_some()))
        .count();
    assert_eq!(done_events, 1);
}

#[tokio::test]
async fn a_stalled_source_ends_within_its_timeout() {
    let (a, b) = (Memory::new("a"), Memory::new("b"));
    a.put("/f", &data(500_000, 1), 0);
    a.set_faults(Faults {
        stall_after: Some(100_000),
        ..Faults::default()
    });
    let o = CopyOptions {
        timeout: Duration::from_millis(300),
        retries: 2,
        ..opts()
    };
    let t0 = Instant::now();
    let (r, _) = run(Transfer::between(vec![at(&a, "/f")], at(&b, "/g"), o)).await;
    let took = t0.elapsed();
    let e = r.error.expect("a stall must fail");
    assert!(e.to_string().contains("stalled"), "{e}");
    assert_eq!(e.exit_code(), 1);
    // Two attempts of 300 ms and one backoff of at most ~0.3 s.
    assert!(took < Duration::from_secs(3), "{took:?}");
    assert_eq!(b.get("/g"), None);
}

#[tokio::test]
async fn a_full_disk_keeps_the_old_file() {
    let (a, b) = (Memory::new("a"), Memory::new("b"));
    a.put("/f", &data(2_000_000, 1), 0);
    b.put("/g", b"the old contents", 5);
    b.set_faults(Faults {
        capacity: Some(1_000_000),
        ..Faults::default()
    });
    let (r, _) = run(Transfer::between(vec![at(&a, "/f")], at(&b, "/g"), opts())).await;
    let e = r.error.expect("must fail");
    assert!(e.to_string().contains("no space left"), "{e}");
    assert_eq!(b.get("/g").as_deref(), Some(&b"the old contents"[..]));
}

#[tokio::test]
async fn a_failed_rename_leaves_the_final_name_alone() {
    let (a, b) = (Memory::new("a"), Memory::new("b"));
    a.put("/f", &data(10_000, 1), 0);
    b.put("/g", b"old", 5);
    b.set_faults(Faults {
        fail_rename: true,
        ..Faults::default()
    });
    let (r, _) = run(Transfer::between(vec![at(&a, "/f")], at(&b, "/g"), opts())).await;
    assert!(r.error.is_some());
    assert_eq!(b.get("/g").as_deref(), Some(&b"old"[..]));
}

#[tokio::test]
async fn cancel_stops_promptly_and_leaves_no_final_file() {
    let (a, b) = (Memory::new("a"), Memory::new("b"));
    for i in 0..20 {
        a.put(&format!("/d/f{i:02}"), &data(400_000, i), 0);
    }
    a.set_faults(Faults {
        // Slow enough to cancel in the middle.
        reorder: true,
        ..Faults::default()
    });
    let o = CopyOptions {
        recursive: true,
        parallel: Some(2),
        ..opts()
    };
    let mut h = Transfer::between(vec![at(&a, "/d")], at(&b, "/e"), o).start();
    let t0 = Instant::now();
    while let Some(e) = h.next_event().await {
        if let Event::Progress { bytes_done, .. } = e {
            if bytes_done > 1_000_000 {
                h.cancel();
            }
        }
        if let Event::FileDone(f) = &e {
            if f.error.is_none()
                && h.stats()
                    .bytes_done
                    .load(std::sync::atomic::Ordering::Relaxed)
                    > 1_000_000
            {
                h.cancel();
            }
        }
    }
    let r = h.wait().await;
    assert!(t0.elapsed() < Duration::from_secs(10));
    let e = r.error.expect("cancelled");
    assert_eq!(e.kind(), ErrorKind::Cancelled);
    // Every file under a final name is complete; some never started.
    let finals: Vec<String> = b
        .files()
        .into_iter()
        .filter(|f| !f.contains(".ferry-part"))
        .collect();
    assert!(finals.len() < 20, "{finals:?}");
    for f in finals {
        assert_eq!(b.get(&f), a.get(&f.replacen("/e/", "/d/", 1)), "{f}");
    }
}

#[tokio::test]
async fn resume_sends_only_the_rest_after_checking_the_tail() {
    let (a, b) = (Memory::new("a"), Memory::new("b"));
    let body = data(3_000_000, 5);
    a.put("/f", &body, 0);
    a.set_faults(Faults {
        fail_read_after: Some(2_000_000),
        ..Faults::default()
    });
    let o = CopyOptions {
        retries: 1,
        ..opts()
    };
    let (r, _) = run(Transfer::between(
        vec![at(&a, "/f")],
        at(&b, "/g"),
        o.clone(),
    ))
    .await;
    assert!(r.error.is_some());
    assert_eq!(b.get("/g"), None);
    assert_eq!(b.get("/.g.ferry-part").map(|p| p.len()), Some(2_000_000));

    a.set_faults(Faults::default());
    let read_before = bytes_read(&a);
    let o = CopyOptions { resume: true, ..o };
    let (r, _) = run(Transfer::between(vec![at(&a, "/f")], at(&b, "/g"), o)).await;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(b.get("/g").as_deref(), Some(&body[..]));
    let read = bytes_read(&a) - read_before;
    // The rest (1 MB) and the 64 KiB tail check, nothing more.
    assert_eq!(read, 1_000_000 + 64 * 1024);
    assert_eq!(r.bytes, 1_000_000);
}

#[tokio::test]
async fn a_split_file_resumes_from_its_record_not_its_length() {
    // Ranges of a split file land out of order: after a failure the part
    // has the file's full length and a hole. Its length says nothing;
    // the `.NAME.ferry-resume` record says which ranges are in.
    let (a, b) = (Memory::new("a"), Memory::new("b"));
    let body = data(8_000_000, 3);
    a.put("/f", &body, 0);
    a.set_faults(Faults {
        refuse_offset: Some(4_000_000),
        ..Faults::default()
    });
    let o = CopyOptions {
        split_min: 1_000_000,
        streams: Some(4),
        retries: 1,
        ..opts()
    };
    let (r, _) = run(Transfer::between(
        vec![at(&a, "/f")],
        at(&b, "/g"),
        o.clone(),
    ))
    .await;
    assert!(r.error.is_some());
    assert_eq!(b.get("/g"), None);
    assert_eq!(b.get("/.g.ferry-part").map(|p| p.len()), Some(8_000_000));
    let record = String::from_utf8(b.get("/.g.ferry-resume").expect("a record")).unwrap();
    assert!(
        record.contains("done 0 4000000") && record.contains("done 6000000 8000000"),
        "{record}"
    );

    // Without --resume, a new copy in one stream writes the part anew
    // (the stale record is left); --resume then trusts the part's length,
    // not the record's ranges past it.
    a.set_faults(Faults {
        fail_read_after: Some(3_000_000),
        ..Faults::default()
    });
    let one = CopyOptions {
        streams: Some(1),
        ..o.clone()
    };
    let (r, _) = run(Transfer::between(vec![at(&a, "/f")], at(&b, "/g"), one)).await;
    assert!(r.error.is_some());
    assert_eq!(b.get("/.g.ferry-part").map(|p| p.len()), Some(3_000_000));
    a.set_faults(Faults::default());
    let again = CopyOptions {
        resume: true,
        ..o.clone()
    };
    let (r, _) = run(Transfer::between(vec![at(&a, "/f")], at(&b, "/g"), again)).await;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(b.get("/g").as_deref(), Some(&body[..]));
    assert_eq!(
        b.get("/.g.ferry-resume"),
        None,
        "the record goes with the part"
    );

    // A split copy interrupted, then resumed: only the missing range moves.
    let b = Memory::new("b");
    a.set_faults(Faults {
        refuse_offset: Some(2_000_000),
        ..Faults::default()
    });
    let (r, _) = run(Transfer::between(
        vec![at(&a, "/f")],
        at(&b, "/g"),
        o.clone(),
    ))
    .await;
    assert!(r.error.is_some());
    a.set_faults(Faults::default());
    let before = bytes_read(&a);
    let o = CopyOptions { resume: true, ..o };
    let (r, _) = run(Transfer::between(vec![at(&a, "/f")], at(&b, "/g"), o)).await;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(b.get("/g").as_deref(), Some(&body[..]));
    let read = bytes_read(&a) - before;
    assert_eq!(read, 2_000_000);
    assert_eq!(r.bytes, 2_000_000);
}

#[tokio::test]
async fn a_failed_range_keeps_what_it_wrote() {
    // A source that fails mid-range (a killed server): what each range
    // wrote before is flushed and kept. A retry continues from there, and
    // after a final failure the record says so, for --resume.
    let (a, b) = (Memory::new("a"), Memory::new("b"));
    let body = data(8_000_000, 5);
    a.put("/f", &body, 0);
    let o = CopyOptions {
        split_min: 1_000_000,
        streams: Some(4),
        ..opts()
    };
    // One failure per range, retried: no byte is read twice.
    a.set_faults(Faults {
        fail_read_after: Some(500_000),
        transient_reads: 4,
        ..Faults::default()
    });
    let (r, _) = run(Transfer::between(
        vec![at(&a, "/f")],
        at(&b, "/g"),
        o.clone(),
    ))
    .await;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(b.get("/g").as_deref(), Some(&body[..]));
    assert_eq!(
        bytes_read(&a),
        8_000_000,
        "retries continue where they stopped"
    );
    assert_eq!(r.bytes, 8_000_000);

    // Every attempt fails: the record keeps the first 500,000 bytes of
    // each range, and --resume moves only the rest.
    let b = Memory::new("b");
    a.set_faults(Faults {
        fail_read_after: Some(500_000),
        ..Faults::default()
    });
    let once = CopyOptions {
        retries: 1,
        ..o.clone()
    };
    let (r, _) = run(Transfer::between(vec![at(&a, "/f")], at(&b, "/g"), once)).await;
    assert!(r.error.is_some());
    assert_eq!(b.get("/g"), None);
    let record = String::from_utf8(b.get("/.g.ferry-resume").expect("a record")).unwrap();
    assert!(
        record.contains("done 0 500000") && record.contains("done 6000000 6500000"),
        "{record}"
    );
    a.set_faults(Faults::default());
    let before = bytes_read(&a);
    let resume = CopyOptions { resume: true, ..o };
    let (r, _) = run(Transfer::between(vec![at(&a, "/f")], at(&b, "/g"), resume)).await;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(b.get("/g").as_deref(), Some(&body[..]));
    assert_eq!(bytes_read(&a) - before, 6_000_000);
}

#[tokio::test]
async fn resume_starts_over_when_the_part_differs() {
    let (a, b) = (Memory::new("a"), Memory::new("b"));
    let body = data(500_000, 5);
    a.put("/f", &body, 0);
    b.put("/.g.ferry-part", &data(200_000, 99), 0);
    let o = CopyOptions {
        resume: true,
        ..opts()
    };
    let (r, ev) = run(Transfer::between(vec![at(&a, "/f")], at(&b, "/g"), o)).await;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(b.get("/g").as_deref(), Some(&body[..]));
    assert!(ev
        .iter()
        .any(|e| matches!(e, Event::Warning(w) if w.contains("starting over"))));
}

#[tokio::test]
async fn usage_errors_say_what_to_do() {
    let (a, b) = (Memory::new("a"), Memory::new("b"));
    a.put("/d/f", b"x", 0);
    a.put("/g", b"y", 0);
    let (r, _) = run(Transfer::between(vec![at(&a, "/d")], at(&b, "/x"), opts())).await;
    let e = r.error.expect("a directory without -r");
    assert!(e.to_string().contains("use -r"), "{e}");
    let (r, _) = run(Transfer::between(
        vec![at(&a, "/d/f"), at(&a, "/g")],
        at(&b, "/nope"),
        opts(),
    ))
    .await;
    let e = r.error.expect("several sources, no directory");
    assert!(e.to_string().contains("several sources"), "{e}");
    assert_eq!(e.exit_code(), 2);
    let (r, _) = run(Transfer::between(
        vec![at(&a, "/missing")],
        at(&b, "/x"),
        opts(),
    ))
    .await;
    let e = r.error.expect("missing source");
    assert!(e.to_string().contains("mem://a/missing"), "{e}");
}

#[test]
fn the_blocking_wrapper_runs_and_cancels_from_its_callback() {
    let (a, b) = (Memory::new("a"), Memory::new("b"));
    for i in 0..10 {
        a.put(&format!("/d/f{i}"), &data(200_000, i), 0);
    }
    // Each file takes about 50 ms, so the cancel the callback asks after
    // the third lands before the tenth is done, however busy the host
    // (unpaced, all ten could end before the first event was read).
    a.set_faults(Faults {
        read_rate: Some(4_000_000),
        ..Faults::default()
    });
    let o = CopyOptions {
        recursive: true,
        parallel: Some(1),
        ..opts()
    };
    let mut seen = 0;
    let r = ferry_engine::run_blocking(
        Transfer::between(vec![at(&a, "/d")], at(&b, "/e"), o),
        |e| {
            if matches!(e, Event::FileDone(_)) {
                seen += 1;
            }
            seen < 3
        },
    );
    assert_eq!(r.error.map(|e| e.kind()), Some(ErrorKind::Cancelled));
    let finals = b
        .files()
        .into_iter()
        .filter(|f| !f.contains(".ferry-part"))
        .count();
    assert!((3..10).contains(&finals), "{finals}");
}

#[test]
fn local_to_local_through_the_library() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("sub")).expect("mkdir");
    std::fs::write(src.join("a.txt"), b"hello").expect("write");
    std::fs::write(src.join("sub/b.bin"), data(3_000_000, 2)).expect("write");
    let dst = dir.path().join("dst");
    let opts = CopyOptions {
        recursive: true,
        ..CopyOptions::default()
    };
    let s = ferry_engine::copy(
        &[ferry_engine::Location::Local(src.clone())],
        &ferry_engine::Location::Local(dst.clone()),
        &opts,
        Arc::new(ferry_engine::Stats::default()),
    )
    .expect("copy");
    assert_eq!(s.files, 2);
    assert_eq!(std::fs::read(dst.join("a.txt")).expect("read"), b"hello");
    assert_eq!(
        std::fs::read(dst.join("sub/b.bin")).expect("read"),
        data(3_000_000, 2)
    );
}

#[test]
fn new_files_keep_the_source_permission_bits_without_p() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new("perm");
    let src = dir.0.join("src");
    std::fs::create_dir_all(&src).expect("mkdir");
    // A small file (one `put_whole`), a big one (ranges into a part
    // file), a program.
    let files = [
        ("secret.txt", 0o600, data(100, 1)),
        ("big.bin", 0o640, data(3_000_000, 2)),
        ("run.sh", 0o755, data(10, 3)),
    ];
    for (name, mode, bytes) in &files {
        let p = src.join(name);
        std::fs::write(&p, bytes).expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(*mode)).expect("chmod");
    }
    let dst = dir.0.join("dst");
    let opts = CopyOptions {
        recursive: true,
        ..CopyOptions::default()
    };
    ferry_engine::copy(
        &[ferry_engine::Location::Local(src.clone())],
        &ferry_engine::Location::Local(dst.clone()),
        &opts,
        Arc::new(ferry_engine::Stats::default()),
    )
    .expect("copy");
    for (name, mode, bytes) in &files {
        let p = dst.join(name);
        assert_eq!(&std::fs::read(&p).expect("read"), bytes, "{name}");
        let got = std::fs::metadata(&p).expect("stat").permissions().mode() & 0o777;
        // The source's bits less the umask, as cp: never more than the
        // source had, the owner's always.
        assert_eq!(got & !mode, 0, "{name}: {got:o} from {mode:o}");
        assert_eq!(got & 0o700, mode & 0o700, "{name}: {got:o} from {mode:o}");
    }
}

/// A temporary local directory, removed at the end of the test.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("ferry-mem-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }
    fn at(&self, name: &str) -> BackendPath {
        BackendPath {
            backend: Arc::new(ferry_engine::backend::local::Local),
            path: self.0.join(name).to_string_lossy().into_owned(),
        }
    }
    fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn on_own_thread(f: Faults) -> Faults {
    Faults {
        own_thread: true,
        ..f
    }
}

#[tokio::test]
async fn ranges_into_a_local_file_run_on_the_source_thread() {
    // A download into a local file goes whole to the source's thread
    // (as an SSH connection's): ranges, reordered, every byte in place.
    let a = Memory::new("a");
    let d = TempDir::new("own-down");
    let body = data(9_000_000, 3);
    a.put("/big", &body, 0);
    a.set_faults(on_own_thread(Faults {
        reorder: true,
        ..Faults::default()
    }));
    let o = CopyOptions {
        streams: Some(4),
        ..opts()
    };
    let (r, events) = run(Transfer::between(vec![at(&a, "/big")], d.at("big"), o)).await;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(std::fs::read(d.0.join("big")).unwrap(), body);
    assert_eq!(d.names(), vec!["big".to_string()]);
    assert!(last_progress(&events) <= body.len() as u64);
}

#[tokio::test]
async fn a_transient_failure_on_the_source_thread_keeps_what_was_written() {
    let a = Memory::new("a");
    let d = TempDir::new("own-retry");
    let body = data(3_000_000, 4);
    a.put("/f", &body, 0);
    a.set_faults(on_own_thread(Faults {
        fail_read_after: Some(1_000_000),
        transient_reads: 1,
        ..Faults::default()
    }));
    let (r, _) = run(Transfer::between(vec![at(&a, "/f")], d.at("f"), opts())).await;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(std::fs::read(d.0.join("f")).unwrap(), body);
    // The retry read only the rest: 1 MB failed, then 2 MB.
    let read = bytes_read(&a);
    assert!(read <= 3_000_000 + 64 * 1024, "{read}");
}

#[tokio::test]
async fn a_stall_on_the_source_thread_ends_within_its_timeout() {
    let a = Memory::new("a");
    let d = TempDir::new("own-stall");
    a.put("/f", &data(500_000, 1), 0);
    a.set_faults(on_own_thread(Faults {
        stall_after: Some(100_000),
        ..Faults::default()
    }));
    let o = CopyOptions {
        timeout: Duration::from_millis(300),
        retries: 2,
        ..opts()
    };
    let t0 = Instant::now();
    let (r, _) = run(Transfer::between(vec![at(&a, "/f")], d.at("g"), o)).await;
    let e = r.error.expect("a stall must fail");
    assert!(e.to_string().contains("stalled"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    assert!(!d.0.join("g").exists());
}

#[tokio::test]
async fn cancel_stops_a_download_on_the_source_thread() {
    let a = Memory::new("a");
    let d = TempDir::new("own-cancel");
    for i in 0..20 {
        a.put(&format!("/d/f{i:02}"), &data(400_000, i), 0);
    }
    a.set_faults(on_own_thread(Faults {
        reorder: true,
        ..Faults::default()
    }));
    let o = CopyOptions {
        recursive: true,
        parallel: Some(2),
        ..opts()
    };
    let t0 = Instant::now();
    let r = cancel_after_first_file(Transfer::between(vec![at(&a, "/d")], d.at("e"), o)).await;
    assert!(t0.elapsed() < Duration::from_secs(10));
    assert_eq!(r.error.expect("cancelled").kind(), ErrorKind::Cancelled);
    // Every file under a final name is complete.
    let e = d.0.join("e");
    for name in std::fs::read_dir(&e)
        .unwrap()
        .map(|x| x.unwrap().file_name())
    {
        let name = name.to_string_lossy().into_owned();
        if name.contains(".ferry-") {
            continue;
        }
        assert_eq!(
            std::fs::read(e.join(&name)).ok(),
            a.get(&format!("/d/{name}")),
            "{name}"
        );
    }
}

#[tokio::test]
async fn small_files_into_local_files_are_read_and_written_on_the_source_thread() {
    // Files small enough to move whole are read and written on the
    // source's thread (an HTTP shard's): each arrives once, with its
    // time, after a transient failure too, and no part file is left.
    let a = Memory::new("a");
    let d = TempDir::new("own-small");
    for i in 0..40u8 {
        let len = 20_000 + usize::from(i) * 1000;
        a.put(
            &format!("/s/f{i:02}"),
            &data(len, i),
            1_600_000_000 + i64::from(i),
        );
    }
    a.set_faults(on_own_thread(Faults {
        fail_read_after: Some(5_000),
        transient_reads: 3,
        reorder: true,
        ..Faults::default()
    }));
    let o = CopyOptions {
        recursive: true,
        preserve: true,
        parallel: Some(8),
        ..opts()
    };
    let (r, _) = run(Transfer::between(vec![at(&a, "/s")], d.at("t"), o)).await;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(r.files.len(), 40);
    let t = d.0.join("t");
    for i in 0..40u8 {
        let name = format!("f{i:02}");
        assert_eq!(
            std::fs::read(t.join(&name)).ok(),
            a.get(&format!("/s/{name}")),
            "{name}"
        );
        let m = std::fs::metadata(t.join(&name)).unwrap();
        assert_eq!(
            m.modified().unwrap(),
            std::time::UNIX_EPOCH + Duration::from_secs(1_600_000_000 + u64::from(i)),
            "{name}"
        );
    }
    assert_eq!(std::fs::read_dir(&t).unwrap().count(), 40);
}

#[tokio::test]
async fn small_files_whose_source_thread_ended_are_copied_by_the_engine() {
    // The engine hands small files to the source's threads; a thread that
    // is gone (a closed connection's) runs none of them, and the engine
    // copies them itself.
    let a = Memory::new("a");
    let d = TempDir::new("home-gone");
    for i in 0..30u8 {
        a.put(&format!("/t/f{i:02}"), &data(5_000 + usize::from(i), i), 0);
    }
    a.set_faults(on_own_thread(Faults {
        home_gone: true,
        ..Faults::default()
    }));
    let o = CopyOptions {
        recursive: true,
        ..opts()
    };
    let (r, events) = run(Transfer::between(vec![at(&a, "/t")], d.at("t"), o)).await;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(r.files.len(), 30);
    for i in 0..30u8 {
        let got = std::fs::read(d.0.join(format!("t/f{i:02}"))).unwrap();
        assert_eq!(got, data(5_000 + usize::from(i), i), "f{i:02}");
    }
    let done = events
        .iter()
        .filter(|e| matches!(e, Event::FileDone(_)))
        .count();
    assert_eq!(done, 30, "one report a file");
}

#[tokio::test]
async fn small_files_from_two_sources_with_threads_share_the_slots() {
    // Two source backends, each with a queue on its thread, and fewer
    // file slots than it would take to give each thread several: every
    // file arrives whole.
    let (a, b) = (Memory::new("a"), Memory::new("b"));
    let d = TempDir::new("two-homes");
    for i in 0..50u8 {
        a.put(&format!("/x/f{i:02}"), &data(3_000, i), 0);
        b.put(&format!("/y/g{i:02}"), &data(4_000, i), 0);
    }
    a.set_faults(on_own_thread(Faults::default()));
    b.set_faults(on_own_thread(Faults::default()));
    std::fs::create_dir(d.0.join("t")).unwrap();
    let o = CopyOptions {
        recursive: true,
        parallel: Some(1),
        ..opts()
    };
    let (r, _) = run(Transfer::between(
        vec![at(&a, "/x"), at(&b, "/y")],
        d.at("t"),
        o,
    ))
    .await;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(r.files.len(), 100);
    for i in 0..50u8 {
        let x = std::fs::read(d.0.join(format!("t/x/f{i:02}"))).unwrap();
        assert_eq!(x, data(3_000, i), "f{i:02}");
        let y = std::fs::read(d.0.join(format!("t/y/g{i:02}"))).unwrap();
        assert_eq!(y, data(4_000, i), "g{i:02}");
    }
}

#[tokio::test]
async fn cancel_stops_small_files_on_the_source_thread() {
    // Small files copied on the source's thread: a cancel ends the run
    // promptly, every file is reported once, and every file under a
    // final name is whole.
    let a = Memory::new("a");
    let d = TempDir::new("home-cancel");
    for i in 0..200u8 {
        a.put(&format!("/t/f{i:03}"), &data(10_000, i), 0);
    }
    a.set_faults(on_own_thread(Faults {
        reorder: true,
        ..Faults::default()
    }));
    let o = CopyOptions {
        recursive: true,
        parallel: Some(4),
        ..opts()
    };
    let t0 = Instant::now();
    let r = cancel_after_first_file(Transfer::between(vec![at(&a, "/t")], d.at("t"), o)).await;
    assert!(t0.elapsed() < Duration::from_secs(10));
    assert_eq!(r.error.expect("cancelled").kind(), ErrorKind::Cancelled);
    assert_eq!(r.files.len(), 200, "one report a file");
    let copied = std::fs::read_dir(d.0.join("t")).unwrap();
    let mut whole = 0;
    for e in copied {
        let e = e.unwrap();
        let name = e.file_name().into_string().unwrap();
        assert!(!name.contains("ferry-part"), "{name} left");
        let i: u8 = name[1..].parse().unwrap();
        assert_eq!(std::fs::read(e.path()).unwrap(), data(10_000, i), "{name}");
        whole += 1;
    }
    assert!(whole < 200, "the cancel stopped nothing");
}

#[tokio::test]
async fn ranges_from_a_local_file_run_on_the_destination_thread() {
    // An upload from a local file goes whole to the destination's thread
    // (as an SSH connection's): ranges, every byte in place.
    let a = Memory::new("a");
    let d = TempDir::new("own-up");
    let body = data(9_000_000, 5);
    std::fs::write(d.0.join("big"), &body).unwrap();
    a.set_faults(on_own_thread(Faults::default()));
    let o = CopyOptions {
        streams: Some(4),
        ..opts()
    };
    let (r, events) = run(Transfer::between(vec![d.at("big")], at(&a, "/big"), o)).await;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(a.get("/big").as_deref(), Some(&body[..]));
    assert!(parts(&a).is_empty(), "{:?}", parts(&a));
    assert!(last_progress(&events) <= body.len() as u64);
}

#[tokio::test]
async fn a_full_disk_on_the_destination_thread_keeps_the_old_file() {
    let a = Memory::new("a");
    let d = TempDir::new("own-full");
    a.put("/f", b"old", 0);
    std::fs::write(d.0.join("f"), data(2_000_000, 6)).unwrap();
    a.set_faults(on_own_thread(Faults {
        capacity: Some(1_000_000),
        ..Faults::default()
    }));
    let (r, _) = run(Transfer::between(vec![d.at("f")], at(&a, "/f"), opts())).await;
    let e = r.error.expect("a full disk must fail");
    assert!(e.to_string().contains("no space"), "{e}");
    assert_eq!(a.get("/f").as_deref(), Some(&b"old"[..]));
}

#[tokio::test]
async fn cancel_stops_an_upload_on_the_destination_thread() {
    let a = Memory::new("a");
    let d = TempDir::new("own-upcancel");
    std::fs::create_dir(d.0.join("d")).unwrap();
    for i in 0..20 {
        std::fs::write(d.0.join(format!("d/f{i:02}")), data(400_000, i)).unwrap();
    }
    a.set_faults(on_own_thread(Faults::default()));
    let o = CopyOptions {
        recursive: true,
        parallel: Some(2),
        ..opts()
    };
    let t0 = Instant::now();
    let r = cancel_after_first_file(Transfer::between(vec![d.at("d")], at(&a, "/e"), o)).await;
    assert!(t0.elapsed() < Duration::from_secs(10));
    assert_eq!(r.error.expect("cancelled").kind(), ErrorKind::Cancelled);
    // Every file under a final name is complete.
    for i in 0..20u8 {
        if let Some(got) = a.get(&format!("/e/f{i:02}")) {
            assert_eq!(got, data(400_000, i), "f{i:02}");
        }
    }
}

/// A source whose listing has no sizes (an HTML index): every file costs
/// one read, its size and time learned from that read, no stat a file.
fn unsized_tree(a: &Memory, faults: Faults) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    for (i, len) in [0usize, 1, 1000, 20_000, 262_144, 300_000, 3_000_000]
        .into_iter()
        .enumerate()
    {
        let p = format!("/t/d{}/f{i}.bin", i % 2);
        let body = data(len, i as u8);
        a.put(&p, &body, 1_600_000_000 + i as i64);
        files.push((p, body));
    }
    a.set_faults(Faults {
        listing_without_sizes: true,
        ..faults
    });
    files
}

fn counter(c: &std::sync::atomic::AtomicUsize) -> usize {
    c.load(std::sync::atomic::Ordering::Relaxed)
}

/// Bytes the source `m` has served so far.
fn bytes_read(m: &Memory) -> u64 {
    m.counters
        .bytes_read
        .load(std::sync::atomic::Ordering::Relaxed)
}

/// The last progress event's `bytes_total`.
fn last_total(events: &[Event]) -> u64 {
    events
        .iter()
        .rev()
        .find_map(|e| match e {
            Event::Progress { bytes_total, .. } => Some(*bytes_total),
            _ => None,
        })
        .unwrap_or(0)
}

#[tokio::test]
async fn a_listing_without_sizes_costs_one_read_a_file() {
    let (a, b) = (Memory::new("a"), Memory::new("b"));
    let files = unsized_tree(&a, Faults::default());
    let total: usize = files.iter().map(|(_, d)| d.len()).sum();
    let o = CopyOptions {
        recursive: true,
        preserve: true,
        // The 3 MB file would be split if its size were known first.
        split_min: 1_000_000,
        ..opts()
    };
    let (r, ev) = run(Transfer::between(vec![at(&a, "/t")], at(&b, "/c"), o)).await;
    assert!(r.error.is_none(), "{:?}", r.error);
    for (i, (p, body)) in files.iter().enumerate() {
        let d = p.replacen("/t/", "/c/", 1);
        assert_eq!(b.get(&d).as_deref(), Some(&body[..]), "{d}");
        // -p: the time the read said.
        assert_eq!(b.mtime(&d), Some(1_600_000_000 + i as i64), "{d}");
    }
    assert!(parts(&b).is_empty());
    // The plan's stat of the top, then one read a file and nothing else.
    assert_eq!(counter(&a.counters.stats), 1);
    assert_eq!(counter(&a.counters.reads), files.len());
    assert_eq!(r.bytes, total as u64);
    // The plan knew no size; the total grew as they were learned.
    assert!(matches!(ev.first(), Some(Event::Planned { bytes: 0, .. })));
    assert_eq!(last_total(&ev), total as u64);
    assert_eq!(last_progress(&ev), total as u64);
}

#[tokio::test]
async fn files_of_unknown_size_into_local_files_go_whole_to_the_source_thread() {
    // A listing without sizes from a source with a thread of its own
    // (an HTML index over HTTP): each file's one read is made on that
    // thread and written there, the big one too; every byte and time
    // right, no part file left.
    let a = Memory::new("a");
    let d = TempDir::new("own-unsized");
    let files = unsized_tree(&a, on_own_thread(Faults::default()));
    let o = CopyOptions {
        recursive: true,
        preserve: true,
        ..opts()
    };
    let (r, _) = run(Transfer::between(vec![at(&a, "/t")], d.at("c"), o)).await;
    assert!(r.error.is_none(), "{:?}", r.error);
    for (i, (p, body)) in files.iter().enumerate() {
        let local = d.0.join(p.replacen("/t/", "c/", 1));
        assert_eq!(
            std::fs::read(&local).ok().as_deref(),
            Some(&body[..]),
            "{p}"
        );
        let m = std::fs::metadata(&local).unwrap();
        assert_eq!(
            m.modified().unwrap(),
            std::time::UNIX_EPOCH + Duration::from_secs(1_600_000_000 + i as u64),
            "{p}"
        );
    }
    assert_eq!(counter(&a.counters.reads), files.len());
    for sub in ["c/d0", "c/d1"] {
        for e in std::fs::read_dir(d.0.join(sub)).unwrap() {
            let name = e.unwrap().file_name().into_string().unwrap();
            assert!(!name.contains("ferry-part"), "{name} left");
        }
    }
}

#[tokio::test]
async fn a_read_without_a_size_streams_to_its_end_and_retries() {
    let (a, b) = (Memory::new("a"), Memory::new("b"));
    // Nothing says the sizes (a compressed body), and the first read that
    // gets 100 kB in fails once.
    let files = unsized_tree(
        &a,
        Faults {
            read_without_size: true,
            fail_read_after: Some(100_000),
            transient_reads: 1,
            ..Faults::default()
        },
    );
    let total: usize = files.iter().map(|(_, d)| d.len()).sum();
    let o = CopyOptions {
        recursive: true,
        parallel: Some(1),
        ..opts()
    };
    let (r, ev) = run(Transfer::between(vec![at(&a, "/t")], at(&b, "/c"), o)).await;
    assert!(r.error.is_none(), "{:?}", r.error);
    for (p, body) in &files {
        let d = p.replacen("/t/", "/c/", 1);
        assert_eq!(b.get(&d).as_deref(), Some(&body[..]), "{d}");
    }
    assert!(parts(&b).is_empty());
    assert_eq!(counter(&a.counters.failed_reads), 1);
    // One read a file, one more for the retry; no stat a file.
    assert_eq!(counter(&a.counters.reads), files.len() + 1);
    assert_eq!(counter(&a.counters.stats), 1);
    // Bytes of the failed attempt were taken back from both counts.
    assert_eq!(r.bytes, total as u64);
    assert_eq!(last_total(&ev), total as u64);
    assert_eq!(last_progress(&ev), total as u64);
}

#[tokio::test]
async fn a_read_shorter_than_its_size_fails_and_leaves_no_file() {
    let (a, b) = (Memory::new("a"), Memory::new("b"));
    a.put("/t/small", &data(1000, 1), 0);
    a.put("/t/big", &data(300_000, 2), 0);
    a.set_faults(Faults {
        listing_without_sizes: true,
        short_reads: Some(500),
        ..Faults::default()
    });
    let o = CopyOptions {
        recursive: true,
        retries: 1,
        ..opts()
    };
    let (r, _) = run(Transfer::between(vec![at(&a, "/t")], at(&b, "/c"), o)).await;
    assert!(r.error.is_some());
    assert_eq!(r.files.iter().filter(|f| f.error.is_some()).count(), 2);
    assert_eq!(b.get("/c/small"), None);
    assert_eq!(b.get("/c/big"), None);
}

#[tokio::test]
async fn a_file_listed_without_a_size_resumes() {
    // Cut after 2 MB: the part and its in-order record (the read's
    // version) stay; --resume stats the file (a part is there) and
    // sends only the rest.
    let (a, b) = (Memory::new("a"), Memory::new("b"));
    let body = data(3_000_000, 5);
    a.put("/t/f", &body, 0);
    b.mkdir("/c");
    a.set_faults(Faults {
        listing_without_sizes: true,
        fail_read_after: Some(2_000_000),
        ..Faults::default()
    });
    let o = CopyOptions {
        recursive: true,
        retries: 1,
        ..opts()
    };
    let (r, _) = run(Transfer::between(
        vec![at(&a, "/t")],
        at(&b, "/c"),
        o.clone(),
    ))
    .await;
    assert!(r.error.is_some());
    assert_eq!(b.get("/c/t/f"), None);
    assert_eq!(
        b.get("/c/t/.f.ferry-part").map(|p| p.len()),
        Some(2_000_000)
    );
    assert!(b.get("/c/t/.f.ferry-resume").is_some());

    a.set_faults(Faults {
        listing_without_sizes: true,
        ..Faults::default()
    });
    let read_before = bytes_read(&a);
    let o = CopyOptions { resume: true, ..o };
    let (r, _) = run(Transfer::between(vec![at(&a, "/t")], at(&b, "/c"), o)).await;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(b.get("/c/t/f").as_deref(), Some(&body[..]));
    let read = bytes_read(&a) - read_before;
    assert_eq!(read, 1_000_000 + 64 * 1024);
    assert!(parts(&b).is_empty());
}

#[tokio::test]
async fn many_named_sources_with_one_missing() {
    // Stat'ed 16 at a time while planning: every one still copied to its
    // name, the missing one reported once, first.
    let (a, b) = (Memory::new("a"), Memory::new("b"));
    b.mkdir("/d");
    let mut srcs = Vec::new();
    for i in 0..40 {
        let p = format!("/s/f{i:02}");
        if i != 17 {
            a.put(&p, &data(100 + i, i as u8), 0);
        }
        srcs.push(at(&a, &p));
    }
    let (r, _) = run(Transfer::between(srcs, at(&b, "/d"), opts())).await;
    let failed: Vec<_> = r.files.iter().filter(|f| f.error.is_some()).collect();
    assert_eq!(failed.len(), 1);
    assert!(r.files[0].source.ends_with("/s/f17"), "{:?}", r.files[0]);
    for i in (0..40).filter(|&i| i != 17) {
        assert_eq!(b.get(&format!("/d/f{i:02}")), a.get(&format!("/s/f{i:02}")));
    }
    assert_eq!(b.get("/d/f17"), None);
    assert_eq!(counter(&a.counters.stats), 40);
}

/// A source on a long path (a 20 ms handshake) whose reads each move at
/// most 4 MiB/s, as connections held by their windows or losses do: the
/// big file starts on the default 4 ranges and is widened as measured.
#[tokio::test]
async fn a_big_file_on_a_long_path_is_widened_as_measured() {
    let (a, b) = (Memory::new("a"), Memory::new("b"));
    let body = data(48 << 20, 3);
    a.put("/big", &body, 0);
    a.set_faults(Faults {
        round_trip: Some(Duration::from_millis(20)),
        read_rate: Some(4 << 20),
        ..Faults::default()
    });
    let (r, _) = run(Transfer::between(
        vec![at(&a, "/big")],
        at(&b, "/big.copy"),
        opts(),
    ))
    .await;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(b.get("/big.copy").as_deref(), Some(&body[..]));
    let widened = a
        .counters
        .widened
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(widened >= 8, "asked to widen to {widened}");
    // Six pieces of 8 MiB, each read once: widening moves no byte twice.
    assert_eq!(
        a.counters.reads.load(std::sync::atomic::Ordering::Relaxed),
        6
    );
    assert!(parts(&b).is_empty(), "{:?}", parts(&b));
}

/// A source whose every ranged read is a connection of its own (FTP): on
/// a long path the big file is widened, but cut into one piece a range,
/// not finer; `--streams 2` there gives two pieces, and so does a widening
/// held to `--max-streams 2`.
#[tokio::test]
async fn ranges_that_open_connections_are_not_cut_finer() {
    for (streams, max_streams, pieces) in [(None, 16, 4), (Some(2), 16, 2), (None, 2, 2)] {
        let (a, b) = (Memory::new("a"), Memory::new("b"));
        let body = data(48 << 20, 5);
        a.put("/big", &body, 0);
        a.set_faults(Faults {
            round_trip: Some(Duration::from_millis(20)),
            range_per_connection: true,
            ..Faults::default()
        });
        let o = CopyOptions {
            streams,
            max_streams,
            ..opts()
        };
        let (r, _) = run(Transfer::between(
            vec![at(&a, "/big")],
            at(&b, "/big.copy"),
            o,
        ))
        .await;
        assert!(r.error.is_none(), "{:?}", r.error);
        assert_eq!(b.get("/big.copy").as_deref(), Some(&body[..]));
        assert_eq!(
            a.counters.reads.load(std::sync::atomic::Ordering::Relaxed),
            pieces,
            "--streams {streams:?} --max-streams {max_streams}"
        );
        assert!(parts(&b).is_empty(), "{:?}", parts(&b));
    }
}

/// A short path, `--streams`, or `--max-streams 1`: no widening; but
/// `--streams` on a long path is cut finer, for connections that join late.
#[tokio::test]
async fn no_widening_on_a_short_path_or_when_the_user_says() {
    for (rtt, o) in [
        (1, opts()),
        (
            20,
            CopyOptions {
                max_streams: 1,
                ..opts()
            },
        ),
        (
            20,
            CopyOptions {
                streams: Some(2),
                ..opts()
            },
        ),
        (
            1,
            CopyOptions {
                streams: Some(2),
                ..opts()
            },
        ),
    ] {
        let streams = o.streams;
        let (a, b) = (Memory::new("a"), Memory::new("b"));
        let body = data(40 << 20, 5);
        a.put("/big", &body, 0);
        a.set_faults(Faults {
            round_trip: Some(Duration::from_millis(rtt)),
            ..Faults::default()
        });
        let (r, _) = run(Transfer::between(vec![at(&a, "/big")], at(&b, "/c"), o)).await;
        assert!(r.error.is_none(), "{:?}", r.error);
        assert_eq!(b.get("/c").as_deref(), Some(&body[..]));
        assert_eq!(
            a.counters
                .widened
                .load(std::sync::atomic::Ordering::Relaxed),
            0
        );
        // `--streams 2` on the long path: pieces of 8 MiB (5), so that
        // connections joining later get some; elsewhere one range each.
        if streams.is_some() {
            let reads = a.counters.reads.load(std::sync::atomic::Ordering::Relaxed);
            assert_eq!(reads, if rtt == 20 { 5 } else { 2 }, "rtt {rtt} ms");
        }
    }
}

/// A panic inside a backend (a bug, or a log writer whose stderr was
/// closed) ends the transfer with an internal error: the event stream
/// ends and `wait` returns, in the async API and the blocking one. The
/// progress ticker once kept the stream open for good.
#[tokio::test]
async fn a_panic_in_a_backend_ends_the_transfer() {
    use ferry_engine::backend::memory::Hook;
    for (size, streams) in [(10_000, None), (6 << 20, Some(3))] {
        let (a, b) = (Memory::new("a"), Memory::new("b"));
        a.put("/f", &data(size, 1), 0);
        a.set_faults(Faults {
            hook: Some(Hook {
                after: 1,
                reads: true,
                run: Arc::new(|| panic!("injected")),
            }),
            ..Faults::default()
        });
        let o = CopyOptions { streams, ..opts() };
        let t = Transfer::between(vec![at(&a, "/f")], at(&b, "/g"), o);
        let (r, _) = tokio::time::timeout(Duration::from_secs(10), run(t))
            .await
            .expect("a panic must not leave the transfer hanging");
        let e = r.error.expect("a panic must fail the transfer");
        assert!(e.to_string().contains("internal"), "{e}");
        assert_eq!(b.get("/g"), None);
    }
}

#[test]
fn a_panic_in_a_backend_ends_a_blocking_transfer() {
    use ferry_engine::backend::memory::Hook;
    let (a, b) = (Memory::new("a"), Memory::new("b"));
    a.put("/f", &data(10_000, 1), 0);
    a.set_faults(Faults {
        hook: Some(Hook {
            after: 1,
            reads: true,
            run: Arc::new(|| panic!("injected")),
        }),
        ..Faults::default()
    });
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let t = Transfer::between(vec![at(&a, "/f")], at(&b, "/g"), opts());
        let _ = tx.send(ferry_engine::run_blocking(t, |_| true));
    });
    let r = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("a panic must not leave run_blocking hanging");
    assert!(r.error.is_some());
}

/// A source that makes local files whole in one job on a thread of its
/// own (as FTP's `get_local`): files of every size up to 16 MiB, times
/// kept with -p, no part file left; a lost connection sends the file again
/// from its start and counts its bytes once; a stall fails the file and
/// leaves its part, never the final name.
#[tokio::test]
async fn whole_files_made_in_one_job_on_the_source_thread() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().to_string_lossy().into_owned();
    let local = |p: &str| BackendPath {
        backend: Arc::new(ferry_engine::backend::local::Local),
        path: format!("{root}{p}"),
    };
    let one_job = |f: Faults| Faults { one_job: true, ..f };
    let a = Memory::new("a");
    let sizes = [10_000, 1_000_000, 3_000_000];
    for (i, n) in sizes.iter().enumerate() {
        a.put(
            &format!("/d/f{i}"),
            &data(*n, i as u8),
            1_600_000_000 + i as i64,
        );
    }
    a.set_faults(one_job(Faults::default()));
    let o = CopyOptions {
        recursive: true,
        preserve: true,
        ..opts()
    };
    let (r, _) = run(Transfer::between(
        vec![at(&a, "/d")],
        local("/out"),
        o.clone(),
    ))
    .await;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(r.bytes, sizes.iter().sum::<usize>() as u64);
    for (i, n) in sizes.iter().enumerate() {
        let p = dir.path().join(format!("out/f{i}"));
        assert_eq!(std::fs::read(&p).unwrap(), data(*n, i as u8));
        let m = std::fs::metadata(&p).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!(m.mtime(), 1_600_000_000 + i as i64);
    }
    let made = &a.counters.made_local;
    assert_eq!(made.load(std::sync::atomic::Ordering::Relaxed), 3);
    let names: Vec<_> = std::fs::read_dir(dir.path().join("out"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 3, "{names:?}");

    // A connection lost at 500 kB, once: the file again from its start.
    let body = data(2_000_000, 9);
    a.put("/g", &body, 0);
    a.set_faults(one_job(Faults {
        fail_read_after: Some(500_000),
        transient_reads: 1,
        ..Faults::default()
    }));
    let o = CopyOptions {
        retries: 2,
        ..opts()
    };
    let (r, events) = run(Transfer::between(vec![at(&a, "/g")], local("/g"), o)).await;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(std::fs::read(dir.path().join("g")).unwrap(), body);
    assert_eq!(r.bytes, body.len() as u64);
    assert_eq!(last_progress(&events), body.len() as u64);

    // A stall: the file fails within its timeout; the final name is not
    // made, the old file there is kept.
    std::fs::write(dir.path().join("h"), b"old").unwrap();
    a.put("/h", &body, 0);
    a.set_faults(one_job(Faults {
        stall_after: Some(700_000),
        ..Faults::default()
    }));
    let o = CopyOptions {
        timeout: Duration::from_millis(300),
        retries: 0,
        ..opts()
    };
    let (r, _) = run(Transfer::between(vec![at(&a, "/h")], local("/h"), o)).await;
    let e = r.error.expect("a stall must fail");
    assert!(e.to_string().contains("stalled"), "{e}");
    assert_eq!(std::fs::read(dir.path().join("h")).unwrap(), b"old");
}

/// A copy cancelled while a file is made in one job: the job stops, its
/// part is not renamed, the final name is not made.
#[tokio::test]
async fn a_cancel_stops_a_one_job_file_before_its_rename() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = Memory::new("a");
    a.put("/f", &data(8_000_000, 3), 0);
    a.set_faults(Faults {
        one_job: true,
        stall_after: Some(3_000_000),
        ..Faults::default()
    });
    let t = Transfer::between(
        vec![at(&a, "/f")],
        BackendPath {
            backend: Arc::new(ferry_engine::backend::local::Local),
            path: dir.path().join("f").to_string_lossy().into_owned(),
        },
        CopyOptions {
            timeout: Duration::from_secs(30),
            ..opts()
        },
    );
    let mut h = t.start();
    let c = h.canceller();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        c.cancel();
    });
    while h.next_event().await.is_some() {}
    let r = h.wait().await;
    assert_eq!(r.error.expect("cancelled").kind(), ErrorKind::Cancelled);
    assert!(!dir.path().join("f").exists());
    let made = a
        .counters
        .made_local
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(made, 1);
}

/// A lost connection that fails a file into a local one: made in one
/// job, nothing of it is kept (an unnamed file until whole), and the
/// message says to copy it again from its start, never that a part file
/// is kept; copied in ranges into a part file, it says --resume
/// continues that part.
#[tokio::test]
async fn only_a_kept_part_file_is_offered_to_resume() {
    let dir = tempfile::tempdir().expect("tempdir");
    let local = |p: &str| BackendPath {
        backend: Arc::new(ferry_engine::backend::local::Local),
        path: dir.path().join(p).to_string_lossy().into_owned(),
    };
    let a = Memory::new("a");
    a.put("/f", &data(2_000_000, 4), 0);
    let cut = Faults {
        fail_read_after: Some(500_000),
        ..Faults::default()
    };
    let once = CopyOptions {
        retries: 1,
        ..opts()
    };

    a.set_faults(Faults {
        one_job: true,
        ..cut.clone()
    });
    let (r, _) = run(Transfer::between(
        vec![at(&a, "/f")],
        local("one"),
        once.clone(),
    ))
    .await;
    let e = r.error.expect("a lost connection must fail").to_string();
    assert!(
        e.ends_with("; run the same command again to copy it from its start"),
        "{e}"
    );
    assert!(!e.contains("part file is kept"), "{e}");
    let made = &a.counters.made_local;
    assert_eq!(made.load(std::sync::atomic::Ordering::Relaxed), 1);

    a.set_faults(cut);
    let split = CopyOptions {
        split_min: 1_000_000,
        streams: Some(4),
        ..once
    };
    let (r, _) = run(Transfer::between(vec![at(&a, "/f")], local("split"), split)).await;
    let e = r.error.expect("a lost connection must fail").to_string();
    assert!(
        e.ends_with("; the part file is kept: run the same command with --resume to continue"),
        "{e}"
    );
    assert!(dir.path().join(".split.ferry-part").exists());
    assert_eq!(made.load(std::sync::atomic::Ordering::Relaxed), 1);
}

/// Local files into a store that takes each whole file in one job on a
/// thread of its own (as FTP's `put_from_local`): sent, renamed, counted;
/// a source rewritten in place (same size, new time) while it is sent is
/// found by the job before its rename: the file fails "changed during the
/// copy", nothing under its name, no part left.
#[tokio::test]
async fn whole_files_sent_in_one_job_from_local_files() {
    use ferry_engine::backend::memory::Hook;
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("d");
    std::fs::create_dir(&src).unwrap();
    let sizes = [20_000, 1_000_000, 3_000_000];
    for (i, n) in sizes.iter().enumerate() {
        std::fs::write(src.join(format!("f{i}")), data(*n, i as u8)).unwrap();
    }
    let local = |p: &std::path::Path| BackendPath {
        backend: Arc::new(ferry_engine::backend::local::Local),
        path: p.to_string_lossy().into_owned(),
    };
    let b = Memory::new("b");
    b.set_faults(Faults {
        one_job: true,
        ..Faults::default()
    });
    let o = CopyOptions {
        recursive: true,
        ..opts()
    };
    let (r, _) = run(Transfer::between(vec![local(&src)], at(&b, "/up"), o)).await;
    assert!(r.error.is_none(), "{:?}", r.error);
    for (i, n) in sizes.iter().enumerate() {
        assert_eq!(b.get(&format!("/up/f{i}")), Some(data(*n, i as u8)));
    }
    let sent = b
        .counters
        .sent_local
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(sent, 3);
    assert_eq!(b.files().len(), 3, "{:?}", b.files());

    // Rewritten in place once 500 kB are stored.
    let f = src.join("f1");
    let again = f.clone();
    b.set_faults(Faults {
        one_job: true,
        hook: Some(Hook {
            after: 500_000,
            reads: false,
            run: Arc::new(move || {
                let body: Vec<u8> = data(1_000_000, 1).iter().map(|x| x ^ 0x5a).collect();
                std::fs::write(&again, body).unwrap();
                let t = std::time::SystemTime::now() + Duration::from_secs(100);
                let h = std::fs::File::options().write(true).open(&again).unwrap();
                h.set_modified(t).unwrap();
            }),
        }),
        ..Faults::default()
    });
    let (r, _) = run(Transfer::between(vec![local(&f)], at(&b, "/g"), opts())).await;
    let e = r.error.expect("a rewritten source must fail");
    assert!(e.to_string().contains("changed during the copy"), "{e}");
    assert_eq!(b.get("/g"), None);
    assert!(
        b.files().iter().all(|p| !p.contains("/.g.")),
        "{:?}",
        b.files()
    );
}
