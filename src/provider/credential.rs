//! A row's credential that expires mid-run (`credential:` in the table): the
//! fake key chaosrun gives the agent (`{{api_key}}`, `chaos-key-1-NONCE`;
//! `chaos-key-2-NONCE` once refreshed), the key a request carries
//! (`Authorization: Bearer`, `x-api-key`, `x-goog-api-key`, `api-key` or
//! `?key=`), its short fingerprint (the only trace of it a recording keeps),
//! and the provider's state: from main call `expires_at_call` on, every
//! model call whose key is not the current one is refused with the wire's
//! 401 (`auth_expired`) until a refresh makes the new key current. The
//! refresh runs the hook that rewrites the agent's copy of the key, once:
//! `refresh: at_refusal` as the first refusal is answered (before its 401 is
//! sent); `refresh: turn_end` when the faulted turn ends (the runner calls
//! [`Credential::refresh`] on its `turn_end`) or, at the latest, as a request
//! of a later turn is refused (an agent that runs its turns back to back may
//! start the probe before the runner read that `turn_end`; an agent that
//! re-reads its key on a 401 then gets the new one); `refresh: never` keeps
//! refusing the faulted turn's calls and lets the probe through.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// A row's `credential:`: when the key expires and when the new one comes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CredentialSpec {
    /// The faulted turn's main call (from 0) from which the first key is
    /// refused.
    pub expires_at_call: u64,
    /// When chaosrun makes a new key current and rewrites the agent's copy.
    pub refresh: Refresh,
}

/// When a row's expired credential is replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Refresh {
    /// When the faulted turn ends (at the latest, as the next turn's first
    /// call is refused).
    TurnEnd,
    /// As the first refusal is answered: the agent's copy holds the new key
    /// before the 401 reaches it.
    AtRefusal,
    /// Never: the key is revoked for good. The probe turn is exempt (as with
    /// a context window), so reusability can still be judged.
    Never,
}

/// The fake key of generation `generation` (1 before a refresh, 2 after).
pub fn key(nonce: &str, generation: u32) -> String {
    format!("chaos-key-{generation}-{nonce}")
}

/// A short fingerprint of a credential: the first 12 hex digits of its
/// SHA-256 (the key itself is never recorded).
pub fn fingerprint(key: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(key.as_bytes())
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The credential a request carries, whichever way its wire sends it.
pub(crate) fn of_request(headers: &axum::http::HeaderMap, query: Option<&str>) -> Option<String> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(auth) = header("authorization") {
        let key = auth.strip_prefix("Bearer ").unwrap_or(auth);
        return Some(key.trim().to_string());
    }
    for name in ["x-api-key", "x-goog-api-key", "api-key"] {
        if let Some(key) = header(name) {
            return Some(key.trim().to_string());
        }
    }
    query?
        .split('&')
        .find_map(|kv| kv.strip_prefix("key="))
        .map(String::from)
}

/// What runs when the key is refreshed: given the new key, it rewrites the
/// agent's copy (a file in HOME).
pub type RefreshHook = Box<dyn Fn(&str) + Send + Sync>;

/// The provider's credential state for one row (shared with an exec-mode
/// agent, which renders the current key into its next turn's `env:` and
/// argv and refreshes it when a turn ends).
pub struct Credential {
    spec: CredentialSpec,
    nonce: String,
    expired: AtomicBool,
    generation: AtomicU32,
    hook: Mutex<Option<RefreshHook>>,
}

impl Credential {
    pub(crate) fn new(spec: CredentialSpec, nonce: &str) -> Credential {
        Credential {
            spec,
            nonce: nonce.to_string(),
            expired: AtomicBool::new(false),
            generation: AtomicU32::new(1),
            hook: Mutex::new(None),
        }
    }

    /// The key a refresh made current, once there is one.
    pub fn current_key(&self) -> Option<String> {
        (self.generation.load(Ordering::SeqCst) >= 2).then(|| key(&self.nonce, 2))
    }

    pub(crate) fn set_hook(&self, hook: RefreshHook) {
        *self.hook.lock().unwrap() = Some(hook);
    }

    /// A main call with this index arrived: the first key expires at
    /// `expires_at_call`.
    pub(crate) fn note_main(&self, index: u64) {
        if index >= self.spec.expires_at_call {
            self.expired.store(true, Ordering::SeqCst);
        }
    }

