//! `sync` and `check` against the in-memory backend: what is copied,
//! compared and deleted, and what must never be deleted.
#![allow(clippy::unwrap_used, clippy::expect_used)]
use std::sync::Arc;
use std::time::Duration;

use ferry_engine::backend::memory::{Faults, Memory};
use ferry_engine::filter::RuleKind;
use ferry_engine::sync::{Compare, Sync, SyncOptions, SyncReport};
use ferry_engine::{BackendPath, Event, Verdict};

fn at(m: &Memory, p: &str) -> BackendPath {
    BackendPath {
        backend: Arc::new(m.clone()),
        path: p.into(),
    }
}

fn opts() -> SyncOptions {
    let mut o = SyncOptions::default();
    o.copy.timeout = Duration::from_secs(5);
    o
}

async fn sync(a: &Memory, b: &Memory, o: SyncOptions) -> (SyncReport, Vec<Event>) {
    let mut h = Sync::between(at(a, "/src"), at(b, "/dst"), o).start();
    let mut ev = Vec::new();
    while let Some(e) = h.next_event().await {
        ev.push(e);
    }
    (h.wait().await, ev)
}

/// A tree: /src/a.txt, /src/d/b.bin, /src/d/e/c.bin, /src/empty/.
fn tree() -> Memory {
    let a = Memory::new("a");
    a.mkdir("/src");
    a.put("/src/a.txt", b"alpha", 1_700_000_000);
    a.put("/src/d/b.bin", &[7u8; 100_000], 1_700_000_100);
    a.put("/src/d/e/c.bin", b"gamma", 1_700_000_200);
    a.mkdir("/src/empty");
    a
}

#[tokio::test]
async fn first_run_copies_all_and_second_copies_nothing() {
    let (a, b) = (tree(), Memory::new("b"));
    let (r, _) = sync(&a, &b, opts()).await;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(r.copied, 3);
    assert_eq!(r.bytes, 100_010);
    assert_eq!(b.get("/dst/d/e/c.bin").as_deref(), Some(&b"gamma"[..]));
    assert_eq!(b.mtime("/dst/d/b.bin"), Some(1_700_000_100));
    assert!(b.files().iter().all(|f| !f.contains("ferry-part")));
    let (r2, ev) = sync(&a, &b, opts()).await;
    assert!(r2.error.is_none());
    assert_eq!((r2.copied, r2.same, r2.checked), (0, 3, 3));
    assert!(!ev.iter().any(|e| matches!(e, Event::FileStarted { .. })));
}

#[tokio::test]
async fn same_size_new_content_old_time_needs_checksum() {
    let (a, b) = (tree(), Memory::new("b"));
    sync(&a, &b, opts()).await;
    // Same size, same time, other bytes.
    a.put("/src/a.txt", b"ALPHA", 1_700_000_000);
    let (r, _) = sync(&a, &b, opts()).await;
    assert_eq!(r.copied, 0, "size and time are equal: not found by default");
    assert_eq!(b.get("/dst/a.txt").as_deref(), Some(&b"alpha"[..]));
    let mut o = opts();
    o.compare = Compare::Checksum;
    let (r, ev) = sync(&a, &b, o).await;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!((r.copied, r.differ), (1, 1));
    assert_eq!(
        r.hashed_by_reading, 0,
        "both sides hash where the bytes are"
    );
    assert_eq!(b.get("/dst/a.txt").as_deref(), Some(&b"ALPHA"[..]));
    assert!(ev.iter().any(|e| matches!(e,
        Event::Compared { path, verdict: Verdict::Differs("hash") } if path == "a.txt")));
}

#[tokio::test]
async fn delete_removes_only_what_the_source_lacks() {
    let (a, b) = (tree(), Memory::new("b"));
    sync(&a, &b, opts()).await;
    b.put("/dst/old.txt", b"x", 1);
    b.put("/dst/gone/deep/f", b"y", 1);
    b.put("/dst/.a.txt.ferry-part", b"partial", 1);
    b.put("/dst/keep.log", b"z", 1);
    let mut o = opts();
    o.delete = true;
    o.filter.push(RuleKind::Exclude, "*.log").unwrap();
    let (r, ev) = sync(&a, &b, o).await;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(b.get("/dst/old.txt"), None);
    assert_eq!(b.get("/dst/gone/deep/f"), None);
    assert!(b.get("/dst/keep.log").is_some(), "excluded: protected");
    assert!(
        b.get("/dst/.a.txt.ferry-part").is_some(),
        "part files are not extras"
    );
    assert_eq!(b.get("/dst/a.txt").as_deref(), Some(&b"alpha"[..]));
    // 2 files and 2 directories.
    assert_eq!(r.deleted, 4);
    assert!(ev
        .iter()
        .any(|e| matches!(e, Event::Deleted { path, dry_run: false } if path == "old.txt")));
}

#[tokio::test]
async fn no_delete_after_a_failed_listing() {
    let (a, b) = (tree(), Memory::new("b"));
    sync(&a, &b, opts()).await;
    b.put("/dst/old.txt", b"x", 1);
    a.set_faults(Faults {
        refuse_list: Some(b"/src/d".to_vec()),
        ..Faults::default()
    });
    let mut o = opts();
    o.delete = true;
    let (r, ev) = sync(&a, &b, o).await;
    assert!(r.error.is_some());
    assert!(r.error.as_ref().unwrap().to_string().contains("/src/d"));
    assert_eq!(r.deleted, 0);
    assert!(
        b.get("/dst/old.txt").is_some(),
        "nothing deleted after an error"
    );
    assert!(b.get("/dst/d/b.bin").is_some());
    assert!(ev
        .iter()
        .any(|e| matches!(e, Event::Warning(w) if w.contains("not deleting anything"))));
}

