//! The standard data sets: deterministic files, generated once into the
//! bench's work directory and checked by blake3 after every transfer.
//!
//! The bytes come from blake3's extendable output (XOF) keyed by the set,
//! the file index and the size, so they are the same on every machine and
//! every run, need no PRNG whose algorithm could change between crate
//! versions, and are generated at well over 1 GB/s. The incompressible
//! variant is the XOF output itself; the compressible variant is text-like
//! lines of words and numbers (gzip gets it to about a third), built from a
//! pool of 64 KiB text blocks that the XOF picks from.
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// Bumped whenever the generator changes, so cached sets are rebuilt.
const GENERATOR: &str = "ferry-bench data v1";

/// One of the standard sets: `count` files of `size` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetSpec {
    pub name: &'static str,
    pub count: usize,
    pub size: u64,
}

/// The sets of the classic SFTP performance report, and `wide` (50 x 100
/// MB, the parallel-download goal of the HTTP issue; not in the default
/// list, ask for it with `--sets`).
pub const SETS: [SetSpec; 5] = [
    SetSpec {
        name: "huge",
        count: 1,
        size: 1 << 30,
    },
    SetSpec {
        name: "large",
        count: 10,
        size: 12_000_000,
    },
    SetSpec {
        name: "medium",
        count: 100,
        size: 1_000_000,
    },
    SetSpec {
        name: "small",
        count: 1000,
        size: 20_000,
    },
    SetSpec {
        name: "wide",
        count: 50,
        size: 100_000_000,
    },
];

/// `--quick` sizes: the whole scorecard in a few minutes on 2 cores.
const QUICK: [SetSpec; 5] = [
    SetSpec {
        name: "huge",
        count: 1,
        size: 128 << 20,
    },
    SetSpec {
        name: "large",
        count: 10,
        size: 1_500_000,
    },
    SetSpec {
        name: "medium",
        count: 100,
        size: 125_000,
    },
    SetSpec {
        name: "small",
        count: 200,
        size: 20_000,
    },
    SetSpec {
        name: "wide",
        count: 50,
        size: 4_000_000,
    },
];

/// The spec for `name`, with `--quick` and the hidden `--scale` (a factor
/// on file sizes, for tests) applied.
pub fn spec(name: &str, quick: bool, scale: f64) -> Result<SetSpec> {
    let table = if quick { &QUICK } else { &SETS };
    let Some(s) = table.iter().find(|s| s.name == name) else {
        bail!("unknown set {name:?}: choose from huge, large, medium, small, wide");
    };
    let mut s = *s;
    if scale != 1.0 {
        if !(scale > 0.0 && scale <= 1.0) {
            bail!("--scale must be in (0, 1]");
        }
        s.size = ((s.size as f64 * scale) as u64).max(1);
    }
    Ok(s)
}

/// One generated file of a set.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FileEntry {
    pub name: String,
    pub size: u64,
    /// blake3 of the content, hex.
    pub blake3: String,
}

/// A generated set on disk: `dir/<files>`, where the directory's own name
/// is the set's name (so `cp -r dir dest/` makes `dest/<set>/...`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DataSet {
    pub name: String,
    pub variant: String,
    pub dir: PathBuf,
    pub files: Vec<FileEntry>,
    pub file_size: u64,
    pub total_bytes: u64,
}

impl DataSet {
    pub fn single_file(&self) -> bool {
        self.files.len() == 1
    }
}

