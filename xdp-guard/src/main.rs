//! xdp-guard: the node's XDP guard as a service of its own. `attach` loads the program, pins
//! its maps and its attachment, and exits: the guard then outlives dnsd's and http-front's
//! restarts, and both daemons mirror their block maps into the pinned maps (each its own
//! writer slot). `detach`, `status`, `stats` and `list` work on what is pinned; `block` and
//! `unblock` write the operator's slot (a daemon's blocks are its own to lift).

use std::net::IpAddr;

use ipnet::IpNet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use xdp_guard::{
    BlockMapKind, GuardMaps, Mode, SLOT_NAMES, SLOTS, XdpConfig, XdpGuard, boot_ns, detach_node,
    node_attachments,
};

/// The node's XDP guard: attach, detach, status, stats.
#[derive(Parser)]
#[command(name = "xdp-guard", version, about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

/// Where the pins are: the config's `pin_path`, or `--pin-path`, or the default.
#[derive(clap::Args)]
struct Where {
    /// The guard's config (its `pin_path` says where the maps are pinned).
    #[arg(long, short = 'c')]
    config: Option<PathBuf>,
    /// The pin directory (default /sys/fs/bpf/palisade).
    #[arg(long)]
    pin_path: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Load the program, pin its maps and attach it to the config's interface; exits leaving
    /// it attached. Attached already: the rate-limit settings are updated in place.
    Attach {
        /// The guard's config (TOML: interface, mode, dns_ports, rate, burst, map sizes,
        /// pin_path).
        #[arg(long, short = 'c')]
        config: PathBuf,
    },
    /// Check a guard config (file:line:key on a problem); exit 0 when `attach` would read it.
    CheckConfig {
        /// The guard's config.
        #[arg(long, short = 'c')]
        config: PathBuf,
    },
    /// Detach the program (the maps stay pinned with their blocks, unless --purge).
    Detach {
        #[command(flatten)]
        at: Where,
        /// Only this interface (default: every attachment).
        #[arg(long)]
        interface: Option<String>,
        /// Remove the pinned maps too (every daemon's blocks with them).
        #[arg(long)]
        purge: bool,
    },
    /// Attachments, map fill per writer slot, rate-limit settings. Exit 0 attached, 3 not.
    Status {
        #[command(flatten)]
        at: Where,
    },
    /// Packet counters by verdict (summed over CPUs), one `name<TAB>value` per line.
    Stats {
        #[command(flatten)]
        at: Where,
        /// Set the counters back to zero after reading them.
        #[arg(long)]
        reset: bool,
    },
    /// Block an address or prefix in the operator's slot, for SECONDS (default: until unblocked).
    Block {
        #[command(flatten)]
        at: Where,
        /// The address or prefix.
        #[arg(value_parser = parse_net)]
        net: IpNet,
        /// How long, in seconds.
        #[arg(long)]
        ttl: Option<u64>,
    },
    /// Lift the operator's block of exactly this address or prefix (daemons' blocks stay).
    Unblock {
        #[command(flatten)]
        at: Where,
        /// The address or prefix.
        #[arg(value_parser = parse_net)]
        net: IpNet,
    },
    /// The blocks in the maps, every writer slot's expiry.
    List {
        #[command(flatten)]
        at: Where,
        /// Only the entry that drops this address (address or prefix).
        #[arg(long)]
        addr: Option<IpAddr>,
    },
}

/// An address (a host prefix) or a prefix.
fn parse_net(s: &str) -> Result<IpNet, String> {
    s.parse::<IpNet>()
        .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| format!("{s:?}: not an address or prefix"))
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

/// Reads and checks a guard config; errors name the file, line and key.
fn load_config(path: &Path) -> Result<XdpConfig, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let cfg: XdpConfig = toml::from_str(&text).map_err(|e| {
        let l = shield::toml_pos::locate(&text, &e);
        let key = if l.key.is_empty() {
            String::new()
        } else {
            format!(" {}:", l.key)
        };
        format!(
            "{}:{}:{}:{key} {}",
            path.display(),
            l.line,
            l.col,
            l.message
        )
    })?;
    cfg.validate()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if !cfg.attaches() {
        return Err(format!("{}: interface: required", path.display()));
    }
    if !cfg.pin {
        return Err(format!(
            "{}: pin = false: the node's guard pins its maps (that is what daemons open)",
            path.display()
        ));
    }
    Ok(cfg)
}

fn pin_dir(at: &Where) -> Result<PathBuf, String> {
    if let Some(p) = &at.pin_path {
        return Ok(p.clone());
    }
    if let Some(c) = &at.config {
        return Ok(load_config(c)?.pin_path);
    }
    Ok(PathBuf::from(xdp_guard::DEFAULT_PIN_PATH))
}

fn open(dir: &Path) -> Result<GuardMaps, String> {
    GuardMaps::open_pinned(dir).map_err(|e| format!("maps at {}: {e}", dir.display()))
}

