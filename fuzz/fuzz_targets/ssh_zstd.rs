//! libFuzzer entry for `ferry_fuzz_checks::ssh_zstd` (what it asserts: its
//! doc comment, crates/ferry-fuzz-checks/src/ssh_zstd.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_fuzz_checks::ssh_zstd(data));
