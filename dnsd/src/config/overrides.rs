//! Values given as `dnsd serve` flags, laid over the config file: at start and again at each
//! reload, so that a reload keeps what the flags set (a `--zone` stayed served, a `--metrics`
//! address was not taken for a change waiting for a restart).

use std::path::PathBuf;

use super::{Config, ZoneConfig};

/// The `serve` flags that set config values.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--listen`: IP:PORT, or an address or prefix (repeatable).
    pub listen: Vec<String>,
    /// `--port`.
    pub port: Option<u16>,
    /// `--zone ORIGIN=FILE` (repeatable).
    pub zones: Vec<String>,
    /// `--control`.
    pub control: Option<PathBuf>,
    /// `--metrics`.
    pub metrics: Option<String>,
    /// `--workers`.
    pub workers: Option<usize>,
}

impl Overrides {
    /// Lays the flags over `cfg`; an error names the flag.
    pub fn apply(&self, cfg: &mut Config) -> Result<(), String> {
        if !self.listen.is_empty() {
            let mut addrs = Vec::new();
            let mut ports = Vec::new();
            for l in &self.listen {
                if let Ok(sa) = l.parse::<std::net::SocketAddr>() {
                    addrs.push(sa.ip().to_string());
                    ports.push(sa.port());
                } else {
                    addrs.push(l.clone());
                }
            }
            ports.dedup();
            if ports.len() > 1 {
                return Err("--listen: all addresses must use one port".into());
            }
            cfg.server.listen = addrs;
            if let Some(p) = ports.first() {
                cfg.server.port = *p;
            }
        }
        if let Some(p) = self.port {
            cfg.server.port = p;
        }
        for z in &self.zones {
            let (origin, file) = z
                .split_once('=')
                .ok_or_else(|| format!("--zone {z}: expected ORIGIN=FILE"))?;
            cfg.zones.push(ZoneConfig {
                origin: origin.into(),
                file: file.into(),
                key: format!("--zone {z}"),
                ..Default::default()
            });
        }
        if self.control.is_some() {
            cfg.control.socket.clone_from(&self.control);
        }
        if self.metrics.is_some() {
            cfg.metrics.listen.clone_from(&self.metrics);
        }
        if let Some(w) = self.workers {
            cfg.server.workers = w;
        }
        Ok(())
    }
}