/// Turns on what the route look-up of XDP's replies (answers, rate-limit slips) needs (dnsd,
/// with fewer privileges, may not).
fn route_lookups() {
    match xdp_guard::enable_route_lookups() {
        Ok(changed) => {
            for path in changed {
                println!("{path}: set to 1 for the route look-up of XDP's replies");
            }
        }
        Err((path, e)) => eprintln!(
            "warning: {path}: {e}: without it XDP answers nothing (every query passes to dnsd, answer_pass_route) and slips no TC=1 reply past the rate limit"
        ),
    }
}

fn attach(config: &Path) -> Result<(), String> {
    let cfg = load_config(config)?;
    xdp_guard::check_available().map_err(|e| format!("XDP unavailable: {e}"))?;
    route_lookups();
    let existing = node_attachments(&cfg.pin_path).map_err(|e| e.to_string())?;
    if let Some(a) = existing.iter().find(|a| a.interface == cfg.interface) {
        // Attached already: the same maps if they still fit, with the new rate settings.
        // Every map's size counts: one left as it was (answer_entries, rate_entries) was
        // said "updated" and kept its old size.
        let fit = xdp_guard::pinned_maps_fit(&cfg).unwrap_or(false);
        match GuardMaps::open_pinned(&cfg.pin_path) {
            Ok(maps) if fit => {
                maps.set_config(&cfg.kernel_config())
                    .map_err(|e| e.to_string())?;
                println!(
                    "already attached to {} ({}, program {}): rate settings updated",
                    a.interface, a.mode, a.program_id
                );
                steer(&cfg);
                return Ok(());
            }
            _ => {
                // New sizes or an older layout: replace program and maps (the daemons
                // reopen the new pins and resync their slots).
                detach_node(&cfg.pin_path, Some(&cfg.interface)).map_err(|e| e.to_string())?;
                println!(
                    "{}: map sizes or layout changed: replacing the attachment",
                    cfg.interface
                );
            }
        }
    }
    let mut guard = XdpGuard::load(&cfg).map_err(|e| e.to_string())?;
    let mode = guard
        .attach(&cfg.interface, cfg.mode)
        .map_err(|e| e.to_string())?;
    let a = guard.persist().map_err(|e| e.to_string())?;
    println!(
        "attached to {} ({mode}, program {}, link {}); maps pinned at {}",
        a.interface,
        a.program_id,
        a.link_id,
        cfg.pin_path.display()
    );
    steer(&cfg);
    Ok(())
}

/// Installs TCP steering (sk_lookup) beside the guard when the config asks for it; a kernel
/// without it leaves the daemons on their own listeners (said, not fatal).
fn steer(cfg: &XdpConfig) {
    if !cfg.tcp_steering {
        return;
    }
    match xdp_guard::sk_lookup::install(&cfg.pin_path) {
        Ok(true) => println!(
            "TCP steering (sk_lookup) installed in this network namespace; pinned at {}",
            cfg.pin_path.display()
        ),
        Ok(false) => {}
        Err(e) => eprintln!(
            "xdp-guard: TCP steering (sk_lookup) not installed: {e}; daemons use their own TCP listeners"
        ),
    }
}

fn detach(at: &Where, interface: Option<&str>, purge: bool) -> Result<(), String> {
    let dir = pin_dir(at)?;
    let gone = detach_node(&dir, interface).map_err(|e| e.to_string())?;
    if gone.is_empty() {
        println!("not attached (nothing pinned at {})", dir.display());
    }
    // The last attachment gone (or --purge): the TCP steering goes with it.
    let left = node_attachments(&dir).map(|a| a.len()).unwrap_or(0);
    if (left == 0 || purge) && xdp_guard::sk_lookup::uninstall(&dir).map_err(|e| e.to_string())? {
        println!("TCP steering (sk_lookup) removed");
    }
    for a in &gone {
        println!("detached from {}", a.interface);
    }
    if purge {
        let mut removed = 0;
        for name in xdp_guard::maps::ALL_MAPS {
            match std::fs::remove_file(dir.join(name)) {
                Ok(()) => removed += 1,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(format!("{}: {e}", dir.join(name).display())),
            }
        }
        // Says what it did: nothing, when nothing was pinned there.
        if removed > 0 {
            println!("{removed} maps unpinned from {}", dir.display());
        } else {
            println!("no maps pinned at {}", dir.display());
        }
    }
    Ok(())
}

