//! Loading the XDP program, pinning its maps, attaching it to an interface, and detaching it;
//! and the node service's attachment, which outlives the process that made it (`xdp-guard
//! attach` pins the link as `link-<mode>-<interface>` beside the maps; `detach` unpins it).

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use aya::maps::{Map, MapData};
use aya::programs::links::FdLink;
use aya::programs::{TestRun as _, TestRunOptions, Xdp, XdpMode};
use aya::{Ebpf, EbpfLoader};
use tracing::{info, warn};

use crate::Error;
use crate::available::check_available;
use crate::config::{Mode, XdpConfig};
use crate::guard_maps::{Counters, GuardMaps, pinned_matches};
use crate::maps::ALL_MAPS;

/// The program's function name in `bpf/guard.c`.
const PROGRAM: &str = "palisade_guard";

/// The compiled object (`bpf/guard.c` built by build.rs).
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/guard.o"));

/// Prefix of a pinned attachment's file name: `link-<mode>-<interface>` (bpffs refuses
/// names with a dot: a dot in the interface name is written `%`).
const LINK_PREFIX: &str = "link-";

/// File name of the pinned program.
const PROG_PIN: &str = "prog";

/// `BPF_FS_MAGIC` from linux/magic.h.
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

/// The verdict of one `BPF_PROG_TEST_RUN`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// XDP_PASS.
    Pass,
    /// XDP_DROP.
    Drop,
    /// Anything else (the raw XDP action).
    Other(u32),
}

/// Result of [`XdpGuard::test_run`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TestRunResult {
    /// What the program returned (for the last repetition).
    pub verdict: Verdict,
    /// Mean time per repetition, as measured by the kernel.
    pub per_run: Duration,
}

struct Attachment {
    interface: String,
    mode: Mode,
    link: aya::programs::xdp::XdpLinkId,
}

/// The loaded XDP guard: program, maps, and at most one attachment. Dropping it detaches the
/// program; pinned maps stay for the next process.
pub struct XdpGuard {
    ebpf: Ebpf,
    maps: GuardMaps,
    attached: Option<Attachment>,
    pin_dir: Option<PathBuf>,
}

impl std::fmt::Debug for XdpGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdpGuard")
            .field("attached", &self.attached())
            .field("pin_dir", &self.pin_dir)
            .finish_non_exhaustive()
    }
}

fn map_data(m: &Map) -> Option<&MapData> {
    match m {
        Map::HashMap(d)
        | Map::LpmTrie(d)
        | Map::PerCpuLruHashMap(d)
        | Map::Array(d)
        | Map::PerCpuArray(d) => Some(d),
        _ => None,
    }
}

impl XdpGuard {
    /// Loads the program and attaches it to `cfg.interface` in `cfg.mode`: what dnsd calls.
    pub fn start(cfg: &XdpConfig) -> Result<Self, Error> {
        if !cfg.attaches() {
            return Err(Error::Config("interface: required to attach".into()));
        }
        let mut g = Self::load(cfg)?;
        g.attach(&cfg.interface, cfg.mode)?;
        Ok(g)
    }

    /// Loads and verifies the program, creates its maps (or reuses the pinned ones under
    /// `cfg.pin_path`, replacing any whose layout or size differs) and writes the rate-limit
    /// config. Nothing is attached yet.
    pub fn load(cfg: &XdpConfig) -> Result<Self, Error> {
        cfg.validate()?;
        check_available()?;
        let sizes = map_sizes(cfg);
        let mut loader = EbpfLoader::new();
        for (name, size) in ALL_MAPS.iter().zip(sizes) {
            loader.map_max_entries(name, size);
        }
        let pin_dir = if cfg.pin {
            ensure_bpffs(&cfg.pin_path)?;
            for (i, (name, size)) in ALL_MAPS.iter().zip(sizes).enumerate() {
                let path = cfg.pin_path.join(name);
                if pinned_matches(&path, i, size)? == Some(false) {
                    warn!(path = %path.display(), "pinned XDP map has another layout or size; replacing it");
                    std::fs::remove_file(&path).map_err(|source| Error::Bpffs {
                        path: path.clone(),
                        source,
                    })?;
                }
                loader.map_pin_path(name, path);
            }
            Some(cfg.pin_path.clone())
        } else {
            None
        };
        let mut ebpf = loader.load(OBJECT)?;
        let prog: &mut Xdp = ebpf
            .program_mut(PROGRAM)
            .ok_or_else(|| Error::Config(format!("object has no program {PROGRAM}")))?
            .try_into()?;
        prog.load()?;

        let mut found = Vec::new();
        for name in ALL_MAPS {
            let data = ebpf
                .map(name)
                .and_then(map_data)
                .ok_or_else(|| Error::Config(format!("object has no map {name}")))?;
            found.push((name, data));
        }
        let maps = GuardMaps::from_map_data(found, pin_dir.as_deref())?;
        maps.set_config(&cfg.kernel_config())?;
        Ok(Self {
            ebpf,
            maps,
            attached: None,
            pin_dir,
        })
    }

