//! libFuzzer entry for `ferry_fuzz_checks::sftp_decode` (what it asserts: its
//! doc comment, crates/ferry-fuzz-checks/src/sftp_decode.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_fuzz_checks::sftp_decode(data));