/// Generate (or reuse, when a manifest for the same generator, sizes and
/// variant is there) the set `spec` under `parent/<name>/`.
pub fn prepare(parent: &Path, spec: &SetSpec, compressible: bool) -> Result<DataSet> {
    let variant = if compressible {
        "compressible"
    } else {
        "incompressible"
    };
    let dir = parent.join(spec.name);
    let manifest = parent.join(format!(".{}.manifest.json", spec.name));
    let ext = if compressible { "txt" } else { "bin" };
    let names: Vec<String> = (0..spec.count)
        .map(|i| format!("{}-{i:04}.{ext}", spec.name))
        .collect();
    if let Some(ds) = cached(&manifest, &dir, spec, variant, &names) {
        return Ok(ds);
    }
    if dir.exists() {
        fs::remove_dir_all(&dir).with_context(|| format!("removing stale {}", dir.display()))?;
    }
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let pool = compressible.then(text_pool);
    let mut files = Vec::with_capacity(spec.count);
    for (i, name) in names.iter().enumerate() {
        let seed = format!("{variant}:{}:{i}:{}", spec.name, spec.size);
        let path = dir.join(name);
        let hash = write_file(&path, spec.size, &seed, pool.as_deref())
            .with_context(|| format!("generating {}", path.display()))?;
        files.push(FileEntry {
            name: name.clone(),
            size: spec.size,
            blake3: hash,
        });
    }
    let ds = DataSet {
        name: spec.name.to_string(),
        variant: variant.to_string(),
        dir,
        files,
        file_size: spec.size,
        total_bytes: spec.size * spec.count as u64,
    };
    let doc = serde_json::json!({"generator": GENERATOR, "set": ds});
    fs::write(&manifest, serde_json::to_vec_pretty(&doc)?)
        .with_context(|| format!("writing {}", manifest.display()))?;
    Ok(ds)
}

fn cached(
    manifest: &Path,
    dir: &Path,
    spec: &SetSpec,
    variant: &str,
    names: &[String],
) -> Option<DataSet> {
    let v: serde_json::Value = serde_json::from_slice(&fs::read(manifest).ok()?).ok()?;
    if v.get("generator")?.as_str()? != GENERATOR {
        return None;
    }
    let ds: DataSet = serde_json::from_value(v.get("set")?.clone()).ok()?;
    let same = ds.variant == variant
        && ds.dir == dir
        && ds.file_size == spec.size
        && ds.files.len() == names.len()
        && ds.files.iter().zip(names).all(|(f, n)| {
            &f.name == n && fs::metadata(dir.join(n)).map(|m| m.len()).ok() == Some(f.size)
        });
    same.then_some(ds)
}

/// The deterministic byte stream for one file.
fn xof(seed: &str) -> blake3::OutputReader {
    let mut h = blake3::Hasher::new_derive_key(GENERATOR);
    h.update(seed.as_bytes());
    h.finalize_xof()
}

/// Write `size` bytes to `path` (via a `.part` name), returning its blake3.
fn write_file(path: &Path, size: u64, seed: &str, pool: Option<&[Vec<u8>]>) -> Result<String> {
    let tmp = path.with_extension("part");
    let mut f = std::io::BufWriter::with_capacity(1 << 20, fs::File::create(&tmp)?);
    let mut hasher = blake3::Hasher::new();
    let mut rng = xof(seed);
    let mut left = size;
    let mut buf = vec![0u8; 1 << 20];
    let mut offset = 0u64;
    while left > 0 {
        let piece: &[u8] = match pool {
            None => {
                let n = left.min(buf.len() as u64) as usize;
                let b = buf.get_mut(..n).unwrap_or_default();
                rng.fill(b);
                b
            }
            Some(pool) => {
                // A header line that makes every block unique, then a text
                // block picked by the stream.
                let mut pick = [0u8; 2];
                rng.fill(&mut pick);
                let idx = u16::from_le_bytes(pick) as usize % pool.len().max(1);
                buf.clear();
                buf.extend_from_slice(format!("{seed} @{offset}\n").as_bytes());
                buf.extend_from_slice(pool.get(idx).map(Vec::as_slice).unwrap_or_default());
                let n = (left.min(buf.len() as u64)) as usize;
                buf.get(..n).unwrap_or_default()
            }
        };
        f.write_all(piece)?;
        hasher.update(piece);
        left -= piece.len() as u64;
        offset += piece.len() as u64;
        if pool.is_some() {
            // buf was reshaped for text; keep it at 1 MiB for the next use
            buf.resize(1 << 20, 0);
        }
    }
    f.flush()?;
    drop(f);
    fs::rename(&tmp, path)?;
    Ok(hasher.finalize().to_hex().to_string())
}

