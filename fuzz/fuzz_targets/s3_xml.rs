//! libFuzzer entry for `ferry_fuzz_checks::s3_xml` (what it asserts: its
//! doc comment, crates/ferry-fuzz-checks/src/s3_xml.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_fuzz_checks::s3_xml(data));
