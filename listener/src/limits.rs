//! Raising RLIMIT_NOFILE to what the fleet needs, with a clear error when it cannot.

use crate::ListenerError;

/// Descriptors kept for everything that is not a UDP service socket (TCP listeners, epoll,
/// eventfd, control and metrics sockets, zone files, TCP connections).
pub const RESERVED_FDS: usize = 1024;

/// Makes sure at least `needed` descriptors can be open, raising the soft limit if needed.
pub fn ensure_nofile(needed: usize) -> Result<(), ListenerError> {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into a valid struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    let needed = needed as u64;
    if rl.rlim_cur >= needed {
        return Ok(());
    }
    if rl.rlim_max < needed {
        // Try the hard limit too (works with CAP_SYS_RESOURCE).
        let want = libc::rlimit {
            rlim_cur: needed,
            rlim_max: needed,
        };
        // SAFETY: setrlimit reads a valid struct.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) } == 0 {
            return Ok(());
        }
        return Err(ListenerError::TooManyFiles {
            needed,
            hard: rl.rlim_max,
        });
    }
    let want = libc::rlimit {
        rlim_cur: needed,
        rlim_max: rl.rlim_max,
    };
    // SAFETY: setrlimit reads a valid struct.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) } != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    Ok(())
}

/// The current (soft, hard) RLIMIT_NOFILE.
pub fn nofile() -> (u64, u64) {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into a valid struct.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) };
    (rl.rlim_cur, rl.rlim_max)
}
