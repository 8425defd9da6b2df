//! `--include`/`--exclude` rules and `--exclude-from` files
//! (ferry_engine::filter): rule lines from a user's file, then paths
//! matched against them. The input is split at the first NUL: rules
//! before, paths after (one per line). Nothing may panic, and a filter
//! with no rules allows everything. At most 8 rule lines per input.

use ferry_engine::filter::{Filter, RuleKind};

/// One input of the `sync_filter` fuzz target: returns when it holds, panics
/// with what broke (the module documentation says what is checked).
pub fn sync_filter(data: &[u8]) {
    let (rules, paths) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    // Each rule compiles a glob (slow under ASan); a few rules reach every
    // branch of the parser.
    let rules: String = String::from_utf8_lossy(rules)
        .lines()
        .take(8)
        .collect::<Vec<_>>()
        .join("\n");
    let mut f = Filter::default();
    if f.push_lines(RuleKind::Exclude, &rules, "fuzz").is_err() {
        return;
    }
    for (i, path) in paths.split(|&b| b == b'\n').enumerate() {
        let allowed = f.allows(path, i % 2 == 0);
        if f.is_empty() {
            assert!(allowed);
        }
    }
}
