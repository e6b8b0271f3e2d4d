//! TCP steering with BPF socket lookup (`sk_lookup`, Linux 5.9): one listening socket per
//! daemon and family receives the connections to all of its service addresses, so that
//! another listener on the same port at another address (a local resolver on 127.0.0.53:53, a
//! management address) keeps its own — where the wildcard socket could not even be bound.
//!
//! `xdp-guard attach` installs the program ([`install`]) in its network namespace and pins
//! its link and maps in the pin directory; a daemon registers its listeners and addresses
//! there ([`Steering`]) and withdraws them when it stops. Unregistered addresses, and those
//! whose socket is gone, take the kernel's regular lookup.

use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;

use aya::EbpfLoader;
use aya::programs::SkLookup;
use aya::programs::links::FdLink;
use tracing::info;

use crate::Error;
use crate::sys;

/// The compiled object (`bpf/sklookup.c` built by build.rs).
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/sklookup.o"));

/// The program's function name.
const PROGRAM: &str = "palisade_sk_lookup";
/// The pinned link (its presence says steering is installed).
pub const LINK_PIN: &str = "sk_lookup_link";
/// The pinned map of service addresses: (address, port) → socket key.
pub const MAP_ADDRS: &str = "guard_sk_addrs";
/// The pinned SOCKHASH: socket key → listening socket.
pub const MAP_SOCKS: &str = "guard_sk_socks";

fn bpffs_err(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Config(format!("{}: {e}", path.display()))
}

/// Installs the steering program in the calling thread's network namespace, its link and
/// maps pinned in `dir` (a bpffs directory); false when it is installed already.
pub fn install(dir: &Path) -> Result<bool, Error> {
    let link_path = dir.join(LINK_PIN);
    if link_path.exists() {
        return Ok(false);
    }
    let mut loader = EbpfLoader::new();
    loader.map_pin_path(MAP_ADDRS, dir.join(MAP_ADDRS));
    loader.map_pin_path(MAP_SOCKS, dir.join(MAP_SOCKS));
    let mut ebpf = loader.load(OBJECT)?;
    let prog: &mut SkLookup = ebpf
        .program_mut(PROGRAM)
        .ok_or_else(|| Error::Config(format!("object has no program {PROGRAM}")))?
        .try_into()
        .map_err(|e| Error::Program(Box::new(e)))?;
    prog.load().map_err(|e| Error::Program(Box::new(e)))?;
    let ns = std::fs::File::open("/proc/thread-self/ns/net")
        .map_err(|e| bpffs_err(Path::new("/proc/thread-self/ns/net"), e))?;
    let id = prog
        .attach(ns.as_fd())
        .map_err(|e| Error::Program(Box::new(e)))?;
    let link: FdLink = prog
        .take_link(id)
        .map_err(|e| Error::Program(Box::new(e)))?
        .into();
    link.pin(&link_path).map_err(|e| bpffs_err(&link_path, e))?;
    info!(pin = %dir.display(), "TCP steering (sk_lookup) installed");
    Ok(true)
}

/// Removes the steering program and its maps from `dir`; false when none was installed.
pub fn uninstall(dir: &Path) -> Result<bool, Error> {
    let link_path = dir.join(LINK_PIN);
    let had = link_path.exists();
    for name in [LINK_PIN, MAP_ADDRS, MAP_SOCKS] {
        let p = dir.join(name);
        if p.exists() {
            std::fs::remove_file(&p).map_err(|e| bpffs_err(&p, e))?;
        }
    }
    Ok(had)
}

/// The key of a service address in [`MAP_ADDRS`]: the address (IPv4 mapped) and the port.
fn addr_key(ip: IpAddr, port: u16) -> [u8; 20] {
    let mut k = [0u8; 20];
    k[..16].copy_from_slice(&crate::mapped(ip));
    k[16..18].copy_from_slice(&port.to_ne_bytes());
    k
}

