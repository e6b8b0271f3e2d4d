//! tls-certs: writes a test CA (`ca.pem`) and `--count` certificate pairs `PREFIX{i}SUFFIX.crt`
//! / `.key` (ECDSA P-256, signed by that CA) into `--dir`, for the TLS benchmarks' servers
//! holding thousands of certificates. Prints how long it took.

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

/// Many certificate pairs under one test CA.
#[derive(Parser)]
#[command(name = "tls-certs")]
struct Cli {
    /// Where to write them.
    #[arg(long)]
    dir: PathBuf,
    /// How many.
    #[arg(long, default_value_t = 10_000)]
    count: u32,
    /// Host name before the number.
    #[arg(long, default_value = "n")]
    prefix: String,
    /// Host name after the number.
    #[arg(long, default_value = ".bench.test")]
    suffix: String,
}

fn main() {
    let cli = Cli::parse();
    let t0 = Instant::now();
    std::fs::create_dir_all(&cli.dir).expect("create dir");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "Palisade bench CA");
    let issuer = CertifiedIssuer::self_signed(ca, KeyPair::generate().expect("key")).expect("CA");
    std::fs::write(cli.dir.join("ca.pem"), issuer.pem()).expect("write ca.pem");
    for i in 0..cli.count {
        let name = format!("{}{i}{}", cli.prefix, cli.suffix);
        let key = KeyPair::generate().expect("key");
        let mut p = CertificateParams::new(vec![name.clone()]).expect("params");
        p.distinguished_name.push(DnType::CommonName, name.as_str());
        let cert = p.signed_by(&key, &issuer).expect("sign");
        std::fs::write(cli.dir.join(format!("{name}.crt")), cert.pem()).expect("write crt");
        std::fs::write(cli.dir.join(format!("{name}.key")), key.serialize_pem())
            .expect("write key");
    }
    eprintln!(
        "tls-certs: {} pairs in {:.1} s",
        cli.count,
        t0.elapsed().as_secs_f64()
    );
}
