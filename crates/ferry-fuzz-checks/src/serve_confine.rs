//! ferry serve's path confinement (ferry_server::confine::Root): every
//! path an SFTP or HTTP client names, against a served tree that holds
//! the traps (symlinks to `..`, to `/etc`, to a sibling of the root, loops
//! and dangling links). Nothing may panic, and no accepted path may lead
//! outside the root: the real path is under the root with no `..` in it,
//! and whatever part of it exists resolves (following every symlink)
//! inside the root; with `no_follow`, the same holds for its parent
//! directory. The virtual path shown to clients is normalised.

use std::os::unix::fs::symlink;
use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

use ferry_server::confine::Root;

/// The served tree and its traps, per process.
fn scratch() -> PathBuf {
    std::env::temp_dir().join(format!("ferry-fuzz-confine-{}", std::process::id()))
}

fn root() -> &'static Root {
    static ROOT: OnceLock<Root> = OnceLock::new();
    ROOT.get_or_init(|| {
        let base = scratch();
        let _ = std::fs::remove_dir_all(&base);
        let r = base.join("root");
        std::fs::create_dir_all(r.join("sub/deeper")).expect("mkdir");
        std::fs::create_dir_all(base.join("root-sibling")).expect("mkdir");
        std::fs::write(base.join("secret"), b"s").expect("write");
        std::fs::write(base.join("root-sibling/secret"), b"s").expect("write");
        std::fs::write(r.join("file"), b"f").expect("write");
        std::fs::write(r.join("sub/f"), b"f").expect("write");
        for (link, target) in [
            ("up", Path::new("..")),
            ("abs", Path::new("/etc")),
            ("sibling", Path::new("../root-sibling")),
            ("inside", Path::new("sub")),
            ("loop", Path::new("loop")),
            ("dangling", Path::new("nowhere")),
            ("sub/back", Path::new("../..")),
            ("sub/self", Path::new("../sub")),
            ("sub/deeper/top", Path::new("../../up")),
        ] {
            symlink(target, r.join(link)).expect("symlink");
        }
        Root::new(&r).expect("root")
    })
}

/// The longest existing prefix of `p`, with every symlink resolved.
fn existing_canonical(p: &Path) -> Option<PathBuf> {
    let mut q = p.to_path_buf();
    loop {
        if q.symlink_metadata().is_ok() {
            return q.canonicalize().ok();
        }
        if !q.pop() {
            return None;
        }
    }
}

fn assert_inside(root: &Root, p: &Path, client: &[u8]) {
    assert!(p.starts_with(root.path()), "{client:?} -> {p:?}");
    assert!(
        p.components()
            .all(|c| !matches!(c, Component::ParentDir | Component::CurDir)),
        "{client:?} -> {p:?}"
    );
    // A dangling or looping symlink cannot be canonicalized: nothing
    // there to reach outside.
    if let Some(c) = existing_canonical(p) {
        assert!(c.starts_with(root.path()), "{client:?} -> {p:?} -> {c:?}");
    }
}

/// One input of the `serve_confine` fuzz target: returns when it holds, panics
/// with what broke (the module documentation says what is checked).
pub fn serve_confine(data: &[u8]) {
    let root = root();
    for no_follow in [false, true] {
        let Ok(r) = root.resolve(data, no_follow) else {
            continue;
        };
        assert!(r.virtual_path.starts_with('/'), "{r:?}");
        assert!(
            r.virtual_path
                .split('/')
                .skip(1)
                .all(|c| !matches!(c, "." | "..") && (c.is_empty() == (r.virtual_path == "/"))),
            "{r:?}"
        );
        if no_follow {
            assert!(r.real.starts_with(root.path()), "{data:?} -> {r:?}");
            match r.real.parent() {
                Some(parent) if r.real != root.path() => assert_inside(root, parent, data),
                _ => {}
            }
        } else {
            assert_inside(root, &r.real, data);
        }
    }
    if let Ok(parts) = Root::normalize_clamped(data) {
        assert!(parts.iter().all(|p| !matches!(p.as_str(), "" | "." | "..")));
    }
}

/// Removes this process's served tree (libFuzzer never returns, so only a
/// replay calls it, when done).
pub fn remove_scratch() {
    let _ = std::fs::remove_dir_all(scratch());
}
