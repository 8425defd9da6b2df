//! libFuzzer entry for `ferry_fuzz_checks::http_content_range` (what it
//! asserts: its doc comment, crates/ferry-fuzz-checks/src/http_content_range.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferry_fuzz_checks::http_content_range(data));