    /// Whether a request carrying `key` is refused: the first key has
    /// expired and `key` is not the current one (a probe, `later_turn`, is
    /// never refused under `refresh: never`).
    ///
    /// Decided after any refresh in progress (under the hook's lock): an
    /// agent may read the new key the moment its copy is rewritten, before
    /// the refresh made it current, and must not be refused for it.
    pub(crate) fn refuses(&self, key: Option<&str>, later_turn: bool) -> bool {
        if !self.expired.load(Ordering::SeqCst) {
            return false;
        }
        if later_turn && self.spec.refresh == Refresh::Never {
            return false;
        }
        let _settled = self.hook.lock().unwrap_or_else(|e| e.into_inner());
        let current = key_of(&self.nonce, self.generation.load(Ordering::SeqCst));
        key != Some(current.as_str())
    }

    /// A refusal is about to be answered: `at_refusal` refreshes now, and
    /// so does `turn_end` when the request is of a later turn than the
    /// faulted one (`later_turn`: the probe).
    pub(crate) fn refused(&self, later_turn: bool) {
        if self.spec.refresh == Refresh::AtRefusal
            || (later_turn && self.spec.refresh == Refresh::TurnEnd)
        {
            self.refresh();
        }
    }

    /// Run the hook with the second key, then make it current, once; later
    /// calls do nothing. Before the first key expired there is nothing to
    /// refresh. The hook's lock is held from the check to the switch: a
    /// refusal that comes while another refresh (the drive's, at
    /// `turn_end`) is still rewriting the agent's copy waits for it, so no
    /// 401 leaves before the new key is where the agent re-reads it.
    pub fn refresh(&self) {
        if !self.expired.load(Ordering::SeqCst) || self.spec.refresh == Refresh::Never {
            return;
        }
        let hook = self.hook.lock().unwrap();
        if self.generation.load(Ordering::SeqCst) >= 2 {
            return;
        }
        if let Some(hook) = hook.as_ref() {
            hook(&key(&self.nonce, 2));
        }
        self.generation.store(2, Ordering::SeqCst);
    }
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("spec", &self.spec)
            .field("expired", &self.expired)
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}

