//! The ferry command line: flags and glue over the library crates.
fn main() {
    eprintln!("ferry: not yet");
    std::process::exit(1);
}
