//! The congestion control on real loopback sockets: a named algorithm is
//! set, a refused one leaves the system default (and says so), `system`
//! touches nothing, and `auto` picks BBR exactly when the kernel lets us.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{TcpListener, TcpStream};

use ferry_tcp::{apply_choice, current, system_default, Applied, Congestion};

fn pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (s, _) = l.accept().unwrap();
    (c, s)
}

#[test]
fn a_named_algorithm_is_set_on_the_socket() {
    // reno is built into every Linux kernel and always allowed.
    let (c, s) = pair();
    let reno = Congestion::Named("reno".into());
    assert_eq!(apply_choice(&reno, &c), Applied::Set("reno".into()));
    assert_eq!(apply_choice(&reno, &s), Applied::Set("reno".into()));
    assert_eq!(current(&c).as_deref(), Some("reno"));
    assert_eq!(current(&s).as_deref(), Some("reno"));
}

#[test]
fn a_refused_algorithm_leaves_the_system_default() {
    let (c, _s) = pair();
    let before = current(&c).unwrap();
    let r = apply_choice(&Congestion::Named("nosuchcc".into()), &c);
    assert!(
        matches!(r, Applied::Refused { ref wanted, .. } if wanted == "nosuchcc"),
        "{r:?}"
    );
    assert_eq!(current(&c).unwrap(), before);
    assert_eq!(before, system_default());
}

#[test]
fn system_leaves_the_socket_alone() {
    let (c, _s) = pair();
    assert_eq!(apply_choice(&Congestion::System, &c), Applied::Kept);
    assert_eq!(current(&c).unwrap(), system_default());
}

#[test]
fn auto_picks_bbr_when_the_kernel_lets_us() {
    let (c, _s) = pair();
    // Whether we may: try it on a socket of our own first.
    let (probe, _p) = pair();
    let may = apply_choice(&Congestion::Named("bbr".into()), &probe) == Applied::Set("bbr".into());
    let got = apply_choice(&Congestion::Auto, &c);
    if may {
        assert_eq!(got, Applied::Set("bbr".into()));
        assert_eq!(current(&c).as_deref(), Some("bbr"));
    } else {
        assert_eq!(got, Applied::Kept);
        assert_eq!(current(&c).unwrap(), system_default());
    }
}

#[test]
fn names_parse_as_a_user_writes_them() {
    assert_eq!("auto".parse::<Congestion>(), Ok(Congestion::Auto));
    assert_eq!("system".parse::<Congestion>(), Ok(Congestion::System));
    assert_eq!(
        "cubic".parse::<Congestion>(),
        Ok(Congestion::Named("cubic".into()))
    );
    assert!("".parse::<Congestion>().is_err());
    assert!("BBR; rm".parse::<Congestion>().is_err());
    assert!("a_name_far_too_long".parse::<Congestion>().is_err());
    assert_eq!(Congestion::Named("bbr".into()).to_string(), "bbr");
}