/// The key of `generation`, when one is valid; generation 1 is expired once
/// [`Credential::refuses`] asks, so only a later one can be current.
fn key_of(nonce: &str, generation: u32) -> String {
    if generation < 2 {
        // No key is valid between the expiry and the refresh.
        return String::from("\u{0}");
    }
    key(nonce, generation)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderMap;

    #[test]
    fn a_fingerprint_is_short_and_never_the_key() {
        let f = fingerprint("chaos-key-1-abc");
        assert_eq!(f.len(), 12);
        assert!(f.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(f, fingerprint("chaos-key-2-abc"));
        assert_eq!(f, fingerprint("chaos-key-1-abc"));
        assert!(!f.contains("chaos"));
    }

    #[test]
    fn the_key_is_read_the_way_each_wire_sends_it() {
        let mut h = HeaderMap::new();
        h.insert("authorization", "Bearer k1".parse().unwrap());
        assert_eq!(of_request(&h, None).as_deref(), Some("k1"));
        for name in ["x-api-key", "x-goog-api-key"] {
            let mut h = HeaderMap::new();
            h.insert(name, "k2".parse().unwrap());
            assert_eq!(of_request(&h, None).as_deref(), Some("k2"), "{name}");
        }
        let h = HeaderMap::new();
        assert_eq!(
            of_request(&h, Some("alt=sse&key=k3")).as_deref(),
            Some("k3")
        );
        assert_eq!(of_request(&h, Some("alt=sse")), None);
    }

    #[test]
    fn the_first_key_is_refused_from_its_call_until_the_refresh() {
        let c = Credential::new(
            CredentialSpec {
                expires_at_call: 1,
                refresh: Refresh::TurnEnd,
            },
            "n",
        );
        let written = std::sync::Arc::new(Mutex::new(Vec::new()));
        let w = written.clone();
        c.set_hook(Box::new(move |k| w.lock().unwrap().push(k.to_string())));
        let (k1, k2) = (key("n", 1), key("n", 2));
        c.note_main(0);
        assert!(!c.refuses(Some(&k1), false), "call 0 is before the expiry");
        c.note_main(1);
        assert!(
            c.refuses(Some(&k1), false) && c.refuses(Some(&k2), false) && c.refuses(None, false)
        );
        c.refused(false);
        assert!(
            written.lock().unwrap().is_empty(),
            "turn_end: not at the turn's refusal"
        );
        c.refresh();
        c.refresh();
        c.refused(true);
        assert_eq!(*written.lock().unwrap(), vec![k2.clone()], "refreshed once");
        assert_eq!(c.current_key(), Some(k2.clone()));
        assert!(c.refuses(Some(&k1), false));
        assert!(!c.refuses(Some(&k2), false));
    }

    #[test]
    fn turn_end_refreshes_at_the_latest_as_a_later_turn_is_refused() {
        let c = Credential::new(
            CredentialSpec {
                expires_at_call: 1,
                refresh: Refresh::TurnEnd,
            },
            "n",
        );
        c.note_main(1);
        assert!(c.refuses(Some(&key("n", 1)), false));
        c.refused(true);
        assert!(!c.refuses(Some(&key("n", 2)), false));
    }

    /// The races tests/proxy_tls.rs met: the drive's `turn_end` refresh was
    /// still writing the agent's copy when a probe was judged: one sent
    /// with the old key was refused and its 401 left before the new key was
    /// there to re-read; one sent with the new key, read off the rewritten
    /// copy, was refused as not yet current. Both now wait for the write in
    /// progress.
    #[test]
    fn a_refusal_during_a_refresh_waits_for_the_new_key_to_be_written() {
        use std::sync::atomic::AtomicBool;
        use std::sync::{mpsc, Arc};
        let c = Arc::new(Credential::new(
            CredentialSpec {
                expires_at_call: 1,
                refresh: Refresh::TurnEnd,
            },
            "n",
        ));
        let written = Arc::new(AtomicBool::new(false));
        let (started_tx, started) = mpsc::channel::<()>();
        let (release, release_rx) = mpsc::channel::<()>();
        let release_rx = Mutex::new(release_rx);
        let w = written.clone();
        c.set_hook(Box::new(move |_| {
            started_tx.send(()).unwrap();
            release_rx.lock().unwrap().recv().unwrap();
            w.store(true, Ordering::SeqCst);
        }));
        c.note_main(1);
        let drive = std::thread::spawn({
            let c = c.clone();
            move || c.refresh()
        });
        started.recv().unwrap();
        // While the copy is being written, two probes arrive: one sent with
        // the old key, one with the new key the agent read the moment its
        // copy was rewritten (clean-clone run A at d409209: refused, its 401
        // sent at once, the agent re-read the same key and gave up).
        let (done_tx, done) = mpsc::channel();
        let probes: Vec<_> = [1, 2]
            .into_iter()
            .map(|g| {
                let (c, w, tx) = (c.clone(), written.clone(), done_tx.clone());
                std::thread::spawn(move || {
                    let refused = c.refuses(Some(&key("n", g)), true);
                    if refused {
                        c.refused(true);
                    }
                    tx.send((g, refused, w.load(Ordering::SeqCst))).unwrap();
                })
            })
            .collect();
        // A decision that did not wait would come here, before the write.
        let early = done
            .recv_timeout(std::time::Duration::from_millis(200))
            .ok();
        assert_eq!(
            early, None,
            "a probe was judged before the new key was written"
        );
        release.send(()).unwrap();
        let mut got: Vec<_> = (0..2).map(|_| done.recv().unwrap()).collect();
        got.sort();
        assert_eq!(
            got,
            [(1, true, true), (2, false, true)],
            "the old key refused once the new one is written, the new one let through"
        );
        drive.join().unwrap();
        for p in probes {
            p.join().unwrap();
        }
        assert!(!c.refuses(Some(&key("n", 2)), true));
    }

    #[test]
    fn at_refusal_writes_the_new_key_before_the_401_is_sent() {
        let c = Credential::new(
            CredentialSpec {
                expires_at_call: 0,
                refresh: Refresh::AtRefusal,
            },
            "n",
        );
        let written = std::sync::Arc::new(Mutex::new(Vec::new()));
        let w = written.clone();
        c.set_hook(Box::new(move |k| w.lock().unwrap().push(k.to_string())));
        c.refresh();
        assert!(written.lock().unwrap().is_empty(), "nothing expired yet");
        c.note_main(0);
        assert!(c.refuses(Some(&key("n", 1)), false));
        c.refused(false);
        assert_eq!(*written.lock().unwrap(), vec![key("n", 2)]);
        assert!(!c.refuses(Some(&key("n", 2)), false));
    }

    #[test]
    fn never_keeps_refusing_the_turn_and_lets_the_probe_through() {
        let c = Credential::new(
            CredentialSpec {
                expires_at_call: 0,
                refresh: Refresh::Never,
            },
            "n",
        );
        let written = std::sync::Arc::new(Mutex::new(Vec::<String>::new()));
        let w = written.clone();
        c.set_hook(Box::new(move |k| w.lock().unwrap().push(k.to_string())));
        c.note_main(0);
        c.refused(false);
        c.refresh();
        assert!(c.refuses(Some(&key("n", 1)), false));
        assert!(c.refuses(Some(&key("n", 2)), false));
        assert!(!c.refuses(Some(&key("n", 1)), true), "the probe is exempt");
        assert!(written.lock().unwrap().is_empty(), "never refreshed");
    }
}
