//! `ProxyJump` / `-J` values: a comma-separated chain of hops, each
//! `[user@]host[:port]` or `ssh://[user@]host[:port]`, parsed the way
//! OpenSSH's `parse_jump` does. The first hop is the one connected to
//! directly; the last one opens the connection to the target.

/// One hop of a `ProxyJump` chain. `None` fields come from the hop's own
/// `Host` block (or the defaults), exactly as `ssh -J` leaves them to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JumpHost {
    pub user: Option<String>,
    pub host: String,
    pub port: Option<u16>,
}

impl JumpHost {
    /// `host:port` (or `host` when the port comes from the config), for
    /// messages.
    pub fn label(&self) -> String {
        match self.port {
            Some(p) => format!("{}:{p}", self.host),
            None => self.host.clone(),
        }
    }
}

/// Parse a `ProxyJump` value (not `none`, which the config resolves to no
/// value) into its hops, first hop first. Every hop must parse: a typo in a
/// hop is an error, not a direct connection.
pub fn parse_jumps(value: &str) -> Result<Vec<JumpHost>, String> {
    let value = value.trim();
    if value.is_empty() {
        return Err("ProxyJump: empty value".into());
    }
    value
        .split(',')
        .map(|hop| parse_hop(hop.trim()).map_err(|m| format!("ProxyJump {value:?}: {m}")))
        .collect()
}

fn parse_hop(hop: &str) -> Result<JumpHost, String> {
    if hop.is_empty() {
        return Err("empty hop".into());
    }
    let rest = match hop.get(..6) {
        Some(s) if s.eq_ignore_ascii_case("ssh://") => {
            let r = hop.get(6..).unwrap_or_default();
            // A URI may end in a slash; a path is not allowed.
            match r.split_once('/') {
                Some((r, "")) => r,
                Some(_) => return Err(format!("hop {hop:?}: a path is not allowed")),
                None => r,
            }
        }
        _ => hop,
    };
    let (user, hostport) = match rest.rsplit_once('@') {
        Some((u, h)) if !u.is_empty() => (Some(u.to_string()), h),
        Some(_) => return Err(format!("hop {hop:?}: empty user name")),
        None => (None, rest),
    };
    let (host, port) = if let Some(r) = hostport.strip_prefix('[') {
        let Some((h, after)) = r.split_once(']') else {
            return Err(format!("hop {hop:?}: missing ']'"));
        };
        match after {
            "" => (h, None),
            a => match a.strip_prefix(':') {
                Some(p) => (h, Some(p)),
                None => return Err(format!("hop {hop:?}: unexpected {a:?} after ']'")),
            },
        }
    } else {
        match hostport.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    if host.is_empty() {
        return Err(format!("hop {hop:?}: empty host name"));
    }
    if host.contains(|c: char| c.is_whitespace() || c.is_control()) {
        return Err(format!("hop {hop:?}: invalid host name"));
    }
    let port = match port {
        None => None,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 => Some(n),
            _ => return Err(format!("hop {hop:?}: bad port {p:?}")),
        },
    };
    Ok(JumpHost {
        user,
        host: host.to_string(),
        port,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn hop(user: Option<&str>, host: &str, port: Option<u16>) -> JumpHost {
        JumpHost {
            user: user.map(str::to_string),
            host: host.to_string(),
            port,
        }
    }

    #[test]
    fn hops_in_order_with_user_and_port() {
        assert_eq!(
            parse_jumps("bastion").unwrap(),
            vec![hop(None, "bastion", None)]
        );
        assert_eq!(
            parse_jumps("alice@gw:2222,ssh://bob@inner:22,[::1]:2200,carol@[fe80::1]").unwrap(),
            vec![
                hop(Some("alice"), "gw", Some(2222)),
                hop(Some("bob"), "inner", Some(22)),
                hop(None, "::1", Some(2200)),
                hop(Some("carol"), "fe80::1", None),
            ]
        );
        // The user is everything before the last '@', as in OpenSSH.
        assert_eq!(
            parse_jumps("a@b@host").unwrap(),
            vec![hop(Some("a@b"), "host", None)]
        );
        assert_eq!(
            parse_jumps("ssh://gw/").unwrap(),
            vec![hop(None, "gw", None)]
        );
    }

    #[test]
    fn a_bad_hop_is_an_error_not_a_direct_connection() {
        for bad in [
            "",
            "gw,",
            ",gw",
            "gw:0",
            "gw:70000",
            "gw:x",
            "@gw",
            "[::1",
            "[::1]x",
            "ssh://gw/path",
            "g w",
        ] {
            assert!(parse_jumps(bad).is_err(), "{bad:?} should not parse");
        }
        let e = parse_jumps("gw,inner:bad").unwrap_err();
        assert!(e.contains("inner:bad"), "{e}");
    }
}
