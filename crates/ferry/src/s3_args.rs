//! The S3 flags of `ferry cp`, flattened into `CpArgs`: where the store is
//! and how to address it, part sizes and checksums. What is not given
//! comes from the environment (`AWS_ENDPOINT_URL`, `AWS_REGION`,
//! `AWS_PROFILE`, `AWS_CA_BUNDLE`, the keys) and `~/.aws/config` and
//! `credentials`, as for the AWS CLI (docs/internals/s3.md): the binary
//! hands them to the engine, which reads no environment itself.
use clap::Args;
use ferry_engine::s3::AwsConfig;
use ferry_engine::S3Options;

#[derive(Args, Debug, Default)]
#[command(next_help_heading = "S3")]
pub struct S3Args {
    /// Endpoint of an S3-compatible store, e.g. https://minio.local:9000 (else AWS_ENDPOINT_URL, else AWS).
    #[arg(long, value_name = "URL")]
    pub s3_endpoint: Option<String>,
    /// Region to sign for (else AWS_REGION, the profile's region, us-east-1).
    #[arg(long, value_name = "REGION")]
    pub s3_region: Option<String>,
    /// Profile of ~/.aws/credentials and ~/.aws/config (else AWS_PROFILE, else default); as with the AWS CLI's --profile, the AWS_* keys are then not used.
    #[arg(long, value_name = "NAME")]
    pub s3_profile: Option<String>,
    /// Send requests unsigned and look for no credentials (public buckets), as the AWS CLI's --no-sign-request.
    #[arg(long)]
    pub s3_no_sign_request: bool,
    /// Address buckets as bucket.host (virtual-hosted); custom endpoints default to path style.
    #[arg(long)]
    pub s3_virtual_hosted: bool,
    /// Upload objects at least this big in parts (default 16M).
    #[arg(long, value_name = "SIZE", value_parser = crate::parse_size)]
    pub s3_multipart_threshold: Option<u64>,
    /// Part size of multipart uploads (default 8M; raised so a file fits in 10,000 parts).
    #[arg(long, value_name = "SIZE", value_parser = crate::parse_size)]
    pub s3_part_size: Option<u64>,
    /// Parts of one file uploaded at once (default 8).
    #[arg(long, value_name = "N")]
    pub s3_upload_concurrency: Option<usize>,
    /// Integrity check sent with uploads: crc32 (x-amz-checksum-crc32, default), md5 (Content-MD5) or none.
    #[arg(long, value_name = "KIND")]
    pub s3_checksum: Option<String>,
}

impl S3Args {
    pub fn apply(self, o: &mut S3Options) {
        o.endpoint = self.s3_endpoint;
        o.region = self.s3_region;
        o.profile = self.s3_profile;
        o.no_sign_request = self.s3_no_sign_request;
        o.virtual_hosted = self.s3_virtual_hosted;
        o.multipart_threshold = self.s3_multipart_threshold;
        o.part_size = self.s3_part_size;
        o.upload_concurrency = self.s3_upload_concurrency;
        o.checksum = self.s3_checksum;
        // As the AWS CLI: the AWS_* variables and ~/.aws, and unsigned
        // requests when they hold no credentials (as ferry always did).
        o.aws_config = Some(AwsConfig::from_vars(
            std::env::vars_os(),
            std::env::var_os("HOME").map(Into::into),
        ));
        o.anonymous = true;
    }
}
