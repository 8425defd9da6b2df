//! libFuzzer entry for `ferry_fuzz_checks::sync_filter` (what it asserts: its
//! doc comment, crates/ferry-fuzz-checks/src/sync_filter.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_fuzz_checks::sync_filter(data));
