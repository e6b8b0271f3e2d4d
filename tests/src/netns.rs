//! Network namespaces with a veth pair, created by a test and deleted on drop.
//!
//! [`VethPair::new`] makes two namespaces with unique names (pid + counter), joins them with a
//! veth pair, gives each end an address from 192.0.2.0/24 and 2001:db8::/64 (documentation
//! ranges, never routed) plus static neighbour entries (so no ARP/ND is needed, even for
//! sources a test blocks), and brings the links up. [`Netns::run`] runs a closure on a thread
//! that has `setns`-ed into the namespace: sockets it creates live there, and interface names
//! resolve there. Everything is deleted in `Drop`, also when the test panics.
//!
//! Uses `ip` (iproute2) and needs root; [`available`] says why not otherwise.

use std::fmt;
use std::fs::File;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

const CLONE_NEWNET: i32 = 0x4000_0000;

unsafe extern "C" {
    fn setns(fd: i32, nstype: i32) -> i32;
    fn geteuid() -> u32;
}

static NEXT: AtomicU32 = AtomicU32::new(0);

/// `Ok` when namespaces can be made here (root and `ip` present); else why not.
pub fn available() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { geteuid() } != 0 {
        return Err("not root: network namespaces need CAP_SYS_ADMIN".into());
    }
    match Command::new("ip").arg("-V").output() {
        Ok(o) if o.status.success() => Ok(()),
        _ => Err("`ip` (iproute2) not found".into()),
    }
}

/// Runs `ip args...`, failing with its stderr.
pub fn ip(args: &[&str]) -> io::Result<()> {
    let out = Command::new("ip").args(args).output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// One named network namespace (`/run/netns/NAME`); deleted on drop.
pub struct Netns {
    name: String,
}

impl fmt::Debug for Netns {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Netns").field("name", &self.name).finish()
    }
}