fn status(at: &Where) -> Result<bool, String> {
    let dir = pin_dir(at)?;
    let atts = node_attachments(&dir).map_err(|e| e.to_string())?;
    if atts.is_empty() {
        println!("attached: no (pin directory {})", dir.display());
    }
    println!(
        "TCP steering (sk_lookup): {}",
        if dir.join(xdp_guard::sk_lookup::LINK_PIN).exists() {
            "installed"
        } else {
            "not installed"
        }
    );
    for a in &atts {
        let mode = match a.mode {
            Mode::Auto => "unknown".to_string(),
            m => m.to_string(),
        };
        println!(
            "attached: {} ({mode}), ifindex {}, program {}, link {}",
            a.interface, a.ifindex, a.program_id, a.link_id
        );
    }
    let maps = match GuardMaps::open_pinned(&dir) {
        Ok(m) => m,
        Err(e) => {
            println!("maps: {e}");
            return Ok(!atts.is_empty());
        }
    };
    let now = boot_ns();
    println!("maps: {}", dir.display());
    for kind in BlockMapKind::ALL {
        let entries = maps.entries(kind).map_err(|e| e.to_string())?;
        let live = entries
            .iter()
            .filter(|e| e.value.is_live_for_dns(now))
            .count();
        let mut per_slot = [0usize; SLOTS];
        for e in &entries {
            for (i, n) in per_slot.iter_mut().enumerate() {
                let v = e.value.expires_ns[i];
                if v != 0 && v > now {
                    *n += 1;
                }
            }
        }
        let slots: Vec<String> = SLOT_NAMES
            .iter()
            .zip(per_slot)
            .map(|(n, c)| format!("{n} {c}"))
            .collect();
        println!(
            "  {:<15} {:>8} / {:<8} live {:<8} by writer: {}",
            kind.name(),
            entries.len(),
            maps.capacity(kind),
            live,
            slots.join(", ")
        );
    }
    let c = maps.config().map_err(|e| e.to_string())?;
    if c.flags & xdp_guard::maps::F_RATELIMIT != 0 {
        let ports: Vec<String> = (0..=u16::MAX)
            .filter(|&p| c.is_dns_port(p))
            .map(|p| p.to_string())
            .collect();
        println!(
            "rate limit: {} packets/s per source, burst {}, UDP ports {}",
            c.rate_pps,
            c.cap_units / xdp_guard::maps::TOKEN_UNIT,
            ports.join(" ")
        );
    } else {
        println!("rate limit: off");
    }
    Ok(!atts.is_empty())
}

fn stats(at: &Where, reset: bool) -> Result<(), String> {
    let maps = open(&pin_dir(at)?)?;
    let c = maps.counters().map_err(|e| e.to_string())?;
    for (name, v) in c.named() {
        println!("xdp.{name}\t{v}");
    }
    if reset {
        maps.reset_counters().map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn list(at: &Where, addr: Option<IpAddr>) -> Result<(), String> {
    let maps = open(&pin_dir(at)?)?;
    let now = boot_ns();
    for kind in BlockMapKind::ALL {
        for e in maps.entries(kind).map_err(|e| e.to_string())? {
            if addr.is_some_and(|a| !e.net.contains(&a)) {
                continue;
            }
            let mut slots = Vec::new();
            for (i, name) in SLOT_NAMES.iter().enumerate() {
                // A DNS-only slot stops UDP to the DNS service alone.
                let scope = if e.value.is_dns_only(i) { "(dns)" } else { "" };
                match e.value.slot(i) {
                    None => {}
                    Some(0) => slots.push(format!("{name}{scope}=never")),
                    Some(ns) if ns <= now => slots.push(format!("{name}{scope}=expired")),
                    Some(ns) => {
                        slots.push(format!("{name}{scope}={}s", (ns - now) / 1_000_000_000))
                    }
                }
            }
            println!("{}\t{}", e.net, slots.join(" "));
        }
    }
    Ok(())
}

fn block(at: &Where, net: IpNet, ttl: Option<u64>) -> Result<(), String> {
    let maps = open(&pin_dir(at)?)?.with_slot(xdp_guard::SLOT_OPERATOR);
    let until = match ttl {
        Some(s) => shield::clock::unix_ms().saturating_add(s.saturating_mul(1000)),
        None => u64::MAX,
    };
    maps.block(net, until).map_err(|e| e.to_string())?;
    match ttl {
        Some(s) => println!("{} blocked for {s} s (operator)", net.trunc()),
        None => println!("{} blocked until unblocked (operator)", net.trunc()),
    }
    Ok(())
}

fn unblock(at: &Where, net: IpNet) -> Result<(), String> {
    let maps = open(&pin_dir(at)?)?.with_slot(xdp_guard::SLOT_OPERATOR);
    if maps.unblock(net).map_err(|e| e.to_string())? {
        println!("{} unblocked (operator)", net.trunc());
        Ok(())
    } else {
        Err(format!("{}: no operator block", net.trunc()))
    }
}

fn main() -> ExitCode {
    init_logging();
    let cli = Cli::parse();
    let r = match &cli.cmd {
        Cmd::Attach { config } => attach(config).map(|_| true),
        Cmd::CheckConfig { config } => load_config(config).map(|c| {
            println!(
                "{}: ok (interface {}, pin path {})",
                config.display(),
                c.interface,
                c.pin_path.display()
            );
            true
        }),
        Cmd::Detach {
            at,
            interface,
            purge,
        } => detach(at, interface.as_deref(), *purge).map(|_| true),
        Cmd::Status { at } => status(at),
        Cmd::Stats { at, reset } => stats(at, *reset).map(|_| true),
        Cmd::List { at, addr } => list(at, *addr).map(|_| true),
        Cmd::Block { at, net, ttl } => block(at, *net, *ttl).map(|_| true),
        Cmd::Unblock { at, net } => unblock(at, *net).map(|_| true),
    };
    match r {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(3),
        Err(e) => {
            eprintln!("xdp-guard: {e}");
            ExitCode::FAILURE
        }
    }
}
