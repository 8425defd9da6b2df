//! `--include` / `--exclude` rules for `ferry sync`, `ferry check` and
//! `ferry ls -r`, with rsync's meaning (rclone's is the same for these
//! cases):
//! - rules are tried in the order given; the first that matches decides;
//!   a path no rule matches is included;
//! - `*` matches within one path component, `**` across `/`, `?` one
//!   character, `[a-z]` a class;
//! - a rule starting with `/` is anchored at the top of the tree
//!   (`/build` is only the top `build`); any other rule matches the end
//!   of a path at any depth (`*.o` matches `a/b/x.o`; `b/*.o` matches
//!   `a/b/x.o`);
//! - a rule ending with `/` matches directories only;
//! - an excluded directory is not entered, and nothing under it is
//!   copied or deleted (as rsync without `--delete-excluded`).
//!
//! Paths given to [`Filter::allows`] are relative to the top of the tree,
//! `/`-separated, without a leading `/`.
use globset::{Glob, GlobBuilder, GlobMatcher};

/// Include or exclude.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleKind {
    Include,
    Exclude,
}

#[derive(Debug, Clone)]
struct Rule {
    kind: RuleKind,
    dir_only: bool,
    matcher: GlobMatcher,
}

/// An ordered list of rules; empty allows everything.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    rules: Vec<Rule>,
}

impl Filter {
    /// Add a rule; the error names the pattern.
    pub fn push(&mut self, kind: RuleKind, pattern: &str) -> Result<(), String> {
        let mut p = pattern.trim_end_matches('\r');
        if p.is_empty() {
            return Err("an empty --include/--exclude pattern matches nothing".into());
        }
        let dir_only = p.len() > 1 && p.ends_with('/');
        if dir_only {
            p = p.trim_end_matches('/');
        }
        let glob = match p.strip_prefix('/') {
            Some(anchored) => anchored.to_string(),
            None => format!("{{{p},**/{p}}}"),
        };
        let matcher: GlobMatcher = GlobBuilder::new(&glob)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map(|g: Glob| g.compile_matcher())
            .map_err(|e| format!("{pattern:?}: not a valid pattern: {e}"))?;
        self.rules.push(Rule {
            kind,
            dir_only,
            matcher,
        });
        Ok(())
    }

    /// Rules from a file, one per line, as rsync's `--exclude-from`: blank
    /// lines and lines starting with `#` or `;` are skipped; `+ PAT` and
    /// `- PAT` choose include or exclude, anything else is `kind`.
    pub fn push_lines(&mut self, kind: RuleKind, text: &str, origin: &str) -> Result<(), String> {
        for (n, line) in text.lines().enumerate() {
            let l = line.trim_end_matches('\r');
            if l.trim().is_empty() || l.starts_with('#') || l.starts_with(';') {
                continue;
            }
            let (k, pat) = if let Some(p) = l.strip_prefix("+ ") {
                (RuleKind::Include, p)
            } else if let Some(p) = l.strip_prefix("- ") {
                (RuleKind::Exclude, p)
            } else {
                (kind, l)
            };
            self.push(k, pat)
                .map_err(|e| format!("{origin}, line {}: {e}", n + 1))?;
        }
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Does this path take part (copied, compared, deleted)?
    pub fn allows(&self, rel: &[u8], is_dir: bool) -> bool {
        if self.rules.is_empty() {
            return true;
        }
        let s = String::from_utf8_lossy(rel);
        let s = s.trim_start_matches('/');
        for r in &self.rules {
            if r.dir_only && !is_dir {
                continue;
            }
            if r.matcher.is_match(s) {
                return r.kind == RuleKind::Include;
            }
        }
        true
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn f(rules: &[(RuleKind, &str)]) -> Filter {
        let mut f = Filter::default();
        for (k, p) in rules {
            f.push(*k, p).unwrap();
        }
        f
    }

    use RuleKind::{Exclude, Include};

    #[test]
    fn unanchored_matches_at_any_depth() {
        let x = f(&[(Exclude, "*.o")]);
        assert!(!x.allows(b"x.o", false));
        assert!(!x.allows(b"a/b/x.o", false));
        assert!(x.allows(b"a/b/x.c", false));
        let y = f(&[(Exclude, "b/*.o")]);
        assert!(!y.allows(b"a/b/x.o", false));
        assert!(y.allows(b"a/c/x.o", false));
    }

    #[test]
    fn anchored_and_double_star() {
        let x = f(&[(Exclude, "/build")]);
        assert!(!x.allows(b"build", true));
        assert!(x.allows(b"src/build", true));
        let y = f(&[(Exclude, "/logs/**")]);
        assert!(!y.allows(b"logs/a/b.txt", false));
        assert!(y.allows(b"x/logs/a", false));
        // `*` stops at `/`.
        let z = f(&[(Exclude, "/a*")]);
        assert!(!z.allows(b"abc", false));
        assert!(z.allows(b"a/bc/d", false));
        assert!(!z.allows(b"a", true));
    }

    #[test]
    fn dir_only_and_order() {
        let x = f(&[(Exclude, "cache/")]);
        assert!(!x.allows(b"a/cache", true));
        assert!(x.allows(b"a/cache", false));
        // First match wins: keep *.keep, drop the other .tmp files.
        let y = f(&[(Include, "*.keep.tmp"), (Exclude, "*.tmp")]);
        assert!(y.allows(b"d/x.keep.tmp", false));
        assert!(!y.allows(b"d/x.tmp", false));
    }

    #[test]
    fn lines_and_errors() {
        let mut x = Filter::default();
        x.push_lines(Exclude, "# comment\n\n*.bak\n+ keep.bak\n", "f")
            .unwrap();
        assert!(!x.allows(b"keep.bak", false), "first rule wins");
        assert!(x.push(Exclude, "").is_err());
        let e = x.push(Exclude, "a[").unwrap_err();
        assert!(e.contains("a["), "{e}");
    }
}
