//! libFuzzer entry for `ferry_fuzz_checks::ssh_config` (what it asserts: its
//! doc comment, crates/ferry-fuzz-checks/src/ssh_config.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_fuzz_checks::ssh_config(data));
