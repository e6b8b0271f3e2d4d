//! `dnsd key` (a zone's DNSSEC keys: made ahead, imported, listed) and `dnsd redis-key` (the
//! fleet key that signs Redis records).

use std::path::PathBuf;

use clap::Subcommand;

/// `dnsd redis-key ...`.
#[derive(Debug, Subcommand)]
pub enum RedisKeyCmd {
    /// Write a new fleet key (32 random bytes as hex, mode 0600) to FILE; never overwrites.
    /// Copy the same file to every node of the fleet.
    Generate {
        /// Where to write it.
        file: PathBuf,
    },
    /// Check that FILE is a usable fleet key (mode, length).
    Check {
        /// The key file.
        file: PathBuf,
    },
}

/// `dnsd key ...`.
#[derive(Debug, Subcommand)]
pub enum KeyCmd {
    /// Make a key for a zone: published and signing from now (the server makes the first
    /// keys itself; this is for keys made ahead, e.g. on an offline machine).
    Generate {
        /// The zone.
        zone: String,
        /// ecdsap256sha256, ed25519 or rsasha256.
        #[arg(long, default_value = "ecdsap256sha256")]
        algorithm: String,
        /// csk, ksk or zsk.
        #[arg(long, default_value = "csk")]
        role: String,
        /// RSA modulus bits.
        #[arg(long, default_value_t = 2048)]
        rsa_bits: u32,
    },
    /// Import a PKCS#8 private key (PEM, as Knot's key directory and openssl write, or DER).
    Import {
        /// The zone.
        zone: String,
        /// The key file.
        file: PathBuf,
        /// ecdsap256sha256, ed25519 or rsasha256.
        #[arg(long, default_value = "ecdsap256sha256")]
        algorithm: String,
        /// csk, ksk or zsk.
        #[arg(long, default_value = "csk")]
        role: String,
    },
    /// List a zone's keys.
    List {
        /// The zone.
        zone: String,
    },
}

/// Runs `dnsd key ...`.
pub fn key_command(
    key_dir: Option<PathBuf>,
    config: Option<PathBuf>,
    cmd: KeyCmd,
) -> Result<String, String> {
    use crate::signing::keys::{Algorithm, Key, Role, read_pkcs8};
    let dir = match (key_dir, config) {
        (Some(d), _) => d,
        (None, Some(c)) => crate::config::Config::load(&c)
            .map_err(|e| e.to_string())?
            .dnssec
            .key_dir
            .ok_or_else(|| format!("{}: [dnssec] key_dir is not set", c.display()))?,
        (None, None) => return Err("give --key-dir DIR or -c CONFIG".into()),
    };
    let zone_name = |z: &str| {
        zones::Name::parse(z, Some(&zones::Name::root()))
            .map(|n| n.to_lowercase().to_string())
            .map_err(|e| format!("{z}: {e}"))
    };
    let alg = |a: &str| -> Result<Algorithm, String> {
        toml::Value::String(a.to_ascii_lowercase())
            .try_into()
            .map_err(|_| format!("{a}: expected ecdsap256sha256, ed25519 or rsasha256"))
    };
    let role = |r: &str| -> Result<Role, String> {
        toml::Value::String(r.to_ascii_lowercase())
            .try_into()
            .map_err(|_| format!("{r}: expected csk, ksk or zsk"))
    };
    let now = crate::signing::now();
    let made = |k: Key| {
        format!(
            "{}: key {} written to {}\n",
            k.file.zone,
            k.tag,
            k.path.display()
        )
    };
    match cmd {
        KeyCmd::Generate {
            zone,
            algorithm,
            role: r,
            rsa_bits,
        } => Key::generate(
            &dir,
            &zone_name(&zone)?,
            alg(&algorithm)?,
            rsa_bits,
            role(&r)?,
            now,
            Some(now),
        )
        .map(made)
        .map_err(|e| e.to_string()),
        KeyCmd::Import {
            zone,
            file,
            algorithm,
            role: r,
        } => {
            let der = read_pkcs8(&file).map_err(|e| e.to_string())?;
            Key::import_der(
                &dir,
                &zone_name(&zone)?,
                alg(&algorithm)?,
                role(&r)?,
                &der,
                now,
                Some(now),
            )
            .map(made)
            .map_err(|e| e.to_string())
        }
        KeyCmd::List { zone } => {
            crate::signing::keys_text(&dir, &zone_name(&zone)?, now).map_err(|e| e.to_string())
        }
    }
}

/// Runs `dnsd redis-key ...`.
pub fn redis_key(cmd: &RedisKeyCmd) -> Result<String, String> {
    match cmd {
        RedisKeyCmd::Generate { file } => shield::fleet_key::generate(file)
            .map(|()| format!("{}: fleet key written (mode 0600)\n", file.display()))
            .map_err(|e| e.to_string()),
        RedisKeyCmd::Check { file } => shield::fleet_key::FleetKey::load(file)
            .map(|_| format!("{}: ok\n", file.display()))
            .map_err(|e| e.to_string()),
    }
}
