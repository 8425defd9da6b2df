//! Every fuzz target's check replayed on its committed seeds
//! (`fuzz/seeds/TARGET/`) and on the corpus earlier fuzz runs left in
//! `fuzz/corpus/TARGET/` (not committed: only on machines that fuzzed),
//! on the stable toolchain, as part of `cargo test --workspace`. A crash
//! found by fuzzing is fixed, then its input is committed under
//! `fuzz/seeds/TARGET/` (named after what broke), so it is replayed here
//! from then on; `fuzz/artifacts/` is not read (it holds crashes not yet
//! fixed, which would fail every local run until they are).
//!
//! A failure names the input file and the panic; every input of the
//! target is run, and all failing files are listed.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

/// The `fuzz/` directory of this repository.
fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// The files of `dir`, sorted; none when it does not exist.
fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    v.sort();
    v
}

fn panic_text(e: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = e.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = e.downcast_ref::<String>() {
        s.clone()
    } else {
        "(panic with a non-text payload)".to_string()
    }
}

/// Runs `check` on every seed and corpus file of `target`.
fn replay(target: &str, check: fn(&[u8])) {
    let fuzz = fuzz_dir();
    let seeds = files(&fuzz.join("seeds").join(target));
    assert!(
        !seeds.is_empty(),
        "{target}: no seeds in {}",
        fuzz.join("seeds").join(target).display()
    );
    let corpus = files(&fuzz.join("corpus").join(target));
    let mut failed = Vec::new();
    for path in seeds.iter().chain(&corpus) {
        let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if let Err(e) = catch_unwind(AssertUnwindSafe(|| check(&data))) {
            failed.push(format!("{}: {}", path.display(), panic_text(e.as_ref())));
        }
    }
    // Each target is one test, so nothing else uses its scratch files now.
    match target {
        "known_hosts" => ferry_fuzz_checks::known_hosts::remove_scratch(),
        "serve_confine" => ferry_fuzz_checks::serve_confine::remove_scratch(),
        _ => {}
    }
    eprintln!(
        "{target}: {} seeds, {} corpus inputs, {} failed",
        seeds.len(),
        corpus.len(),
        failed.len()
    );
    assert!(
        failed.is_empty(),
        "{target}: {} input(s) fail its check (replay one with `cargo +nightly fuzz run {target} FILE` in fuzz/):\n{}",
        failed.len(),
        failed.join("\n")
    );
}

macro_rules! replay_tests {
    ($($target:ident),* $(,)?) => {
        $(
            #[test]
            fn $target() {
                replay(stringify!($target), ferry_fuzz_checks::$target);
            }
        )*

        /// The list above is every target the library has and every
        /// one in fuzz/fuzz_targets/.
        #[test]
        fn every_target_is_replayed() {
            let here = [$(stringify!($target)),*];
            let lib: Vec<&str> = ferry_fuzz_checks::TARGETS.iter().map(|t| t.0).collect();
            assert_eq!(here.as_slice(), lib.as_slice());
            let mut fuzz: Vec<String> = files(&fuzz_dir().join("fuzz_targets"))
                .iter()
                .filter_map(|p| Some(p.file_stem()?.to_str()?.to_string()))
                .collect();
            fuzz.sort();
            assert_eq!(here.as_slice(), fuzz.as_slice());
        }
    };
}

replay_tests!(
    exec_hash,
    ftp_control,
    ftp_listing,
    http_content_range,
    http_decode,
    http_headers,
    http_listing,
    known_hosts,
    location_url,
    s3_xml,
    serve_confine,
    serve_http_headers,
    sftp_decode,
    ssh_config,
    ssh_zstd,
    sync_filter,
);
