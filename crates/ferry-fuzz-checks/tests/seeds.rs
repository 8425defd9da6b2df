//! Every fuzz target's check replayed on its committed seeds
//! (`fuzz/seeds/TARGET/`) and on the corpus earlier fuzz runs left in
//! `fuzz/corpus/TARGET/` (not committed: only on machines that fuzzed),
//! on the stable toolchain, as part of `cargo test --workspace`. A crash
//! found by fuzzing is fixed, then its input is committed under
//! `fuzz/seeds/TARGET/` (named after what broke), so it is replayed here
//! from then on; `fuzz/artifacts/` is not read (it holds crashes not yet
//! fixed, which would fail every local run until they are).
//!
//! Then each check runs on [`MUTANTS`] inputs made from the seeds by
//! random byte changes, cuts, repeats, insertions and splices (a fixed
//! generator per target, so a failure repeats): a brief fuzz run on
//! stable in every CI run, where the coverage-guided runs
//! (`scripts/fuzz.sh`) need nightly and a long build.
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

/// Mutated inputs per target.
const MUTANTS: usize = 400;

/// xorshift64*: the mutations' generator, seeded per target.
struct Rng(u64);

impl Rng {
    fn new(target: &str) -> Rng {
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for b in target.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
        Rng(h | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// A seed changed in one to four random ways.
fn mutate(rng: &mut Rng, seeds: &[Vec<u8>]) -> Vec<u8> {
    const BYTES: &[u8] = b"\0\xff\n\r \t/\\%.:;,=\"'-0179@[]{}<>*?";
    let mut d = seeds[rng.below(seeds.len())].clone();
    for _ in 0..=rng.below(4) {
        let at = rng.below(d.len() + 1);
        match rng.below(7) {
            0 if !d.is_empty() => {
                let i = at.min(d.len() - 1);
                d[i] ^= 1 << rng.below(8);
            }
            1 if !d.is_empty() => {
                let i = at.min(d.len() - 1);
                d[i] = BYTES[rng.below(BYTES.len())];
            }
            2 => {
                let end = (at + rng.below(16)).min(d.len());
                d.drain(at..end);
            }
            3 => {
                let end = (at + rng.below(32)).min(d.len());
                let piece = d[at..end].to_vec();
                let to = rng.below(d.len() + 1);
                d.splice(to..to, piece);
            }
            4 => {
                let n = rng.below(8) + 1;
                let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                d.splice(at..at, bytes);
            }
            5 => d.truncate(at),
            _ => {
                let other = &seeds[rng.below(seeds.len())];
                let from = rng.below(other.len() + 1);
                d.truncate(at);
                d.extend_from_slice(&other[from..]);
            }
        }
    }
    d
}

/// Runs `check` on every seed and corpus file of `target`, then on
/// [`MUTANTS`] mutations of the seeds.
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
    let seed_data: Vec<Vec<u8>> = seeds
        .iter()
        .map(|p| std::fs::read(p).unwrap_or_default())
        .collect();
    let mut rng = Rng::new(target);
    for i in 0..MUTANTS {
        let data = mutate(&mut rng, &seed_data);
        if let Err(e) = catch_unwind(AssertUnwindSafe(|| check(&data))) {
            failed.push(format!(
                "mutant {i} ({} bytes, {:?}): {}",
                data.len(),
                String::from_utf8_lossy(&data[..data.len().min(200)]),
                panic_text(e.as_ref())
            ));
        }
    }
    // Each target is one test, so nothing else uses its scratch files now.
    match target {
        "known_hosts" => ferry_fuzz_checks::known_hosts::remove_scratch(),
        "serve_confine" => ferry_fuzz_checks::serve_confine::remove_scratch(),
        _ => {}
    }
    eprintln!(
        "{target}: {} seeds, {} corpus inputs, {MUTANTS} mutants, {} failed",
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
