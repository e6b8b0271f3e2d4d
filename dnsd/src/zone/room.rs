//! Room in memory for a zone about to be built. Rust aborts the process when an allocation
//! fails: a reload or a transfer of a zone too big for what is left (an address-space limit,
//! a cgroup's `memory.max`, the machine) took every zone down with it. So a big build first
//! asks for room — its estimated peak, reserved while it runs so that parallel loads count
//! each other — and one that does not fit is refused, naming the zone, while the last good
//! version serves on (as Knot refuses it, "not enough memory").

use std::sync::atomic::{AtomicU64, Ordering};

/// Peak bytes a zone's build takes per byte of master-file text (measured: 1.5 M short
/// records, 34 MB of text, peaked at some 230 MB; records with more data per byte of text
/// take less).
pub const PER_TEXT_BYTE: u64 = 7;

/// Peak bytes a zone's build takes per byte of transfer (wire) data.
pub const PER_WIRE_BYTE: u64 = 8;

/// Builds estimated below this are not checked (100,000 small zones read nothing of /proc).
const CHECKED_FROM: u64 = 64 << 20;

/// Bytes reserved by builds under way.
static RESERVED: AtomicU64 = AtomicU64::new(0);

/// Builds refused for want of memory (loads, reloads and transfers).
pub static REFUSED: AtomicU64 = AtomicU64::new(0);

/// Bytes reserved by builds under way.
pub fn reserved() -> u64 {
    RESERVED.load(Ordering::Relaxed)
}

/// Room held for one build; given back when dropped.
#[derive(Debug)]
pub struct Reservation(u64);

impl Drop for Reservation {
    fn drop(&mut self) {
        RESERVED.fetch_sub(self.0, Ordering::Relaxed);
    }
}

/// A build that does not fit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoRoom {
    /// Its estimated peak, bytes.
    pub need: u64,
    /// What is left, bytes (less what builds under way hold).
    pub room: u64,
    /// The bound that leaves it: `RLIMIT_AS`, the cgroup's memory limit, `MemAvailable`.
    pub by: &'static str,
}

impl std::fmt::Display for NoRoom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "not enough memory: building it takes about {} MiB, {} MiB left ({})",
            self.need >> 20,
            self.room >> 20,
            self.by
        )
    }
}

/// Reserves `need` bytes for a build, or says why there is no room.
pub fn reserve(need: u64) -> Result<Reservation, NoRoom> {
    let held = RESERVED.fetch_add(need, Ordering::Relaxed);
    let r = Reservation(need);
    fits(need, held).map(|()| r)
}

/// Whether a build already this big (`need`, estimated) still fits, beside what other
/// builds hold (a transfer asks as its data comes).
pub fn check(need: u64) -> Result<(), NoRoom> {
    fits(need, RESERVED.load(Ordering::Relaxed))
}

/// Whether `need` bytes fit beside `held` in the room left (small builds unchecked).
fn fits(need: u64, held: u64) -> Result<(), NoRoom> {
    if need < CHECKED_FROM {
        return Ok(());
    }
    match room_now() {
        Some((room, by)) if held.saturating_add(need) > room => {
            REFUSED.fetch_add(1, Ordering::Relaxed);
            Err(NoRoom {
                need,
                room: room.saturating_sub(held),
                by,
            })
        }
        _ => Ok(()),
    }
}

/// Bytes of text still buildable at `per` bytes of memory a byte, beside what builds under
/// way hold (this one's own reservation among them): what a zone's `$INCLUDE`s and
/// `$GENERATE`s may add to its file, which its size does not show. No bound where no bound
/// is known.
pub fn added_text_budget(per: u64) -> u64 {
    match room_recent() {
        Some((room, _)) => room.saturating_sub(RESERVED.load(Ordering::Relaxed)) / per.max(1),
        None => u64::MAX,
    }
}

/// [`room_now`], read again at most every quarter second (a start loads 100,000 zones).
fn room_recent() -> Option<(u64, &'static str)> {
    type Seen = Option<(std::time::Instant, Option<(u64, &'static str)>)>;
    static LAST: std::sync::Mutex<Seen> = std::sync::Mutex::new(None);
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    match *last {
        Some((at, room)) if at.elapsed() < std::time::Duration::from_millis(250) => room,
        _ => {
            let room = room_now();
            *last = Some((std::time::Instant::now(), room));
            room
        }
    }
}

/// The least room any bound leaves now, and which bound.
fn room_now() -> Option<(u64, &'static str)> {
    [
        (address_space_room(), "RLIMIT_AS"),
        (cgroup_room(), "the cgroup's memory limit"),
        (meminfo("MemAvailable:"), "MemAvailable"),
    ]
    .into_iter()
    .filter_map(|(r, by)| r.map(|r| (r, by)))
    .min_by_key(|&(r, _)| r)
}

/// What the address-space limit leaves: the limit less the process's size.
fn address_space_room() -> Option<u64> {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into a valid struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut rl) } != 0
        || rl.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().next()?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
    Some(rl.rlim_cur.saturating_sub(pages * page))
}

