//! S3 answers (ferry_engine::s3::xml): ListObjectsV2, CreateMultipartUpload,
//! ListParts, ListMultipartUploads and error bodies, as any S3-compatible
//! server might send them, STS answers and errors (s3::sts) and container
//! credentials (s3::chain), plus the AWS `credentials`/`config` INI files
//! (ferry_engine::s3::parse_ini). Nothing may panic, and what ferry
//! writes (CompleteMultipartUpload) must read back: part numbers and ETags
//! built from the input come back from the XML reader unchanged.

use ferry_engine::s3::{chain, parse_ini, sts, xml};

/// One input of the `s3_xml` fuzz target: returns when it holds, panics
/// with what broke (the module documentation says what is checked).
pub fn s3_xml(data: &[u8]) {
    let _ = xml::parse(data);
    let _ = xml::error(data);
    let _ = xml::list_objects_v2(data);
    let _ = xml::upload_id(data);
    let _ = xml::list_parts(data);
    let _ = xml::multipart_uploads(data);
    let _ = sts::parse_credentials(data);
    let _ = sts::parse_error(data);
    let _ = chain::parse_container_answer(data);
    let text = String::from_utf8_lossy(data);
    let _ = parse_ini(&text);
    for line in text.lines() {
        let _ = xml::parse_iso8601(line);
    }

    // ETags from the input's lines, as a server would have sent them.
    let parts: Vec<xml::CompletePart<'_>> = text
        .lines()
        .take(32)
        .enumerate()
        .map(|(i, l)| ((i + 1) as u32, l.to_string(), None))
        .collect();
    let body = xml::complete_body(&parts);
    let (back, _) = xml::list_parts(body.as_bytes()).unwrap_or_default();
    let numbers: Vec<u32> = back.iter().map(|p| p.number).collect();
    let want: Vec<u32> = parts.iter().map(|p| p.0).collect();
    assert_eq!(numbers, want, "{body}");
    for (p, b) in parts.iter().zip(&back) {
        // XML cannot carry most control characters; whitespace-only text
        // may be dropped by the reader.
        if p.1.chars().all(|c| !c.is_control()) && p.1.trim() == p.1 {
            assert_eq!(p.1, b.etag, "{body}");
        }
    }
}
