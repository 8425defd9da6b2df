//! The S3 XML documents ferry reads (ListObjectsV2, multipart uploads,
//! copies, errors) and the one it writes (CompleteMultipartUpload),
//! parsed with quick-xml into a small tree, then into typed answers.
//! No I/O. Answers come from the network: sizes are checked against
//! limits, and a malformed document is an error, never a panic.
use quick_xml::events::Event;

/// Elements in one document at most (a ListObjectsV2 page has up to
/// 1,000 keys, each a handful of elements).
const MAX_NODES: usize = 200_000;
const MAX_DEPTH: usize = 16;

#[derive(Debug, Default)]
pub struct Node {
    pub name: String,
    pub text: String,
    pub children: Vec<Node>,
}

impl Node {
    pub fn child(&self, name: &str) -> Option<&Node> {
        self.children.iter().find(|c| c.name == name)
    }
    pub fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Node> + 'a {
        self.children.iter().filter(move |c| c.name == name)
    }
    pub fn text_of(&self, name: &str) -> Option<&str> {
        self.child(name).map(|c| c.text.as_str())
    }
}

/// The root element of a document.
pub fn parse(doc: &[u8]) -> Result<Node, String> {
    let mut reader = quick_xml::Reader::from_reader(doc);
    let mut stack: Vec<Node> = vec![Node::default()];
    let mut nodes = 0usize;
    let mut buf = Vec::new();
    loop {
        let ev = reader
            .read_event_into(&mut buf)
            .map_err(|e| format!("malformed XML: {e}"))?;
        match ev {
            Event::Start(s) => {
                nodes += 1;
                if nodes > MAX_NODES || stack.len() > MAX_DEPTH {
                    return Err("XML document too large or too deep".into());
                }
                stack.push(Node {
                    name: local(s.local_name().as_ref()),
                    ..Node::default()
                });
            }
            Event::Empty(s) => {
                nodes += 1;
                if let Some(top) = stack.last_mut() {
                    top.children.push(Node {
                        name: local(s.local_name().as_ref()),
                        ..Node::default()
                    });
                }
            }
            Event::End(_) => {
                let done = stack.pop().ok_or("unbalanced XML")?;
                let parent = stack.last_mut().ok_or("unbalanced XML")?;
                parent.children.push(done);
            }
            Event::Text(t) => {
                let s = t.decode().map_err(|e| format!("malformed XML text: {e}"))?;
                if let Some(top) = stack.last_mut() {
                    top.text.push_str(&s);
                }
            }
            Event::CData(t) => {
                if let Some(top) = stack.last_mut() {
                    top.text.push_str(&String::from_utf8_lossy(&t));
                }
            }
            Event::GeneralRef(r) => {
                let ch = match r.resolve_char_ref() {
                    Ok(Some(c)) => c.to_string(),
                    Ok(None) => {
                        let name = r.decode().map_err(|e| format!("malformed XML: {e}"))?;
                        quick_xml::escape::resolve_xml_entity(&name)
                            .ok_or_else(|| format!("unknown XML entity &{name};"))?
                            .to_string()
                    }
                    Err(e) => return Err(format!("malformed XML character reference: {e}")),
                };
                if let Some(top) = stack.last_mut() {
                    top.text.push_str(&ch);
                }
            }
            Event::Eof => break,
            _ => {}
        }
        buf.clear();
    }
    let mut root = stack.pop().ok_or("empty XML document")?;
    if !stack.is_empty() {
        return Err("truncated XML document".into());
    }
    root.children
        .pop()
        .ok_or_else(|| "empty XML document".into())
}

