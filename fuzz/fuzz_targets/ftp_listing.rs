//! libFuzzer entry for `ferry_fuzz_checks::ftp_listing` (what it asserts: its
//! doc comment, crates/ferry-fuzz-checks/src/ftp_listing.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_fuzz_checks::ftp_listing(data));
