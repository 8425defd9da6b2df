//! OpenSSH-style wildcard patterns (`*`, `?`) and comma-separated pattern
//! lists with `!` negation, shared by `ssh_config` host matching and
//! `known_hosts` host fields.

/// Whether `text` matches the single wildcard `pattern` (`*` = any run of
/// characters, `?` = exactly one). Hosts compare case-insensitively (DNS names
/// are), users do not, hence the flag.
pub(crate) fn wildcard_match(pattern: &str, text: &str, ignore_case: bool) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let s: Vec<char> = text.chars().collect();
    let same = |a: char, b: char| {
        if ignore_case {
            a.to_lowercase().eq(b.to_lowercase())
        } else {
            a == b
        }
    };
    // Greedy matching that remembers only the most recent `*`: linear-ish
    // instead of exponential, which matters because patterns come from files.
    let (mut pi, mut si) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, si));
                pi += 1;
            }
            Some(&c) if c == '?' || same(c, s[si]) => {
                pi += 1;
                si += 1;
            }
            _ => match star {
                Some((sp, ss)) => {
                    pi = sp + 1;
                    si = ss + 1;
                    star = Some((sp, ss + 1));
                }
                None => return false,
            },
        }
    }
    p[pi.min(p.len())..].iter().all(|&c| c == '*')
}

/// OpenSSH `match_pattern_list`: true when some positive pattern in the
/// comma-separated `list` matches and no negated (`!`) one does. A negated
/// match vetoes the whole list regardless of order.
pub(crate) fn match_list(text: &str, list: &str, ignore_case: bool) -> bool {
    let mut positive = false;
    for pat in list.split(',') {
        if let Some(neg) = pat.strip_prefix('!') {
            if wildcard_match(neg, text, ignore_case) {
                return false;
            }
        } else if wildcard_match(pat, text, ignore_case) {
            positive = true;
        }
    }
    positive
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards() {
        assert!(wildcard_match("*", "", false));
        assert!(wildcard_match("*", "abc", false));
        assert!(wildcard_match("a*c", "abbbc", false));
        assert!(wildcard_match("a?c", "abc", false));
        assert!(!wildcard_match("a?c", "ac", false));
        assert!(wildcard_match("*.example.com", "x.example.com", false));
        assert!(!wildcard_match("*.example.com", "example.com", false));
        assert!(wildcard_match("*.EXAMPLE.com", "x.example.COM", true));
        assert!(!wildcard_match("Bob", "bob", false));
        assert!(wildcard_match("**a**b", "xxaxxb", false));
        assert!(!wildcard_match("", "a", false));
        assert!(wildcard_match("", "", false));
        // Pathological pattern must finish quickly.
        let long = "a".repeat(5000);
        assert!(!wildcard_match("*a*a*a*a*a*a*a*a*b", &long, false));
    }

    #[test]
    fn lists() {
        assert!(match_list("foo", "bar,foo", true));
        assert!(!match_list("foo", "bar,baz", true));
        assert!(!match_list("foo", "*,!foo", true));
        assert!(!match_list("foo", "!foo,*", true));
        assert!(match_list("fob", "!foo,*", true));
        assert!(!match_list("foo", "!bar", true));
    }
}