    fn program(&mut self) -> &mut Xdp {
        self.ebpf
            .program_mut(PROGRAM)
            .and_then(|p| <&mut Xdp>::try_from(p).ok())
            .expect("the program was loaded in XdpGuard::load")
    }

    /// Attaches to `interface` (resolved in the calling thread's network namespace); returns
    /// the mode in effect (auto tries native, then generic). Replaces a previous attachment.
    pub fn attach(&mut self, interface: &str, mode: Mode) -> Result<Mode, Error> {
        let c = CString::new(interface).map_err(|_| Error::NoInterface(interface.to_owned()))?;
        // SAFETY: c is a valid NUL-terminated string.
        if unsafe { libc::if_nametoindex(c.as_ptr()) } == 0 {
            return Err(Error::NoInterface(interface.to_owned()));
        }
        self.detach()?;
        let tries: &[(Mode, XdpMode)] = match mode {
            Mode::Native => &[(Mode::Native, XdpMode::Driver)],
            Mode::Generic => &[(Mode::Generic, XdpMode::Skb)],
            Mode::Auto => &[
                (Mode::Native, XdpMode::Driver),
                (Mode::Generic, XdpMode::Skb),
            ],
        };
        let mut last = None;
        for &(m, xm) in tries {
            match self.program().attach(interface, xm) {
                Ok(link) => {
                    info!(interface, mode = %m, "XDP guard attached");
                    if let Some(master) = enslaved_to(interface) {
                        warn!(
                            interface,
                            master,
                            "the interface is a bridge or bond port: replies are routed out of its master, not out of it, so the XDP answer fast path passes every query to dnsd (answer_pass_route); blocks and rate limits work"
                        );
                    }
                    self.attached = Some(Attachment {
                        interface: interface.to_owned(),
                        mode: m,
                        link,
                    });
                    return Ok(m);
                }
                Err(e) => {
                    if tries.len() > 1 {
                        info!(interface, mode = %m, error = %e, "XDP attach failed; trying the next mode");
                    }
                    last = Some(e);
                }
            }
        }
        Err(Error::Attach {
            interface: interface.to_owned(),
            mode,
            source: Box::new(last.expect("at least one mode tried")),
        })
    }

    /// Detaches from the interface (no-op when not attached).
    pub fn detach(&mut self) -> Result<(), Error> {
        if let Some(a) = self.attached.take() {
            self.program().detach(a.link)?;
            info!(interface = %a.interface, "XDP guard detached");
        }
        Ok(())
    }

    /// The interface and mode the program is attached with.
    pub fn attached(&self) -> Option<(&str, Mode)> {
        self.attached
            .as_ref()
            .map(|a| (a.interface.as_str(), a.mode))
    }

    /// Leaves the program attached and its maps pinned after this process exits (the node
    /// service): pins the attachment as `link-<mode>-<interface>` and the program as `prog`
    /// in the pin directory. Needs pinned maps and a kernel that attaches XDP by bpf_link.
    pub fn persist(mut self) -> Result<NodeAttachment, Error> {
        let Some(dir) = self.pin_dir.clone() else {
            return Err(Error::Config(
                "pin = false: nothing outlives the process".into(),
            ));
        };
        let Some(a) = self.attached.take() else {
            return Err(Error::Config("not attached".into()));
        };
        let link = self
            .program()
            .take_link(a.link)
            .map_err(|e| Error::Program(Box::new(e)))?;
        let fd_link = FdLink::try_from(link).map_err(|e| {
            Error::Config(format!(
                "this kernel attached XDP through netlink, not a bpf_link: the guard cannot \
                 outlive the process ({e})"
            ))
        })?;
        let path = dir.join(format!(
            "{LINK_PREFIX}{}-{}",
            a.mode,
            a.interface.replace('.', "%")
        ));
        let pinned = fd_link.pin(&path).map_err(|e| Error::Bpffs {
            path: path.clone(),
            source: match &e {
                aya::pin::PinError::SyscallError(s) => {
                    std::io::Error::new(s.io_error.kind(), format!("{e}: {}", s.io_error))
                }
                _ => std::io::Error::other(e.to_string()),
            },
        })?;
        let prog_path = dir.join(PROG_PIN);
        let _ = std::fs::remove_file(&prog_path);
        if let Err(e) = self.program().pin(&prog_path) {
            warn!(path = %prog_path.display(), error = %e, "pinning the XDP program");
        }
        drop(pinned);
        let att = read_attachment(&path)?;
        info!(interface = %att.interface, mode = %att.mode, pin = %dir.display(), "XDP guard attached for the node");
        Ok(att)
    }

