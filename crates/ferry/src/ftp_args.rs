//! The FTP(S) flags of `ferry cp`, flattened into `CpArgs`. Trust
//! (--cacert, --pin, -k) and credentials (-u, ~/.netrc) are the HTTP(S)
//! flags, read by both.
use clap::Args;
use ferry_engine::FtpOptions;

#[derive(Args, Debug, Default)]
#[command(next_help_heading = "FTP(S)")]
pub struct FtpArgs {
    /// ftp:// URLs: require TLS (AUTH TLS, then PROT P for data), as curl's
    /// --ssl-reqd; fail rather than send anything in the clear. ftps:// URLs
    /// are TLS from the start (port 990).
    #[arg(long = "ssl-reqd")]
    pub ssl_reqd: bool,
}

impl FtpArgs {
    pub fn apply(self, o: &mut FtpOptions) {
        o.ssl_reqd = self.ssl_reqd;
    }
}
