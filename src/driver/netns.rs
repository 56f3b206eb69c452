//! A scenario's network namespace: its only interface is loopback (up), the
//! scenario's servers bind their listeners inside it ([`NetNs::binder`]) and
//! the agent joins it before exec (`driver::spawn`), so the agent reaches the
//! scenario's provider and MCP server and nothing else: any other address,
//! the host's own 127.0.0.1 included, fails at once. Made by a short-lived
//! helper thread that unshares its network namespace and keeps an fd to it;
//! the namespace lives as long as that fd. Needs CAP_SYS_ADMIN; where it
//! cannot be made, [`Network`] says why and the run is reported as not
//! network-contained.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;

use crate::listen::{Binder, Network};

/// A network namespace held open by an fd.
#[derive(Debug)]
pub struct NetNs {
    fd: OwnedFd,
}

/// Run `f` on a fresh thread (namespace changes stay on that thread, which
/// then exits) and return its result.
fn on_thread<T: Send + 'static>(
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    std::thread::Builder::new()
        .name("chaosrun-netns".into())
        .spawn(f)?
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("the netns thread panicked")))
}

/// Set the loopback interface up (in the calling thread's namespace).
fn loopback_up() -> std::io::Result<()> {
    // SAFETY: a plain socket(2) and two ioctl(2)s on a zeroed ifreq naming
    // `lo`; the fd is owned and closed on return.
    unsafe {
        let s = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if s < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let s = OwnedFd::from_raw_fd(s);
        let mut ifr: libc::ifreq = std::mem::zeroed();
        for (d, c) in ifr.ifr_name.iter_mut().zip(b"lo\0") {
            *d = *c as libc::c_char;
        }
        if libc::ioctl(s.as_raw_fd(), libc::SIOCGIFFLAGS, &mut ifr) < 0 {
            return Err(std::io::Error::last_os_error());
        }
        ifr.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(s.as_raw_fd(), libc::SIOCSIFFLAGS, &ifr) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

impl NetNs {
    /// A new network namespace with loopback up.
    pub fn new() -> std::io::Result<NetNs> {
        on_thread(|| {
            // SAFETY: unshare(2) with one flag; it changes this thread only.
            if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let fd: OwnedFd = std::fs::File::open("/proc/thread-self/ns/net")?.into();
            loopback_up()?;
            Ok(NetNs { fd })
        })
    }

    /// A namespace for a scenario, or why there is none: `host` (the
    /// profile's `network: host`) opts out.
    pub fn for_scenario(host: bool) -> (Option<Arc<NetNs>>, Network) {
        if host {
            return (
                None,
                Network {
                    contained: false,
                    reason: Some("the profile says `network: host`".into()),
                },
            );
        }
        match NetNs::new() {
            Ok(ns) => (
                Some(Arc::new(ns)),
                Network {
                    contained: true,
                    reason: None,
                },
            ),
            Err(e) => (
                None,
                Network {
                    contained: false,
                    reason: Some(format!("cannot create a network namespace: {e}")),
                },
            ),
        }
    }

    /// The fd `setns(2)` takes (valid while `self` lives).
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Bind a TCP listener on 127.0.0.1:`port` inside the namespace.
    pub fn bind(&self, port: u16) -> std::io::Result<std::net::TcpListener> {
        let fd = self.fd.try_clone()?;
        on_thread(move || {
            // SAFETY: setns(2) on an fd owned by this closure; it changes
            // this thread only.
            if unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            std::net::TcpListener::bind(("127.0.0.1", port))
        })
    }

    /// [`NetNs::bind`] as the servers' hook.
    pub fn binder(self: &Arc<Self>) -> Binder {
        let ns = self.clone();
        Arc::new(move |port| ns.bind(port))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_opt_out_says_so() {
        let (ns, net) = NetNs::for_scenario(true);
        assert!(ns.is_none() && !net.contained);
        assert!(
            net.describe().contains("NOT contained"),
            "{}",
            net.describe()
        );
        assert!(net.describe().contains("network: host"));
    }
}
