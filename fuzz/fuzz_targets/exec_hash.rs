//! libFuzzer entry for `ferry_fuzz_checks::exec_hash` (what it asserts: its
//! doc comment, crates/ferry-fuzz-checks/src/exec_hash.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_fuzz_checks::exec_hash(data));
