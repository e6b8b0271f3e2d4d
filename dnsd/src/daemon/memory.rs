//! Memory the daemon gives back.

/// Gives the heap freed by a big load back to the system (the loaders' scratch, the parsed
/// config's zone list): with 100,000 zones that is tens of MiB the process would keep.
pub fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks glibc's own heap; it takes no pointer from us.
    unsafe {
        libc::malloc_trim(0);
    }
}
