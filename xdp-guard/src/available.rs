//! Whether this process can use XDP at all, so the daemon can say once why it runs without.

use crate::config::XdpConfig;
use crate::error::Unavailable;

const CAP_NET_ADMIN: u32 = 12;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_BPF: u32 = 39;
const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_TYPE_ARRAY: u32 = 2;

/// `Ok` when this process may load and attach XDP programs; else why not.
///
/// Checks the effective capabilities, then asks bpf(2) to create (and drop) a one-element map.
pub fn check_available() -> Result<(), Unavailable> {
    if let Some(caps) = effective_caps() {
        let has = |c: u32| caps & (1u64 << c) != 0;
        if !(has(CAP_BPF) || has(CAP_SYS_ADMIN)) || !has(CAP_NET_ADMIN) {
            return Err(Unavailable::NotPrivileged);
        }
    // SAFETY: geteuid has no preconditions.
    } else if unsafe { libc::geteuid() } != 0 {
        return Err(Unavailable::NotPrivileged);
    }
    probe_map_create().map_err(Unavailable::BpfSyscall)
}

/// Why XDP will not run for this config (`None` when it can): no `[xdp]` section, no
/// privileges, or no bpf(2).
pub fn unavailable_reason(cfg: Option<&XdpConfig>) -> Option<Unavailable> {
    if cfg.is_none() {
        return Some(Unavailable::NotConfigured);
    }
    check_available().err()
}

fn effective_caps() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))?
        .trim();
    u64::from_str_radix(hex, 16).ok()
}

fn probe_map_create() -> Result<(), i32> {
    #[repr(C)]
    struct MapCreate {
        map_type: u32,
        key_size: u32,
        value_size: u32,
        max_entries: u32,
    }
    let mut attr = MapCreate {
        map_type: BPF_MAP_TYPE_ARRAY,
        key_size: 4,
        value_size: 4,
        max_entries: 1,
    };
    // SAFETY: attr is a valid bpf_attr prefix for BPF_MAP_CREATE of the given size.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_MAP_CREATE,
            (&mut attr as *mut MapCreate).cast::<libc::c_void>(),
            size_of::<MapCreate>() as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
    }
    // SAFETY: fd was just returned by the kernel and is owned here.
    unsafe { libc::close(fd as libc::c_int) };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_section_is_reported_first() {
        assert_eq!(unavailable_reason(None), Some(Unavailable::NotConfigured));
        let reason = Unavailable::NotConfigured.to_string();
        assert!(reason.contains("[xdp]"));
    }

    #[test]
    fn agrees_with_the_process_privileges() {
        let root = unsafe { libc::geteuid() } == 0;
        let r = check_available();
        if !root {
            assert!(r.is_err(), "unprivileged process reported XDP available");
        }
        if let Err(e) = r {
            assert!(!e.to_string().is_empty());
        }
    }
}