/// A daemon's registration: its listeners in the socket map and its addresses pointing at
/// them; withdrawn on drop.
#[derive(Debug)]
pub struct Steering {
    addrs: OwnedFd,
    socks: OwnedFd,
    addr_keys: Vec<[u8; 20]>,
    sock_keys: Vec<u64>,
}

impl Steering {
    /// Opens the steering installed in `dir`, or None when `xdp-guard attach` did not
    /// install it there, or installed it in another network namespace than the caller's (its
    /// lookups never see this process's connections: the caller keeps the wildcard socket).
    pub fn open(dir: &Path) -> Result<Option<Steering>, Error> {
        let link_path = dir.join(LINK_PIN);
        if !link_path.exists() {
            return Ok(None);
        }
        let open = |name: &str| {
            let p = dir.join(name);
            sys::obj_get(&p).map_err(|e| bpffs_err(&p, e))
        };
        let link = open(LINK_PIN)?;
        let (_, _, link_netns) =
            sys::link_info(link.as_fd()).map_err(|e| bpffs_err(&link_path, e))?;
        let own_netns = {
            use std::os::unix::fs::MetadataExt as _;
            std::fs::metadata("/proc/thread-self/ns/net")
                .map(|m| m.ino() as u32)
                .ok()
        };
        if own_netns.is_some_and(|own| own != link_netns) {
            tracing::warn!(
                pin = %dir.display(),
                "TCP steering (sk_lookup) of this pin directory is installed in another network namespace; not used here"
            );
            return Ok(None);
        }
        Ok(Some(Steering {
            addrs: open(MAP_ADDRS)?,
            socks: open(MAP_SOCKS)?,
            addr_keys: Vec::new(),
            sock_keys: Vec::new(),
        }))
    }

    /// Registers `listeners` (one per family, bound anywhere) for `addrs` on TCP `port`: the
    /// connections to each address go to the listener of its family.
    pub fn register(
        &mut self,
        listeners: &[&std::net::TcpListener],
        addrs: &[IpAddr],
        port: u16,
    ) -> Result<(), Error> {
        let err = |what: &'static str, e: std::io::Error| Error::Syscall {
            op: what,
            map: MAP_SOCKS,
            source: e,
        };
        let mut by_family: [Option<u64>; 2] = [None, None];
        for l in listeners {
            let v6 = l.local_addr().map_err(|e| err("getsockname", e))?.is_ipv6();
            // One key per process and family: several daemons share the maps.
            let key = (u64::from(std::process::id()) << 8) | u64::from(v6);
            let fd = l.as_raw_fd() as u64;
            sys::update(
                self.socks.as_fd(),
                &key.to_ne_bytes(),
                &fd.to_ne_bytes(),
                sys::BPF_ANY,
            )
            .map_err(|e| err("update", e))?;
            self.sock_keys.push(key);
            by_family[usize::from(v6)] = Some(key);
        }
        for &ip in addrs {
            let Some(key) = by_family[usize::from(ip.is_ipv6())] else {
                continue;
            };
            let k = addr_key(ip, port);
            sys::update(self.addrs.as_fd(), &k, &key.to_ne_bytes(), sys::BPF_ANY).map_err(|e| {
                Error::Syscall {
                    op: "update",
                    map: MAP_ADDRS,
                    source: e,
                }
            })?;
            self.addr_keys.push(k);
        }
        Ok(())
    }

    /// Removes this daemon's addresses and listeners from the maps.
    pub fn withdraw(&mut self) {
        for k in self.addr_keys.drain(..) {
            let _ = sys::delete(self.addrs.as_fd(), &k);
        }
        for k in self.sock_keys.drain(..) {
            let _ = sys::delete(self.socks.as_fd(), &k.to_ne_bytes());
        }
    }
}

impl Drop for Steering {
    fn drop(&mut self) {
        self.withdraw();
    }
}
