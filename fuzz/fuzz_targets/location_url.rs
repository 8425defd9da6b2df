//! libFuzzer entry for `ferry_fuzz_checks::location_url` (what it asserts: its
//! doc comment, crates/ferry-fuzz-checks/src/location_url.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_fuzz_checks::location_url(data));