fn local(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `<Error><Code>..</Code><Message>..</Message></Error>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3ErrorBody {
    pub code: String,
    pub message: String,
}

pub fn error(doc: &[u8]) -> Option<S3ErrorBody> {
    let n = parse(doc).ok()?;
    (n.name == "Error").then(|| S3ErrorBody {
        code: n.text_of("Code").unwrap_or_default().to_string(),
        message: n.text_of("Message").unwrap_or_default().to_string(),
    })
}

/// One object of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    pub key: String,
    pub size: u64,
    /// `LastModified`, seconds since the epoch.
    pub modified: Option<i64>,
}

/// One page of ListObjectsV2.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ListPage {
    pub objects: Vec<Object>,
    pub prefixes: Vec<String>,
    /// Set when more pages follow.
    pub next_token: Option<String>,
}

pub fn list_objects_v2(doc: &[u8]) -> Result<ListPage, String> {
    let n = parse(doc)?;
    if n.name != "ListBucketResult" {
        return Err(format!("expected ListBucketResult, got {}", n.name));
    }
    let url_encoded = n.text_of("EncodingType") == Some("url");
    let key = |s: &str| -> String {
        if url_encoded {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        } else {
            s.to_string()
        }
    };
    let mut page = ListPage::default();
    for c in n.all("Contents") {
        let k = c.text_of("Key").ok_or("a listed object without Key")?;
        let size = c
            .text_of("Size")
            .and_then(|s| s.trim().parse().ok())
            .ok_or("a listed object without a valid Size")?;
        page.objects.push(Object {
            key: key(k),
            size,
            modified: c.text_of("LastModified").and_then(parse_iso8601),
        });
    }
    for p in n.all("CommonPrefixes") {
        if let Some(s) = p.text_of("Prefix") {
            page.prefixes.push(key(s));
        }
    }
    if n.text_of("IsTruncated") == Some("true") {
        page.next_token = n
            .text_of("NextContinuationToken")
            .filter(|t| !t.is_empty())
            .map(str::to_string);
        if page.next_token.is_none() {
            return Err("a truncated listing without NextContinuationToken".into());
        }
    }
    Ok(page)
}

pub fn upload_id(doc: &[u8]) -> Result<String, String> {
    let n = parse(doc)?;
    n.text_of("UploadId")
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .ok_or_else(|| "no UploadId in the answer to CreateMultipartUpload".into())
}

/// One part of ListParts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub number: u32,
    pub etag: String,
    pub size: u64,
    /// `ChecksumCRC32`, when the part was sent with one.
    pub crc32: Option<String>,
}

/// ListParts: the parts and the marker of the next page.
pub fn list_parts(doc: &[u8]) -> Result<(Vec<Part>, Option<String>), String> {
    let n = parse(doc)?;
    let mut parts = Vec::new();
    for p in n.all("Part") {
        let number = p
            .text_of("PartNumber")
            .and_then(|s| s.trim().parse().ok())
            .ok_or("a part without PartNumber")?;
        parts.push(Part {
            number,
            etag: p.text_of("ETag").unwrap_or_default().to_string(),
            size: p
                .text_of("Size")
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0),
            crc32: p.text_of("ChecksumCRC32").map(str::to_string),
        });
    }
    let next = (n.text_of("IsTruncated") == Some("true"))
        .then(|| n.text_of("NextPartNumberMarker").map(str::to_string))
        .flatten();
    Ok((parts, next))
}

/// ListMultipartUploads: (key, upload id) of unfinished uploads.
pub fn multipart_uploads(doc: &[u8]) -> Result<Vec<(String, String)>, String> {
    let n = parse(doc)?;
    Ok(n.all("Upload")
        .filter_map(|u| {
            Some((
                u.text_of("Key")?.to_string(),
                u.text_of("UploadId")?.to_string(),
            ))
        })
        .collect())
}

/// One part of CompleteMultipartUpload: number, ETag, and the checksum
/// element (`ChecksumCRC32`, value) when the part was sent with one.
pub type CompletePart<'a> = (u32, String, Option<(&'a str, String)>);

/// The body of CompleteMultipartUpload.
pub fn complete_body(parts: &[CompletePart<'_>]) -> String {
    let mut s =
        String::from("<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">");
    for (n, etag, sum) in parts {
        s.push_str(&format!(
            "<Part><PartNumber>{n}</PartNumber><ETag>{}</ETag>",
            escape(etag)
        ));
        if let Some((name, v)) = sum {
            s.push_str(&format!("<{name}>{}</{name}>", escape(v)));
        }
        s.push_str("</Part>");
    }
    s.push_str("</CompleteMultipartUpload>");
    s
}

fn escape(s: &str) -> String {
    quick_xml::escape::escape(s).into_owned()
}

/// `2009-10-12T17:50:30.000Z` (and without fraction) as seconds since the
/// epoch.
pub fn parse_iso8601(s: &str) -> Option<i64> {
    let s = s.trim();
    let (date, time) = s.split_once('T')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let time = time.trim_end_matches('Z');
    let time = time.split('.').next()?;
    let mut t = time.split(':').map(|x| x.parse::<i64>().ok());
    let (hh, mm, ss) = (t.next()??, t.next()??, t.next()??);
    // The fields come from the server: out of range is no date, and a
    // huge year or hour must not overflow the arithmetic below.
    if !(0..=9999).contains(&y)
        || !(1..=12).contains(&m)
        || !(1..=31).contains(&day)
        || !(0..=23).contains(&hh)
        || !(0..=59).contains(&mm)
        || !(0..=60).contains(&ss)
    {
        return None;
    }
    Some(days_from_civil(y, m, day) * 86_400 + hh * 3600 + mm * 60 + ss)
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn listing_page() {
        let doc = br#"<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Name>b</Name><Prefix>d/</Prefix><KeyCount>3</KeyCount>
  <IsTruncated>true</IsTruncated><NextContinuationToken>tok/+=</NextContinuationToken>
  <Contents><Key>d/a &amp; b.txt</Key><LastModified>2009-10-12T17:50:30.000Z</LastModified><Size>434234</Size></Contents>
  <Contents><Key>d/&#233;t&#xE9;</Key><Size>0</Size></Contents>
  <CommonPrefixes><Prefix>d/sub dir/</Prefix></CommonPrefixes>
</ListBucketResult>"#;
        let p = list_objects_v2(doc).unwrap();
        assert_eq!(p.objects.len(), 2);
        assert_eq!(p.objects[0].key, "d/a & b.txt");
        assert_eq!(p.objects[0].size, 434234);
        assert_eq!(p.objects[0].modified, Some(1_255_369_830));
        assert_eq!(p.objects[1].key, "d/été");
        assert_eq!(p.prefixes, vec!["d/sub dir/".to_string()]);
        assert_eq!(p.next_token.as_deref(), Some("tok/+="));
    }

    #[test]
    fn errors_and_ids() {
        let e = error(b"<Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message></Error>").unwrap();
        assert_eq!(e.code, "NoSuchBucket");
        assert_eq!(
            upload_id(b"<InitiateMultipartUploadResult><Bucket>b</Bucket><Key>k</Key><UploadId>abc</UploadId></InitiateMultipartUploadResult>").unwrap(),
            "abc"
        );
        assert!(upload_id(b"<X/>").is_err());
        assert!(list_objects_v2(b"<ListBucketResult><Contents><Key>x</Key><Size>-1</Size></Contents></ListBucketResult>").is_err());
        assert!(parse(b"<a><b>").is_err());
    }

    #[test]
    fn complete_document() {
        let b = complete_body(&[(1, "\"e1\"".into(), Some(("ChecksumCRC32", "AAAA".into())))]);
        assert!(b.contains("<Part><PartNumber>1</PartNumber><ETag>&quot;e1&quot;</ETag><ChecksumCRC32>AAAA</ChecksumCRC32></Part>"), "{b}");
    }

    /// Found while writing the s3_xml fuzz target (then confirmed with its
    /// binary): a LastModified with a 19-digit year overflowed (a panic
    /// with debug assertions, a wrong date without).
    #[test]
    fn dates_out_of_range_are_no_date() {
        assert_eq!(parse_iso8601("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_iso8601("2009-10-12T17:50:30.000Z"),
            Some(1_255_369_830)
        );
        for bad in [
            "9223372036854775807-01-01T00:00:00Z",
            "-9223372036854775807-01-01T00:00:00Z",
            "2009-10-12T9223372036854775807:00:00Z",
            "2009-10-12T24:00:00Z",
            "2009-10-12T17:60:00Z",
            "2009-10-12T17:50:61Z",
        ] {
            assert_eq!(parse_iso8601(bad), None, "{bad}");
        }
    }
}
