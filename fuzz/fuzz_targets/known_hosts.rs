//! libFuzzer entry for `ferry_fuzz_checks::known_hosts` (what it asserts: its
//! doc comment, crates/ferry-fuzz-checks/src/known_hosts.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_fuzz_checks::known_hosts(data));