/// What the cgroup's memory limits leave (v2: the least over the cgroup and its parents;
/// v1: the memory controller's own group). Page cache the kernel would drop under pressure
/// (`inactive_file`: zone files read, copies written) counts as room: it fills a group's
/// usage on any server that reads its files, and pressure that would reclaim it never
/// comes while loads are refused.
fn cgroup_room() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let read = |p: std::path::PathBuf| std::fs::read_to_string(p).ok();
    let num = |p: std::path::PathBuf| -> Option<u64> { read(p)?.trim().parse().ok() };
    let mut least: Option<u64> = None;
    let mut take = |room: u64| least = Some(least.map_or(room, |l: u64| l.min(room)));
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if controllers.is_empty() {
            // v2: every level from the process's group up.
            let mut p =
                std::path::PathBuf::from("/sys/fs/cgroup").join(path.trim_start_matches('/'));
            loop {
                if let (Some(max), Some(cur)) =
                    (num(p.join("memory.max")), num(p.join("memory.current")))
                {
                    let cache = read(p.join("memory.stat"))
                        .and_then(|t| stat_field(&t, "inactive_file"))
                        .unwrap_or(0);
                    take(room_of(max, cur, cache));
                }
                if !p.pop() || p.as_os_str() == "/sys/fs" {
                    break;
                }
            }
        } else if controllers.split(',').any(|c| c == "memory") {
            let p = std::path::PathBuf::from("/sys/fs/cgroup/memory")
                .join(path.trim_start_matches('/'));
            if let (Some(max), Some(cur)) = (
                num(p.join("memory.limit_in_bytes")),
                num(p.join("memory.usage_in_bytes")),
            ) && max < 1 << 60
            {
                let cache = read(p.join("memory.stat"))
                    .and_then(|t| stat_field(&t, "total_inactive_file"))
                    .unwrap_or(0);
                take(room_of(max, cur, cache));
            }
        }
    }
    least
}

/// The room a memory limit `max` leaves at `usage`, of which `cache` is reclaimable.
fn room_of(max: u64, usage: u64, cache: u64) -> u64 {
    max.saturating_sub(usage.saturating_sub(cache))
}

/// A field of a cgroup's `memory.stat` (`name value` lines).
fn stat_field(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == name).then(|| v.trim().parse().ok())?
    })
}

/// A `/proc/meminfo` field, bytes.
fn meminfo(field: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with(field))?;
    let kb: u64 = line[field.len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_builds_pass_unchecked_and_reservations_are_given_back() {
        let r = reserve(1 << 20).unwrap();
        assert!(RESERVED.load(Ordering::Relaxed) >= 1 << 20);
        drop(r);
        assert!(check(1 << 20).is_ok());
        // Beyond any machine: refused, saying how much and by what.
        let e = reserve(u64::MAX / 4).unwrap_err();
        assert!(e.need == u64::MAX / 4 && e.room < e.need, "{e:?}");
        assert!(e.to_string().starts_with("not enough memory"), "{e}");
        assert!(check(u64::MAX / 4).is_err());
        // The refused reservation holds nothing.
        assert!(RESERVED.load(Ordering::Relaxed) < 1 << 40);
        assert!(meminfo("MemAvailable:").is_some_and(|m| m > 0));
    }

    #[test]
    fn reclaimable_page_cache_counts_as_room() {
        let stat = "anon 1000\nfile 5000\nactive_file 2000\ninactive_file 3000\n";
        assert_eq!(stat_field(stat, "inactive_file"), Some(3000));
        assert_eq!(stat_field(stat, "file"), Some(5000));
        assert_eq!(stat_field(stat, "total_inactive_file"), None);
        // 8 GiB allowed, 7.5 used of which 4.5 is cache that pressure would drop: 5 GiB left.
        let g = 1u64 << 30;
        assert_eq!(room_of(8 * g, 7 * g + g / 2, 4 * g + g / 2), 5 * g);
        assert_eq!(room_of(g, 2 * g, 0), 0);
    }
}
