//! ferry's HTTP(S) client: HTTP/1.1 and HTTP/2 over rustls (aws-lc-rs),
//! with ranges, multiplexing and resume. (Being written.)
