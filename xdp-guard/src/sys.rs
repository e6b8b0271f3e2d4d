//! Thin wrappers over the raw bpf(2) map commands that aya 0.14 lacks (batch operations) or
//! that are simpler on raw bytes (per-CPU values, key iteration).
//!
//! Batch commands (Linux 5.6+) report how many elements they processed even when they fail,
//! so each wrapper returns that count with the result.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
const BPF_MAP_GET_NEXT_KEY: libc::c_long = 4;
const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;
const BPF_MAP_UPDATE_BATCH: libc::c_long = 26;
const BPF_MAP_DELETE_BATCH: libc::c_long = 27;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
const BPF_OBJ_GET: libc::c_long = 7;

/// `BPF_ANY`: create or update.
pub(crate) const BPF_ANY: u64 = 0;
/// `BPF_EXIST`: update only.
pub(crate) const BPF_EXIST: u64 = 2;

/// `union bpf_attr` for the element commands.
#[repr(C)]
#[derive(Default)]
struct ElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value_or_next_key: u64,
    flags: u64,
}

/// `union bpf_attr` for the batch commands.
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

fn bpf<T>(cmd: libc::c_long, attr: &mut T) -> io::Result<()> {
    // SAFETY: attr points to a live, initialised bpf_attr prefix of the given size; the
    // kernel reads (and for some commands writes) only within it.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            (attr as *mut T).cast::<libc::c_void>(),
            size_of::<T>() as libc::c_uint,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn fd_u32(fd: BorrowedFd<'_>) -> u32 {
    fd.as_raw_fd() as u32
}

/// Looks `key` up into `value` (whose length must be the map's value size, times the number
/// of possible CPUs for per-CPU maps). `Ok(false)` when the key is absent.
pub(crate) fn lookup(fd: BorrowedFd<'_>, key: &[u8], value: &mut [u8]) -> io::Result<bool> {
    let mut a = ElemAttr {
        map_fd: fd_u32(fd),
        key: key.as_ptr() as u64,
        value_or_next_key: value.as_mut_ptr() as u64,
        ..Default::default()
    };
    match bpf(BPF_MAP_LOOKUP_ELEM, &mut a) {
        Ok(()) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Creates or replaces one element.
pub(crate) fn update(fd: BorrowedFd<'_>, key: &[u8], value: &[u8], flags: u64) -> io::Result<()> {
    let mut a = ElemAttr {
        map_fd: fd_u32(fd),
        key: key.as_ptr() as u64,
        value_or_next_key: value.as_ptr() as u64,
        flags,
        ..Default::default()
    };
    bpf(BPF_MAP_UPDATE_ELEM, &mut a)
}

/// Deletes one element; `Ok(false)` when it was not there.
pub(crate) fn delete(fd: BorrowedFd<'_>, key: &[u8]) -> io::Result<bool> {
    let mut a = ElemAttr {
        map_fd: fd_u32(fd),
        key: key.as_ptr() as u64,
        ..Default::default()
    };
    match bpf(BPF_MAP_DELETE_ELEM, &mut a) {
        Ok(()) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Writes the key after `key` (the first key when `None`) into `next`; `Ok(false)` at the end.
pub(crate) fn next_key(
    fd: BorrowedFd<'_>,
    key: Option<&[u8]>,
    next: &mut [u8],
) -> io::Result<bool> {
    let mut a = ElemAttr {
        map_fd: fd_u32(fd),
        key: key.map_or(0, |k| k.as_ptr() as u64),
        value_or_next_key: next.as_mut_ptr() as u64,
        ..Default::default()
    };
    match bpf(BPF_MAP_GET_NEXT_KEY, &mut a) {
        Ok(()) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        Err(e) => Err(e),
    }
}

/// `BPF_MAP_UPDATE_BATCH` of `count` packed keys and values. Returns how many elements were
/// written, and the error that stopped the batch (the element at that index failed).
pub(crate) fn update_batch(
    fd: BorrowedFd<'_>,
    keys: &[u8],
    values: &[u8],
    count: usize,
) -> (usize, io::Result<()>) {
    let mut a = BatchAttr {
        keys: keys.as_ptr() as u64,
        values: values.as_ptr() as u64,
        count: count as u32,
        map_fd: fd_u32(fd),
        elem_flags: BPF_ANY,
        ..Default::default()
    };
    let r = bpf(BPF_MAP_UPDATE_BATCH, &mut a);
    let done = if r.is_ok() { count } else { a.count as usize };
    (done, r)
}

/// `BPF_MAP_DELETE_BATCH` of `count` packed keys. Returns how many were deleted, and the error
/// that stopped the batch (`ENOENT` when the key at that index was absent).
pub(crate) fn delete_batch(
    fd: BorrowedFd<'_>,
    keys: &[u8],
    count: usize,
) -> (usize, io::Result<()>) {
    let mut a = BatchAttr {
        keys: keys.as_ptr() as u64,
        count: count as u32,
        map_fd: fd_u32(fd),
        ..Default::default()
    };
    let r = bpf(BPF_MAP_DELETE_BATCH, &mut a);
    let done = if r.is_ok() { count } else { a.count as usize };
    (done, r)
}

/// One step of `BPF_MAP_LOOKUP_BATCH`: fills up to `count` keys and values, continuing after
/// `in_batch` (from the start when `None`) and leaving the resume token in `out_batch`.
/// Returns the number of elements read and whether the map was exhausted.
pub(crate) fn lookup_batch(
    fd: BorrowedFd<'_>,
    in_batch: Option<&[u8]>,
    out_batch: &mut [u8],
    keys: &mut [u8],
    values: &mut [u8],
    count: usize,
) -> io::Result<(usize, bool)> {
    let mut a = BatchAttr {
        in_batch: in_batch.map_or(0, |b| b.as_ptr() as u64),
        out_batch: out_batch.as_mut_ptr() as u64,
        keys: keys.as_mut_ptr() as u64,
        values: values.as_mut_ptr() as u64,
        count: count as u32,
        map_fd: fd_u32(fd),
        ..Default::default()
    };
    match bpf(BPF_MAP_LOOKUP_BATCH, &mut a) {
        Ok(()) => Ok((a.count as usize, false)),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok((a.count as usize, true)),
        Err(e) => Err(e),
    }
}

/// `union bpf_attr` for `BPF_OBJ_GET_INFO_BY_FD`.
#[repr(C)]
#[derive(Default)]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// Fills `buf` with the kernel's info struct of the object `fd` (map, program or link).
fn obj_info(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<()> {
    let mut a = InfoAttr {
        bpf_fd: fd_u32(fd),
        info_len: buf.len() as u32,
        info: buf.as_mut_ptr() as u64,
    };
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut a)
}

/// `union bpf_attr` for `BPF_OBJ_GET`.
#[repr(C)]
#[derive(Default)]
struct ObjGetAttr {
    pathname: u64,
    bpf_fd: u32,
    file_flags: u32,
}

/// Opens the object pinned at `path` (a map, a program or a link).
pub(crate) fn obj_get(path: &std::path::Path) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd as _;
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))?;
    let mut a = ObjGetAttr {
        pathname: c.as_ptr() as u64,
        ..Default::default()
    };
    // SAFETY: a is a valid bpf_attr prefix; c outlives the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_OBJ_GET,
            (&mut a as *mut ObjGetAttr).cast::<libc::c_void>(),
            size_of::<ObjGetAttr>() as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_ne_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

/// The kernel id of a map (`bpf_map_info.id`): new maps get new ids, so a replaced pin shows.
pub(crate) fn map_id(fd: BorrowedFd<'_>) -> io::Result<u32> {
    let mut b = [0u8; 80];
    obj_info(fd, &mut b)?;
    Ok(u32_at(&b, 4))
}

/// A link's id, its program's id and, for an XDP link, its interface index
/// (`bpf_link_info`: type, id, prog_id, then the union at offset 16).
pub(crate) fn link_info(fd: BorrowedFd<'_>) -> io::Result<(u32, u32, u32)> {
    let mut b = [0u8; 64];
    obj_info(fd, &mut b)?;
    Ok((u32_at(&b, 4), u32_at(&b, 8), u32_at(&b, 16)))
}

/// Number of possible CPUs (the stride of per-CPU map values), from
/// /sys/devices/system/cpu/possible.
pub(crate) fn possible_cpus() -> io::Result<usize> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    parse_cpu_list(s.trim())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("cpu list {s:?}")))
}

