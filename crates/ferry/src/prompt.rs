//! The command line's answers to what the library asks (`ferry_ssh::Prompt`):
//! `FERRY_PASSWORD` and `FERRY_PASSPHRASE` first, then the terminal, as
//! ssh asks: the password with echo off, a new host key as a yes/no
//! question on /dev/tty. Notices go to stderr as `ferry: ...`.
use std::io::{BufRead, Write};
use std::path::Path;

pub struct Terminal;

impl ferry_engine::Prompt for Terminal {
    fn password(&self, who: &str, ask: bool) -> Option<String> {
        if let Ok(p) = std::env::var("FERRY_PASSWORD") {
            return Some(p);
        }
        if !ask {
            return None;
        }
        rpassword::prompt_password(format!("{who}'s password: ")).ok()
    }

    fn passphrase(&self, key: &Path, ask: bool) -> Option<String> {
        if let Ok(p) = std::env::var("FERRY_PASSPHRASE") {
            return Some(p);
        }
        if !ask {
            return None;
        }
        rpassword::prompt_password(format!("Enter passphrase for key '{}': ", key.display())).ok()
    }

    fn retry_password(&self) -> bool {
        std::env::var_os("FERRY_PASSWORD").is_none()
    }

    fn confirm(&self, question: &str) -> bool {
        let Ok(tty) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/tty")
        else {
            return false;
        };
        let mut w = &tty;
        let _ = w.write_all(question.as_bytes());
        let mut line = String::new();
        let _ = std::io::BufReader::new(&tty).read_line(&mut line);
        line.trim().eq_ignore_ascii_case("yes")
    }

    fn notice(&self, message: &str) {
        say!("ferry: {message}");
    }
}