impl Netns {
    /// Creates a namespace called `name` with its loopback up.
    pub fn new(name: &str) -> io::Result<Self> {
        ip(&["netns", "add", name])?;
        let ns = Netns {
            name: name.to_owned(),
        };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `ip -n NAME args...`.
    pub fn ip(&self, args: &[&str]) -> io::Result<()> {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        ip(&all)
    }

    /// Moves the calling thread into this namespace (for good: use [`Netns::run`] unless the
    /// thread is yours).
    pub fn enter(&self) -> io::Result<()> {
        let f = File::open(format!("/run/netns/{}", self.name))?;
        // SAFETY: f is an open namespace file; setns only affects the calling thread.
        if unsafe { setns(f.as_raw_fd(), CLONE_NEWNET) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// A command whose process enters this namespace (its network namespace only: unlike
    /// `ip netns exec`, which remounts /sys, the process sees the host's /sys/fs/bpf, as a
    /// daemon on a real node does), and is killed when the test process dies.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> std::process::Command {
        use std::os::unix::process::CommandExt as _;
        let f = File::open(format!("/run/netns/{}", self.name)).expect("netns file");
        let mut cmd = std::process::Command::new(program);
        // SAFETY: setns and prctl are async-signal-safe; the file stays open in the parent
        // until the child has execed (moved into the closure; O_CLOEXEC closes it on exec).
        unsafe {
            cmd.pre_exec(move || {
                if setns(f.as_raw_fd(), CLONE_NEWNET) != 0 {
                    return Err(io::Error::last_os_error());
                }
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        cmd
    }

    /// Runs `f` on a new thread inside this namespace and returns its result; a panic in `f`
    /// is re-raised here.
    pub fn run<T: Send, F: FnOnce() -> T + Send>(&self, f: F) -> io::Result<T> {
        std::thread::scope(|s| {
            let h = s.spawn(|| -> io::Result<T> {
                self.enter()?;
                Ok(f())
            });
            match h.join() {
                Ok(r) => r,
                Err(p) => std::panic::resume_unwind(p),
            }
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Err(e) = ip(&["netns", "del", &self.name]) {
            eprintln!("netns: deleting {}: {e}", self.name);
        }
    }
}

/// A pin directory of this test alone for `xdp-guard attach` in `ns`
/// (`/sys/fs/bpf/palisade-TAG-PID`): the guard is detached there and the pins removed on drop.
#[derive(Debug)]
pub struct Pins<'a> {
    /// The pin directory.
    pub path: std::path::PathBuf,
    ns: &'a Netns,
}

impl<'a> Pins<'a> {
    /// The pin directory tagged `tag` for a guard in `ns`.
    pub fn new(ns: &'a Netns, tag: &str) -> Self {
        Pins {
            path: format!("/sys/fs/bpf/palisade-{tag}-{}", std::process::id()).into(),
            ns,
        }
    }
}

impl Drop for Pins<'_> {
    fn drop(&mut self) {
        let _ = self
            .ns
            .command(crate::bin("xdp-guard"))
            .args(["detach", "--purge", "--pin-path"])
            .arg(&self.path)
            .output();
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Two namespaces joined by a veth pair, addressed and up.
#[derive(Debug)]
pub struct VethPair {
    /// Side A (typically the sender).
    pub a: Netns,
    /// Side B (typically the receiver, where XDP is attached).
    pub b: Netns,
    /// Name of the veth end in A.
    pub if_a: String,
    /// Name of the veth end in B.
    pub if_b: String,
}

impl VethPair {
    /// Makes the client side (`a`) take the frames an XDP program on `b` sends back with
    /// XDP_TX: a veth needs NAPI for them, which an XDP program that passes everything
    /// (compiled here with clang, in `dir`) gives it.
    pub fn client_takes_xdp_tx(&self, dir: &std::path::Path) {
        let src = dir.join("pass.c");
        std::fs::write(
            &src,
            "#include <linux/bpf.h>\n\
             __attribute__((section(\"xdp\"), used)) int xdp_pass(struct xdp_md *c) { return XDP_PASS; }\n\
             char _license[] __attribute__((section(\"license\"), used)) = \"GPL\";\n",
        )
        .unwrap();
        let obj = dir.join("pass.o");
        let st = Command::new("clang")
            .args([
                "-target",
                "bpf",
                "-O2",
                "-I/usr/include/x86_64-linux-gnu",
                "-c",
            ])
            .arg(&src)
            .arg("-o")
            .arg(&obj)
            .status()
            .expect("clang");
        assert!(st.success(), "clang of the pass program failed");
        self.a
            .ip(&[
                "link",
                "set",
                "dev",
                &self.if_a,
                "xdpdrv",
                "obj",
                obj.to_str().unwrap(),
                "sec",
                "xdp",
            ])
            .expect("attach the pass program to the client's veth");
    }

    /// Side A's IPv4 address.
    pub const A4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
    /// Side B's IPv4 address.
    pub const B4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
    /// Side A's IPv6 address.
    pub const A6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
    /// Side B's IPv6 address.
    pub const B6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);
    /// Side A's MAC address.
    pub const MAC_A: &str = "02:00:c0:00:02:01";
    /// Side B's MAC address.
    pub const MAC_B: &str = "02:00:c0:00:02:02";

    /// Creates the namespaces and the veth pair with unique names.
    pub fn new() -> io::Result<Self> {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let tag = format!("{}x{n}", std::process::id());
        let a = Netns::new(&format!("pal{tag}a"))?;
        let b = Netns::new(&format!("pal{tag}b"))?;
        // Interface names: at most 15 bytes.
        let short = format!("{:x}{n:x}", std::process::id() % 0x10_0000);
        let pair = VethPair {
            a,
            b,
            if_a: format!("pv{short}a"),
            if_b: format!("pv{short}b"),
        };
        // Created inside A with the peer placed in B: nothing ever exists in the caller's
        // namespace, and deleting the namespaces deletes the pair.
        pair.a.ip(&[
            "link",
            "add",
            &pair.if_a,
            "address",
            Self::MAC_A,
            "type",
            "veth",
            "peer",
            "name",
            &pair.if_b,
            "address",
            Self::MAC_B,
            "netns",
            pair.b.name(),
        ])?;
        for (ns, ifn, v4, v6, peer4, peer6, peer_mac) in [
            (
                &pair.a,
                &pair.if_a,
                Self::A4,
                Self::A6,
                Self::B4,
                Self::B6,
                Self::MAC_B,
            ),
            (
                &pair.b,
                &pair.if_b,
                Self::B4,
                Self::B6,
                Self::A4,
                Self::A6,
                Self::MAC_A,
            ),
        ] {
            ns.ip(&["addr", "add", &format!("{v4}/24"), "dev", ifn])?;
            ns.ip(&["addr", "add", &format!("{v6}/64"), "dev", ifn, "nodad"])?;
            ns.ip(&["link", "set", ifn, "up"])?;
            for peer in [IpAddr::V4(peer4), IpAddr::V6(peer6)] {
                ns.ip(&[
                    "neigh",
                    "replace",
                    &peer.to_string(),
                    "lladdr",
                    peer_mac,
                    "dev",
                    ifn,
                    "nud",
                    "permanent",
                ])?;
            }
        }
        Ok(pair)
    }

    /// Adds another address (from 192.0.2.0/24 or 2001:db8::/64) to side A, so A can send
    /// from several sources; B learns its neighbour entry.
    pub fn add_source(&self, ip: IpAddr) -> io::Result<()> {
        let (len, extra): (u8, &[&str]) = match ip {
            IpAddr::V4(_) => (24, &[]),
            IpAddr::V6(_) => (64, &["nodad"]),
        };
        let mut args = vec![
            "addr".to_owned(),
            "add".into(),
            format!("{ip}/{len}"),
            "dev".into(),
            self.if_a.clone(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.a.ip(&args)?;
        self.b.ip(&[
            "neigh",
            "replace",
            &ip.to_string(),
            "lladdr",
            Self::MAC_A,
            "dev",
            &self.if_b,
            "nud",
            "permanent",
        ])
    }
}

/// Pins the calling thread to the CPU it runs on: XDP on a veth runs on the sender's CPU, and
/// its rate buckets are per CPU — a burst whose thread moved would meet two buckets.
pub fn pin_to_current_cpu() {
    // SAFETY: sched_getcpu has no preconditions; a zeroed cpu_set_t is an empty set and
    // CPU_SET writes within it.
    unsafe {
        let Ok(cpu) = usize::try_from(libc::sched_getcpu()) else {
            return;
        };
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set);
    }
}