    /// The kernel maps (clone it to give the mirror, metrics and ctl their own handle).
    pub fn maps(&self) -> &GuardMaps {
        &self.maps
    }

    /// The packet counters, summed over CPUs.
    pub fn counters(&self) -> Result<Counters, Error> {
        self.maps.counters()
    }

    /// Where the maps are pinned, when they are.
    pub fn pin_dir(&self) -> Option<&Path> {
        self.pin_dir.as_deref()
    }

    /// Runs the program on one Ethernet frame `repeat` times in the kernel
    /// (`BPF_PROG_TEST_RUN`), with the real maps; the frame must be at least 14 bytes.
    pub fn test_run(&self, frame: &[u8], repeat: u32) -> Result<TestRunResult, Error> {
        self.run_test(frame, repeat, None).map(|(r, _)| r)
    }

    /// Runs the program once on `frame` as [`XdpGuard::test_run`] does, and returns the
    /// frame as the program left it (the reply, when it answered with XDP_TX).
    pub fn test_run_frame(&self, frame: &[u8]) -> Result<(Verdict, Vec<u8>), Error> {
        let mut out = vec![0u8; frame.len() + 4096];
        let (r, n) = self.run_test(frame, 1, Some(&mut out))?;
        out.truncate(n);
        Ok((r.verdict, out))
    }

    fn run_test(
        &self,
        frame: &[u8],
        repeat: u32,
        out: Option<&mut [u8]>,
    ) -> Result<(TestRunResult, usize), Error> {
        let prog: &Xdp = self
            .ebpf
            .program(PROGRAM)
            .and_then(|p| <&Xdp>::try_from(p).ok())
            .expect("the program was loaded in XdpGuard::load");
        let opts = TestRunOptions {
            data_in: Some(frame),
            data_out: out,
            repeat: repeat.max(1),
            ..Default::default()
        };
        let r = prog
            .test_run(opts)
            .map_err(|e| Error::TestRun(Box::new(e)))?;
        let verdict = match r.return_value {
            1 => Verdict::Drop,
            2 => Verdict::Pass,
            v => Verdict::Other(v),
        };
        Ok((
            TestRunResult {
                verdict,
                per_run: r.duration,
            },
            r.data_size_out as usize,
        ))
    }
}

impl Drop for XdpGuard {
    fn drop(&mut self) {
        if let Err(e) = self.detach() {
            warn!(error = %e, "detaching the XDP guard");
        }
    }
}

/// An attachment made by `xdp-guard attach`: a link pinned in the pin directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeAttachment {
    /// The interface it is attached to (from the pin's name).
    pub interface: String,
    /// The mode in effect (from the pin's name).
    pub mode: Mode,
    /// The interface index the kernel holds the link on.
    pub ifindex: u32,
    /// The kernel's link id.
    pub link_id: u32,
    /// The kernel's id of the attached program.
    pub program_id: u32,
    /// The pin.
    pub path: PathBuf,
}

fn read_attachment(path: &Path) -> Result<NodeAttachment, Error> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix(LINK_PREFIX))
        .ok_or_else(|| Error::Config(format!("{}: not a link pin", path.display())))?;
    let (mode, interface) = name
        .split_once('-')
        .ok_or_else(|| Error::Config(format!("{}: no mode in the name", path.display())))?;
    let interface = interface.replace('%', ".");
    let mode = match mode {
        "native" => Mode::Native,
        "generic" => Mode::Generic,
        _ => Mode::Auto,
    };
    let bpf_err = |source| Error::Bpffs {
        path: path.to_path_buf(),
        source,
    };
    let fd = crate::sys::obj_get(path).map_err(bpf_err)?;
    let (link_id, program_id, ifindex) = {
        use std::os::fd::AsFd as _;
        crate::sys::link_info(fd.as_fd()).map_err(bpf_err)?
    };
    Ok(NodeAttachment {
        interface,
        mode,
        ifindex,
        link_id,
        program_id,
        path: path.to_path_buf(),
    })
}

/// The attachments `xdp-guard attach` left in `pin_dir` (none when the directory is absent).
pub fn node_attachments(pin_dir: &Path) -> Result<Vec<NodeAttachment>, Error> {
    let rd = match std::fs::read_dir(pin_dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(Error::Bpffs {
                path: pin_dir.to_path_buf(),
                source,
            });
        }
    };
    let mut out = Vec::new();
    for e in rd.flatten() {
        if e.file_name().to_string_lossy().starts_with(LINK_PREFIX) {
            out.push(read_attachment(&e.path())?);
        }
    }
    out.sort_by(|a, b| a.interface.cmp(&b.interface));
    Ok(out)
}

