//! tcp-listen-hash: the listener-hash pile-up test. Binds N TCP listeners to N specific
//! loopback addresses on one port, then times connect() (SYN to SYN-ACK, the handshake
//! completes inside connect on loopback) to them; then the same with one wildcard listener
//! and with a single specific listener. Kernels that hash listeners by port alone put all N
//! in one bucket and every SYN walks the chain; kernels that also hash by address do not.

use std::mem::MaybeUninit;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use clap::Parser;
use palisade_bench::{Rng, net};

/// Times TCP connects with many specific listeners versus one wildcard listener.
#[derive(Parser)]
struct Args {
    /// Listeners bound to specific addresses (from --base upwards).
    #[arg(long, default_value_t = 16_384)]
    count: u32,
    /// First listener address.
    #[arg(long, default_value = "127.1.0.0")]
    base: Ipv4Addr,
    /// Port of the specific listeners (the wildcard uses port + 1, the single one port + 2).
    #[arg(long, default_value_t = 5460)]
    port: u16,
    /// Connections timed per case.
    #[arg(long, default_value_t = 2000)]
    connects: u32,
    /// Stop a case after this many seconds.
    #[arg(long, default_value_t = 20.0)]
    max_seconds: f64,
}

fn tcp_socket() -> std::io::Result<OwnedFd> {
    // SAFETY: plain syscall; the fd is owned on success.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fresh valid descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn set_int(fd: RawFd, level: libc::c_int, opt: libc::c_int, v: libc::c_int) {
    // SAFETY: setsockopt with a valid int.
    unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

fn rst_on_close(fd: RawFd) {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt with a valid linger struct.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

fn listen_on(ip: Ipv4Addr, port: u16) -> std::io::Result<OwnedFd> {
    let s = tcp_socket()?;
    set_int(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_REUSEADDR, 1);
    net::bind(s.as_raw_fd(), ip, port)?;
    // SAFETY: listen on a bound socket we own.
    if unsafe { libc::listen(s.as_raw_fd(), 16) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(s)
}

struct Case {
    name: &'static str,
    listeners: u32,
    bind_ms: f64,
    lat_us: Vec<f64>,
    errors: u32,
}

/// Times `n` connects to addresses chosen by `dst`; `lsock` gives the listener to accept on.
fn time_connects(
    n: u32,
    port: u16,
    max: Duration,
    mut dst: impl FnMut(&mut Rng) -> (Ipv4Addr, RawFd),
) -> (Vec<f64>, u32) {
    let mut rng = Rng::new(5);
    let mut lat = Vec::with_capacity(n as usize);
    let mut errors = 0;
    let start = Instant::now();
    for _ in 0..n {
        if start.elapsed() > max {
            break;
        }
        let (ip, lfd) = dst(&mut rng);
        let Ok(c) = tcp_socket() else {
            errors += 1;
            continue;
        };
        rst_on_close(c.as_raw_fd());
        let sa = net::sockaddr(ip, port);
        let t = Instant::now();
        // SAFETY: connect with a valid sockaddr_in.
        let rc = unsafe {
            libc::connect(
                c.as_raw_fd(),
                (&sa as *const libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        };
        let us = t.elapsed().as_secs_f64() * 1e6;
        if rc != 0 {
            errors += 1;
            continue;
        }
        lat.push(us);
        // SAFETY: accept on a listening socket; the peer address is not wanted.
        let a = unsafe {
            libc::accept4(
                lfd,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_CLOEXEC,
            )
        };
        if a >= 0 {
            // SAFETY: a fresh descriptor from accept.
            let a = unsafe { OwnedFd::from_raw_fd(a) };
            rst_on_close(a.as_raw_fd());
            drop(a);
        }
        drop(c);
    }
    (lat, errors)
}

fn pct(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return -1.0;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    s[((s.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let a = Args::parse();
    let nofile = net::raise_nofile();
    let max = Duration::from_secs_f64(a.max_seconds);
    let base = u32::from(a.base);
    let mut cases = Vec::new();
    if u64::from(a.count) + 32 > nofile {
        eprintln!(
            "tcp-listen-hash: {} listeners exceed the open-file limit {nofile}",
            a.count
        );
        std::process::exit(1);
    }
    // Many listeners, one per specific address, all on one port.
    {
        let t = Instant::now();
        let mut ls = Vec::with_capacity(a.count as usize);
        for i in 0..a.count {
            match listen_on(Ipv4Addr::from(base + i), a.port) {
                Ok(s) => ls.push(s),
                Err(e) => {
                    eprintln!("tcp-listen-hash: listener {i}: {e}");
                    std::process::exit(1);
                }
            }
        }
        let bind_ms = t.elapsed().as_secs_f64() * 1e3;
        let (lat, errors) = time_connects(a.connects, a.port, max, |r| {
            let i = r.below(u64::from(a.count)) as u32;
            (Ipv4Addr::from(base + i), ls[i as usize].as_raw_fd())
        });
        cases.push(Case {
            name: "specific",
            listeners: a.count,
            bind_ms,
            lat_us: lat,
            errors,
        });
    }
    // One wildcard listener.
    {
        let t = Instant::now();
        let l = listen_on(Ipv4Addr::UNSPECIFIED, a.port + 1).expect("wildcard listener");
        let bind_ms = t.elapsed().as_secs_f64() * 1e3;
        let (lat, errors) = time_connects(a.connects, a.port + 1, max, |r| {
            let i = r.below(u64::from(a.count)) as u32;
            (Ipv4Addr::from(base + i), l.as_raw_fd())
        });
        cases.push(Case {
            name: "wildcard",
            listeners: 1,
            bind_ms,
            lat_us: lat,
            errors,
        });
    }
    // One specific listener: the floor.
    {
        let t = Instant::now();
        let l = listen_on(a.base, a.port + 2).expect("single listener");
        let bind_ms = t.elapsed().as_secs_f64() * 1e3;
        let (lat, errors) = time_connects(a.connects, a.port + 2, max, |_| (a.base, l.as_raw_fd()));
        cases.push(Case {
            name: "single",
            listeners: 1,
            bind_ms,
            lat_us: lat,
            errors,
        });
    }
    let mut uname: libc::utsname = {
        // SAFETY: utsname is a plain C struct; all-zero is valid.
        unsafe { MaybeUninit::zeroed().assume_init() }
    };
    // SAFETY: uname fills the struct.
    unsafe { libc::uname(&mut uname) };
    // SAFETY: the kernel NUL-terminates the release field.
    let release = unsafe { std::ffi::CStr::from_ptr(uname.release.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    let items: Vec<String> = cases
        .iter()
        .map(|c| {
            let mean = c.lat_us.iter().sum::<f64>() / c.lat_us.len().max(1) as f64;
            eprintln!(
                "{:>9}: {:>6} listeners, bound in {:8.1} ms, connect p50 {:6.1} us p99 {:7.1} us mean {:6.1} us ({} connects, {} errors)",
                c.name,
                c.listeners,
                c.bind_ms,
                pct(&c.lat_us, 0.5),
                pct(&c.lat_us, 0.99),
                mean,
                c.lat_us.len(),
                c.errors
            );
            format!(
                "{{\"name\":\"{}\",\"listeners\":{},\"bind_ms\":{:.2},\"connects\":{},\"errors\":{},\"p50_us\":{:.2},\"p90_us\":{:.2},\"p99_us\":{:.2},\"mean_us\":{:.2}}}",
                c.name,
                c.listeners,
                c.bind_ms,
                c.lat_us.len(),
                c.errors,
                pct(&c.lat_us, 0.5),
                pct(&c.lat_us, 0.9),
                pct(&c.lat_us, 0.99),
                mean
            )
        })
        .collect();
    println!(
        "{{\"kernel\":\"{release}\",\"cases\":[{}]}}",
        items.join(",")
    );
}
