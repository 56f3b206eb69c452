//! A scenario's network namespace: its only interface is loopback (up), the
//! scenario's servers bind their listeners inside it ([`NetNs::binder`]) and
//! the agent joins it before exec (`driver::spawn`), so the agent reaches the
//! scenario's provider and MCP server and nothing else: any other address,
//! the host's own 127.0.0.1 included, fails at once. Made on chaosrun's
//! one namespace thread, which unshares a network namespace, keeps an fd to
//! it (the namespace lives as long as that fd) and returns to the host's
//! namespace. Needs CAP_SYS_ADMIN; where it
//! cannot be made, [`Network`] says why and the run is reported as not
//! network-contained.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use crate::listen::{Binder, Network};

/// A network namespace held open by an fd.
#[derive(Debug)]
pub struct NetNs {
    fd: OwnedFd,
}

/// A job for the namespace thread.
type Job = Box<dyn FnOnce() + Send>;

/// The one thread that enters namespaces (their changes stay on it); it
/// returns to the host's namespace after every job. One long-lived thread
/// instead of a new thread per namespace and per listener: creating a thread
/// (its stack, guard page, signal stack) was a visible part of chaosrun's own
/// CPU per row.
static WORKER: std::sync::Mutex<Option<std::sync::mpsc::Sender<Job>>> = std::sync::Mutex::new(None);

/// Start the namespace thread: it serves jobs until one leaves it where it
/// cannot get back to the host's namespace (it then ends, and the next job
/// starts a fresh thread).
fn start_worker() -> std::io::Result<std::sync::mpsc::Sender<Job>> {
    let (tx, rx) = std::sync::mpsc::channel::<Job>();
    let host: OwnedFd = std::fs::File::open("/proc/thread-self/ns/net")?.into();
    std::thread::Builder::new()
        .name("chaosrun-netns".into())
        .spawn(move || {
            for job in rx {
                job();
                // SAFETY: setns(2) on an fd this thread owns; it changes this
                // thread only.
                if unsafe { libc::setns(host.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                    return;
                }
            }
        })?;
    Ok(tx)
}

/// Hand `job` to the namespace thread (starting it if it is not running or
/// has ended).
fn submit(mut job: Job) -> std::io::Result<()> {
    let mut worker = WORKER.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..2 {
        let tx = match worker.as_ref() {
            Some(tx) => tx.clone(),
            None => worker.insert(start_worker()?).clone(),
        };
        match tx.send(job) {
            Ok(()) => return Ok(()),
            // The thread ended: start another.
            Err(std::sync::mpsc::SendError(back)) => {
                job = back;
                *worker = None;
            }
        }
    }
    Err(std::io::Error::other("cannot start the netns thread"))
}

fn ended() -> std::io::Error {
    std::io::Error::other("the netns thread ended")
}

/// Hand `f` to the namespace thread; its result comes on the channel
/// returned.
fn dispatch<T: Send + 'static>(
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<tokio::sync::oneshot::Receiver<std::io::Result<T>>> {
    let (done, result) = tokio::sync::oneshot::channel();
    submit(Box::new(move || {
        let _ = done.send(f());
    }))?;
    Ok(result)
}

/// Run `f` on the namespace thread and wait (blocking; never from an async
/// task) for its result.
fn on_thread<T: Send + 'static>(
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    dispatch(f)?
        .blocking_recv()
        .unwrap_or_else(|_| Err(ended()))
}

/// Run `f` on the namespace thread and await its result: the async task
/// waits on a channel, not on a blocking-pool thread that waits in turn.
async fn on_thread_async<T: Send + 'static>(
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    dispatch(f)?.await.unwrap_or_else(|_| Err(ended()))
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
        on_thread(make)
    }

    /// A namespace for a scenario, or why there is none: `host` (the
    /// profile's `network: host`) opts out.
    pub fn for_scenario(host: bool) -> (Option<Arc<NetNs>>, Network) {
        if host {
            return host_network();
        }
        contained(NetNs::new())
    }

    /// [`NetNs::for_scenario`] from an async task.
    pub async fn for_scenario_async(host: bool) -> (Option<Arc<NetNs>>, Network) {
        if host {
            return host_network();
        }
        contained(on_thread_async(make).await)
    }

    /// The fd `setns(2)` takes.
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.fd.as_fd()
    }

    /// Bind a TCP listener on 127.0.0.1:`port` inside the namespace.
    pub async fn bind(&self, port: u16) -> std::io::Result<std::net::TcpListener> {
        let fd = self.fd.try_clone()?;
        on_thread_async(move || {
            // SAFETY: setns(2) on an fd owned by this closure; it changes
            // this thread only.
            if unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            std::net::TcpListener::bind(("127.0.0.1", port))
        })
        .await
    }

    /// [`NetNs::bind`] as the servers' hook.
    pub fn binder(self: &Arc<Self>) -> Binder {
        let ns = self.clone();
        Arc::new(move |port| {
            let ns = ns.clone();
            Box::pin(async move { ns.bind(port).await })
        })
    }
}

/// On the namespace thread: unshare a network namespace, keep an fd to it,
/// set loopback up.
fn make() -> std::io::Result<NetNs> {
    // SAFETY: unshare(2) with one flag; it changes this thread only.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let fd: OwnedFd = std::fs::File::open("/proc/thread-self/ns/net")?.into();
    loopback_up()?;
    Ok(NetNs { fd })
}

/// A network namespace's name as `readlink /proc/PID/ns/net` gives it.
fn name_of(fd: std::os::fd::BorrowedFd<'_>) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let file = std::fs::File::from(fd.try_clone_to_owned().ok()?);
    Some(format!("net:[{}]", file.metadata().ok()?.ino()))
}

/// chaosrun's own network namespace (the host's, for the agent).
fn own_namespace() -> Option<String> {
    std::fs::read_link("/proc/self/ns/net")
        .ok()
        .map(|p| p.display().to_string())
}

fn host_network() -> (Option<Arc<NetNs>>, Network) {
    let net = Network {
        contained: false,
        reason: Some("the profile says `network: host`".into()),
        namespace: own_namespace(),
    };
    (None, net)
}

fn contained(made: std::io::Result<NetNs>) -> (Option<Arc<NetNs>>, Network) {
    match made {
        Ok(ns) => {
            let net = Network {
                contained: true,
                reason: None,
                namespace: name_of(ns.fd()),
            };
            (Some(Arc::new(ns)), net)
        }
        Err(e) => {
            let net = Network {
                contained: false,
                reason: Some(format!("cannot create a network namespace: {e}")),
                namespace: own_namespace(),
            };
            (None, net)
        }
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