/// Detaches what `xdp-guard attach` attached (on `interface` only, when given): unpins the
/// links (the kernel detaches a link when its last reference goes) and the program. The
/// maps stay pinned, with their blocks, for the next attach and for the daemons.
pub fn detach_node(pin_dir: &Path, interface: Option<&str>) -> Result<Vec<NodeAttachment>, Error> {
    let mut gone = Vec::new();
    for a in node_attachments(pin_dir)? {
        if interface.is_some_and(|i| i != a.interface) {
            continue;
        }
        std::fs::remove_file(&a.path).map_err(|source| Error::Bpffs {
            path: a.path.clone(),
            source,
        })?;
        info!(interface = %a.interface, "XDP guard detached from the node");
        gone.push(a);
    }
    if node_attachments(pin_dir)?.is_empty() {
        let _ = std::fs::remove_file(pin_dir.join(PROG_PIN));
    }
    Ok(gone)
}

/// Makes `dir` a directory on bpffs, mounting bpffs on /sys/fs/bpf first if `dir` is under it
/// and nothing is mounted there.
pub fn ensure_bpffs(dir: &Path) -> Result<(), Error> {
    let err = |path: &Path, source| Error::Bpffs {
        path: path.to_path_buf(),
        source,
    };
    let root = Path::new("/sys/fs/bpf");
    if dir.starts_with(root) && !is_bpffs(root) {
        std::fs::create_dir_all(root).map_err(|e| err(root, e))?;
        let (src, target, fstype) = (c"bpf", c"/sys/fs/bpf", c"bpf");
        // SAFETY: valid NUL-terminated strings; no data argument.
        let r = unsafe {
            libc::mount(
                src.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                0,
                std::ptr::null(),
            )
        };
        if r != 0 {
            return Err(err(root, std::io::Error::last_os_error()));
        }
        info!("mounted bpffs on /sys/fs/bpf");
        // Where nothing had mounted it, this may be a mount namespace of the process's own
        // (`ip netns exec` remounts /sys): it said "attached" and left nothing behind.
        tracing::warn!(
            "bpffs was not mounted on /sys/fs/bpf and is mounted now: if this process runs in \
             a mount namespace of its own (as `ip netns exec` makes), the pins, and an \
             attachment held by them, vanish when it ends and no other process sees them — \
             run it with `nsenter --net=/run/netns/NAME` instead"
        );
    }
    std::fs::create_dir_all(dir).map_err(|e| err(dir, e))?;
    if !is_bpffs(dir) {
        return Err(err(
            dir,
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "not on a bpf filesystem"),
        ));
    }
    Ok(())
}

fn is_bpffs(p: &Path) -> bool {
    let Ok(c) = CString::new(p.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: statfs is plain data; zeroed is a valid initial value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: c is NUL-terminated and st is writable.
    let r = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    r == 0 && st.f_type as i64 == BPF_FS_MAGIC
}

/// The bridge or bond `interface` is a port of, if any (its `master` in sysfs).
fn enslaved_to(interface: &str) -> Option<String> {
    let link = std::fs::read_link(format!("/sys/class/net/{interface}/master")).ok()?;
    link.file_name().map(|n| n.to_string_lossy().into_owned())
}

/// Each map's capacity (`max_entries`) under `cfg`, in [`ALL_MAPS`] order.
pub fn map_sizes(cfg: &XdpConfig) -> [u32; ALL_MAPS.len()] {
    [
        cfg.block_v4_entries,
        cfg.block_v6_entries,
        cfg.prefix_v4_entries,
        cfg.prefix_v6_entries,
        cfg.rate_entries,
        1,
        1,
        cfg.allow_entries,
        cfg.allow_entries,
        // Two generations: the live one and the one a publish stages beside it (the map
        // is not preallocated: only a publish's overlap costs memory).
        cfg.answer_entries.saturating_mul(2),
        crate::maps::DEFAULT_ANS_ADDR_ENTRIES,
        1,
        crate::maps::DEFAULT_ANS_RATE_ENTRIES,
        crate::maps::DEFAULT_SVC_ENTRIES,
        crate::maps::DEFAULT_PROXY_ENTRIES,
        crate::maps::DEFAULT_SUSPECT_ENTRIES,
        crate::maps::DEFAULT_NEVER_ENTRIES,
    ]
}

/// Whether every map pinned under `cfg.pin_path` has `cfg`'s layout and capacity (false
/// when one is missing or differs: an attach must replace them).
pub fn pinned_maps_fit(cfg: &XdpConfig) -> Result<bool, Error> {
    for (i, (name, size)) in ALL_MAPS.iter().zip(map_sizes(cfg)).enumerate() {
        if pinned_matches(&cfg.pin_path.join(name), i, size)? != Some(true) {
            return Ok(false);
        }
    }
    Ok(true)
}
