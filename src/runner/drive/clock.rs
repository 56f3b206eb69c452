//! A turn's deadline as the script waits on it. A driver-protocol agent's
//! turn runs from when the script starts waiting. An exec-mode turn (a fresh
//! process) first starts up: from its spawn to its first request to the
//! provider, bounded by the boot deadline ([`Phase::StartUp`]); the turn's
//! own deadline, and the triggers that count seconds, run from that first
//! request, so a slow start on a loaded machine is not held against the turn.

use tokio::sync::watch;
use tokio::time::Instant;

use super::Drive;
use crate::observe::{ClockStart, Event, Phase};
use crate::units::secs;

/// One turn's deadline: its start-up's, then its own.
pub(crate) struct TurnClock {
    turn: u64,
    phase: Phase,
    seconds: f64,
    boot: f64,
    /// When the turn began its work: its first request (exec mode), or when
    /// the clock started (a driver-protocol agent). Watched by the triggers.
    working: watch::Sender<Option<Instant>>,
    pub(crate) deadline: Instant,
}

impl TurnClock {
    /// The clock of turn `turn`, whose own deadline is `phase`'s `seconds`;
    /// an exec-mode turn's start-up gets `boot` seconds. Events of the turn
    /// already recorded (a worker that ran ahead) are taken into account.
    pub(crate) fn start(d: &Drive, turn: u64, phase: Phase, seconds: f64, boot: f64) -> TurnClock {
        let now = Instant::now();
        let mut c = TurnClock {
            turn,
            phase,
            seconds,
            boot,
            working: watch::channel(None).0,
            deadline: now + secs(boot),
        };
        if d.turn_model().clock == ClockStart::TurnStart {
            c.begin(d, now);
            return c;
        }
        d.phase(Phase::StartUp, boot);
        for (at, ev) in d.recorded_since_spawn(turn) {
            c.on(d, at, &ev);
        }
        c
    }

    fn begin(&mut self, d: &Drive, at: Instant) {
        self.working.send_replace(Some(at));
        self.deadline = at + secs(self.seconds);
        d.phase(self.phase, self.seconds);
    }

    /// Take in an event: the turn's spawn (`turn_start`: its start-up's
    /// deadline counts from there) or its first request (`first_call`: its
    /// own deadline counts from there).
    pub(crate) fn on(&mut self, d: &Drive, at: Instant, ev: &Event) {
        if self.working.borrow().is_some() {
            return;
        }
        match ev {
            Event::TurnStart { i } if *i == self.turn => self.deadline = at + secs(self.boot),
            Event::FirstCall { turn, .. } if *turn == self.turn => self.begin(d, at),
            _ => {}
        }
    }

    /// A watch on when the turn began its work (None while it starts up).
    pub(crate) fn working(&self) -> watch::Receiver<Option<Instant>> {
        self.working.subscribe()
    }

    /// A later phase (the interrupt's) whose deadline ends sooner takes over.
    pub(crate) fn narrow(&mut self, d: &Drive, phase: Phase, seconds: f64) {
        d.phase(phase, seconds);
        let by = Instant::now() + secs(seconds);
        if by < self.deadline {
            (self.deadline, self.phase, self.seconds) = (by, phase, seconds);
        }
    }

    /// Record the miss of the deadline that ran out.
    pub(crate) fn missed(&self, d: &mut Drive) {
        let working = *self.working.borrow();
        match working {
            None => d.missed(Phase::StartUp, self.boot),
            Some(_) => d.missed(self.phase, self.seconds),
        }
    }
}

/// When the turn watched by `rx` began its work (never, if its clock is gone
/// before it did).
pub(crate) async fn began(rx: &mut watch::Receiver<Option<Instant>>) -> Instant {
    let at = rx.wait_for(Option::is_some).await.map(|at| *at);
    match at {
        Ok(at) => at.expect("waited for Some"),
        Err(_) => std::future::pending().await,
    }
}