/// 64 blocks of 64 KiB of text-like lines (words and numbers).
fn text_pool() -> Vec<Vec<u8>> {
    let mut rng = xof("text pool");
    let mut next = move |n: u32| -> u32 {
        let mut b = [0u8; 4];
        rng.fill(&mut b);
        u32::from_le_bytes(b) % n.max(1)
    };
    let letters = b"etaoinshrdlucmfwypvbgkjqxz";
    let vocab: Vec<String> = (0..400)
        .map(|_| {
            let alphabet = 8 + next(19) as usize;
            let len = 2 + next(9);
            (0..len)
                .map(|_| {
                    let i = next(alphabet as u32) as usize;
                    letters.get(i).copied().unwrap_or(b'e') as char
                })
                .collect()
        })
        .collect();
    (0..64)
        .map(|_| {
            let mut block = String::with_capacity(66_000);
            while block.len() < 65_536 {
                let n = 4 + next(11) as usize;
                for w in 0..n {
                    if w > 0 {
                        block.push(' ');
                    }
                    if next(10) < 2 {
                        block.push_str(&next(100_000).to_string());
                    } else {
                        let i = next(vocab.len() as u32) as usize;
                        block.push_str(vocab.get(i).map(String::as_str).unwrap_or("x"));
                    }
                }
                block.push_str(if next(10) < 9 { "\n" } else { ".\n\n" });
            }
            block.truncate(65_536);
            block.into_bytes()
        })
        .collect()
}

/// blake3 of a file, hex.
pub fn hash_file(path: &Path) -> std::io::Result<String> {
    let mut f = fs::File::open(path)?;
    let mut h = blake3::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(buf.get(..n).unwrap_or_default());
    }
    Ok(h.finalize().to_hex().to_string())
}

/// `Ok` when `dest` holds exactly the set's files (no more, no fewer, each
/// with the source's size and blake3), else what is wrong.
pub fn verify(ds: &DataSet, dest: &Path) -> std::result::Result<(), String> {
    let mut found: Vec<String> = Vec::new();
    let rd = fs::read_dir(dest).map_err(|e| format!("{}: {e}", dest.display()))?;
    for e in rd {
        let e = e.map_err(|e| format!("{}: {e}", dest.display()))?;
        found.push(e.file_name().to_string_lossy().into_owned());
    }
    found.sort();
    let want: Vec<&str> = ds.files.iter().map(|f| f.name.as_str()).collect();
    let missing: Vec<&&str> = want
        .iter()
        .filter(|w| found.binary_search_by(|f| f.as_str().cmp(w)).is_err())
        .collect();
    let extra: Vec<&String> = found
        .iter()
        .filter(|f| !want.contains(&f.as_str()))
        .collect();
    if !missing.is_empty() || !extra.is_empty() {
        return Err(format!(
            "{}: {} file(s) missing (e.g. {:?}), {} unexpected (e.g. {:?})",
            dest.display(),
            missing.len(),
            missing.iter().take(2).collect::<Vec<_>>(),
            extra.len(),
            extra.iter().take(2).collect::<Vec<_>>()
        ));
    }
    for f in &ds.files {
        let p = dest.join(&f.name);
        let len = fs::metadata(&p)
            .map_err(|e| format!("{}: {e}", p.display()))?
            .len();
        if len != f.size {
            return Err(format!("{}: {len} bytes, expected {}", p.display(), f.size));
        }
        let h = hash_file(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        if h != f.blake3 {
            return Err(format!("{}: content differs from the source", p.display()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn generation_is_deterministic_and_verifies() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let spec = SetSpec {
            name: "t",
            count: 3,
            size: 100_000,
        };
        for compressible in [false, true] {
            let x = prepare(a.path(), &spec, compressible).unwrap();
            let y = prepare(b.path(), &spec, compressible).unwrap();
            assert_eq!(
                x.files.iter().map(|f| &f.blake3).collect::<Vec<_>>(),
                y.files.iter().map(|f| &f.blake3).collect::<Vec<_>>()
            );
            verify(&x, &x.dir).unwrap();
            // A changed file is a mismatch, not a pass.
            let first = x.dir.join(&x.files[1].name);
            fs::write(&first, b"nope").unwrap();
            assert!(verify(&x, &x.dir).is_err());
            fs::remove_dir_all(&x.dir).unwrap();
            fs::remove_dir_all(&y.dir).unwrap();
        }
    }
}