/// Highest CPU index + 1 of a list like `0-3,5,7-8`.
fn parse_cpu_list(s: &str) -> Option<usize> {
    let mut max = None;
    for part in s.split(',') {
        let hi = part.rsplit('-').next()?.trim().parse::<usize>().ok()?;
        max = Some(max.map_or(hi, |m: usize| m.max(hi)));
    }
    max.map(|m| m + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0"), Some(1));
        assert_eq!(parse_cpu_list("0-1"), Some(2));
        assert_eq!(parse_cpu_list("0-3,5,7-8"), Some(9));
        assert_eq!(parse_cpu_list(""), None);
    }

    #[test]
    fn attr_layouts_match_the_kernel() {
        // struct { u32 map_fd; u64 key; u64 value; u64 flags; } with the u64s 8-aligned.
        assert_eq!(size_of::<ElemAttr>(), 32);
        assert_eq!(std::mem::offset_of!(ElemAttr, key), 8);
        // The batch struct: in_batch, out_batch, keys, values, count, map_fd, elem_flags, flags.
        assert_eq!(size_of::<BatchAttr>(), 56);
        assert_eq!(std::mem::offset_of!(BatchAttr, count), 32);
        assert_eq!(std::mem::offset_of!(BatchAttr, map_fd), 36);
        assert_eq!(std::mem::offset_of!(BatchAttr, elem_flags), 40);
    }
}