#[tokio::test]
async fn max_delete_is_a_brake() {
    let (a, b) = (tree(), Memory::new("b"));
    sync(&a, &b, opts()).await;
    for i in 0..5 {
        b.put(&format!("/dst/x{i}"), b"x", 1);
    }
    let mut o = opts();
    o.delete = true;
    o.max_delete = Some(3);
    let (r, _) = sync(&a, &b, o).await;
    let e = r.error.expect("refused");
    assert!(e.to_string().contains("--max-delete 3"), "{e}");
    assert_eq!(b.files().iter().filter(|f| f.contains("/x")).count(), 5);
}

#[tokio::test]
async fn dry_run_changes_nothing() {
    let (a, b) = (tree(), Memory::new("b"));
    b.put("/dst/old.txt", b"x", 1);
    let mut o = opts();
    o.delete = true;
    o.dry_run = true;
    let before = b.files();
    let (r, ev) = sync(&a, &b, o).await;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(b.files(), before);
    assert_eq!(r.copied, 0);
    assert_eq!(r.only_in_source, 3);
    assert_eq!(r.deleted, 1);
    assert!(ev
        .iter()
        .any(|e| matches!(e, Event::Deleted { dry_run: true, .. })));
    assert!(ev.iter().any(|e| matches!(e,
        Event::Compared { path, verdict: Verdict::OnlyInSource } if path == "d/e/c.bin")));
}

#[tokio::test]
async fn filters_keep_files_out() {
    let (a, b) = (tree(), Memory::new("b"));
    let mut o = opts();
    o.filter.push(RuleKind::Exclude, "/d/e/").unwrap();
    o.filter.push(RuleKind::Exclude, "*.txt").unwrap();
    let (r, _) = sync(&a, &b, o).await;
    assert!(r.error.is_none());
    assert_eq!(r.copied, 1);
    assert!(b.get("/dst/d/b.bin").is_some());
    assert!(b.get("/dst/a.txt").is_none());
    assert!(b.get("/dst/d/e/c.bin").is_none());
}

#[tokio::test]
async fn check_reports_each_kind_and_changes_nothing() {
    let (a, b) = (tree(), Memory::new("b"));
    sync(&a, &b, opts()).await;
    b.put("/dst/extra", b"x", 1);
    b.put("/dst/d/b.bin", &[7u8; 99_999], 1_700_000_100);
    a.put("/src/new", b"n", 1);
    let mut o = opts();
    o.check_only = true;
    let before = b.files();
    let (r, _) = sync(&a, &b, o).await;
    assert!(!r.trees_match());
    assert_eq!((r.only_in_source, r.only_in_dest, r.differ), (1, 1, 1));
    assert_eq!(b.files(), before);
}

#[tokio::test]
async fn update_keeps_newer_destination_files() {
    let (a, b) = (tree(), Memory::new("b"));
    sync(&a, &b, opts()).await;
    b.put("/dst/a.txt", b"newer!", 1_800_000_000);
    let mut o = opts();
    o.update = true;
    let (r, _) = sync(&a, &b, o).await;
    assert!(r.error.is_none());
    assert_eq!(r.copied, 0);
    assert_eq!(b.get("/dst/a.txt").as_deref(), Some(&b"newer!"[..]));
}

#[tokio::test]
async fn a_file_where_a_directory_is_reports_and_deletes_nothing() {
    let (a, b) = (tree(), Memory::new("b"));
    b.put("/dst/a.txt/inner", b"x", 1);
    b.put("/dst/old", b"x", 1);
    let mut o = opts();
    o.delete = true;
    let (r, _) = sync(&a, &b, o).await;
    let e = r.error.expect("a type conflict is an error");
    assert!(e.to_string().contains("/dst/a.txt"), "{e}");
    assert!(b.get("/dst/old").is_some());
    assert!(b.get("/dst/d/b.bin").is_some(), "the rest was copied");
}

#[tokio::test]
async fn a_part_file_in_the_listing_is_continued_and_none_is_not_looked_for() {
    // An interrupted run left the first half of d/b.bin as its part
    // file: the listing shows it, so that copy continues it. a.txt has
    // no part file: its copy starts afresh without looking for one.
    let (a, b) = (tree(), Memory::new("b"));
    b.put("/dst/d/.b.bin.ferry-part", &[7u8; 50_000], 1_700_000_100);
    let (r, ev) = sync(&a, &b, opts()).await;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(r.copied, 3);
    let resumed: Vec<_> = ev
        .iter()
        .filter_map(|e| match e {
            Event::Warning(w) if w.contains("resuming") => Some(w.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(resumed.len(), 1, "{resumed:?}");
    assert!(resumed[0].contains("b.bin"), "{resumed:?}");
    assert!(resumed[0].contains("50000 of 100000"), "{resumed:?}");
    assert_eq!(b.get("/dst/d/b.bin").as_deref(), Some(&[7u8; 100_000][..]));
    assert_eq!(r.bytes, 50_010, "only the half the part lacked moved");
    assert!(b.files().iter().all(|f| !f.contains("ferry-part")));
}

#[tokio::test]
async fn copies_into_a_fresh_destination_ask_nothing_per_file() {
    // The listings said there is no part file to continue: no copy asks
    // the destination for one (a STAT per file over SFTP, before).
    let (a, b) = (tree(), Memory::new("b"));
    let (r, _) = sync(&a, &b, opts()).await;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(r.copied, 3);
    let stats = b.counters.stats.load(std::sync::atomic::Ordering::Relaxed);
    assert!(stats < 3, "{stats} stats of the destination for 3 files");
}
