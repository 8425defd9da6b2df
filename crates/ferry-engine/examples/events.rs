//! Run one transfer with the async API and print every event as one JSON
//! object per line on stdout, then the per-file report.
//!
//! ```sh
//! cargo run --release -p ferry-engine --example events -- SRC... DST [-r] [--cancel-after BYTES]
//! ```
//!
//! With `--cancel-after`, the transfer is cancelled once that many bytes
//! have moved, and the program exits non-zero; nothing incomplete is left
//! under a final name. The same URLs as `ferry cp` (ssh config, agent and
//! known_hosts included; no prompts: this is an unattended program). For
//! s3:// it hands the engine the AWS variables and ~/.aws, as `ferry cp`
//! does; the engine itself reads none of them.
use ferry_engine::{CopyOptions, Event, Location, Transfer};

fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn json(e: &Event) -> String {
    match e {
        Event::Planned { files, bytes } => {
            format!(r#"{{"type":"planned","files":{files},"bytes":{bytes}}}"#)
        }
        Event::FileStarted { source, dest, size } => format!(
            r#"{{"type":"file_started","source":{},"dest":{},"size":{}}}"#,
            esc(source),
            esc(dest),
            size.map(|s| s.to_string()).unwrap_or_else(|| "null".into())
        ),
        Event::Progress {
            bytes_done,
            bytes_total,
            files_done,
            files_total,
        } => format!(
            r#"{{"type":"progress","bytes_done":{bytes_done},"bytes_total":{bytes_total},"files_done":{files_done},"files_total":{files_total}}}"#
        ),
        Event::FileDone(f) => format!(
            r#"{{"type":"file_done","source":{},"dest":{},"bytes":{},"error":{}}}"#,
            esc(&f.source),
            esc(&f.dest),
            f.bytes,
            match &f.error {
                Some(e) => format!(r#"{{"kind":"{:?}","message":{}}}"#, e.kind, esc(&e.message)),
                None => "null".into(),
            }
        ),
        Event::Warning(w) => format!(r#"{{"type":"warning","message":{}}}"#, esc(w)),
        other => format!(
            r#"{{"type":"other","debug":{}}}"#,
            esc(&format!("{other:?}"))
        ),
    }
}

#[tokio::main]
async fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut opts = CopyOptions::default();
    opts.s3.aws_config = Some(ferry_engine::s3::AwsConfig::from_vars(
        std::env::vars_os(),
        std::env::var_os("HOME").map(Into::into),
    ));
    let mut cancel_after: Option<u64> = None;
    let mut paths = Vec::new();
    while !args.is_empty() {
        let a = args.remove(0);
        match a.as_str() {
            "-r" => opts.recursive = true,
            "-p" => opts.preserve = true,
            "--resume" => opts.resume = true,
            "--cancel-after" if !args.is_empty() => {
                cancel_after = args.remove(0).parse().ok();
                if cancel_after.is_none() {
                    eprintln!("--cancel-after takes a number of bytes");
                    std::process::exit(2);
                }
            }
            "--streams" if !args.is_empty() => opts.streams = args.remove(0).parse().ok(),
            _ => paths.push(a),
        }
    }
    if paths.len() < 2 {
        eprintln!(
            "usage: events SRC... DST [-r] [-p] [--resume] [--streams N] [--cancel-after BYTES]"
        );
        std::process::exit(2);
    }
    opts.connect.interactive = false;
    let mut locs = Vec::new();
    for p in &paths {
        match Location::parse(p) {
            Ok(l) => locs.push(l),
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(2);
            }
        }
    }
    let dest = locs.pop().unwrap_or_else(|| Location::Local(".".into()));
    let mut t = Transfer::new(locs, dest, opts).start();
    while let Some(ev) = t.next_event().await {
        println!("{}", json(&ev));
        if let (Some(limit), Event::Progress { bytes_done, .. }) = (cancel_after, &ev) {
            if *bytes_done >= limit {
                t.cancel();
            }
        }
        if let (Some(limit), true) = (cancel_after, matches!(ev, Event::FileDone(_))) {
            if t.stats()
                .bytes_done
                .load(std::sync::atomic::Ordering::Relaxed)
                >= limit
            {
                t.cancel();
            }
        }
    }
    let report = t.wait().await;
    let files: Vec<String> = report
        .files
        .iter()
        .map(|f| {
            format!(
                r#"{{"source":{},"dest":{},"bytes":{},"ok":{}}}"#,
                esc(&f.source),
                esc(&f.dest),
                f.bytes,
                f.error.is_none()
            )
        })
        .collect();
    println!(
        r#"{{"type":"report","bytes":{},"seconds":{:.3},"protocol":{},"files":[{}],"error":{}}}"#,
        report.bytes,
        report.seconds,
        esc(&report.protocol),
        files.join(","),
        report
            .error
            .as_ref()
            .map(|e| format!(
                r#"{{"kind":"{:?}","message":{}}}"#,
                e.kind(),
                esc(&e.to_string())
            ))
            .unwrap_or_else(|| "null".into())
    );
    std::process::exit(report.error.map(|e| e.exit_code()).unwrap_or(0));
}
