//! A trial drawn from a seed: a scripted task (tool steps, sequential or
//! parallel shell calls, a background job, then a final answer) and its fault
//! schedule (faults before a step's call, a persistent fault from a step's
//! call onwards, an interrupt after one retryable error, a kill before a
//! step). Pure: the same seed and config give the same trial.
//! [`super::schedule`] turns a trial into a table row; [`super::coverage`]
//! picks among a few drawn candidates the one that tries the least-tried cells.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::config::Config;
use super::menu;

/// A fault served on one main call instead of the scripted reply: a place
/// in explore's menu ([`super::menu`], the reply kinds' declared faults).
/// A retryable one, so a healthy agent retries and gets the scripted
/// reply; or a value fault (an empty 200, an answer cut for length), on
/// which a healthy agent may also end its turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultKind(usize);

impl FaultKind {
    /// Every fault, in [`super::config::Weights::list`] order after `ok`.
    pub fn all() -> impl Iterator<Item = FaultKind> {
        (0..menu::menu().len()).map(FaultKind)
    }

    /// What its kind declared and the reply it makes.
    pub fn item(self) -> &'static menu::Item {
        &menu::menu()[self.0]
    }

    /// Whether the agent backs off after it (an interrupt can land in the wait).
    pub fn is_error(self) -> bool {
        self.item().is_error()
    }

    /// A value fault: the agent may end its turn on it.
    pub fn ends_turn(self) -> bool {
        self.item().ends_turn()
    }

    /// Its short name (`500`, `429`, `drop`, `stall`, `hang`, `empty`, `cut`).
    pub fn short(self) -> &'static str {
        self.item().explored.short
    }
}

/// Test names for the menu's faults, looked up in the registry at compile
/// time by their declared keys.
#[cfg(test)]
#[allow(non_upper_case_globals)]
impl FaultKind {
    pub const Error500: FaultKind = FaultKind::keyed("error_500");
    pub const Error429: FaultKind = FaultKind::keyed("error_429");
    pub const DropMidStream: FaultKind = FaultKind::keyed("drop_mid_stream");
    pub const StallMidStream: FaultKind = FaultKind::keyed("stall_mid_stream");
    pub const Hang: FaultKind = FaultKind::keyed("hang");

    const fn keyed(key: &str) -> FaultKind {
        let facts = crate::provider::replies::Reply::FACTS;
        let mut i = 0;
        while i < facts.len() {
            let ex = facts[i].1.explore;
            let mut j = 0;
            while j < ex.len() {
                if const_eq(ex[j].key, key) {
                    return FaultKind(ex[j].rank as usize);
                }
                j += 1;
            }
            i += 1;
        }
        panic!("no explored fault of that key")
    }
}

#[cfg(test)]
const fn const_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// One fault before a step's call; `interrupt` sends `interrupt` once the
/// reply to the call it answers is sent (the agent is then reading it or in
/// its retry backoff).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fault {
    pub kind: FaultKind,
    pub interrupt: bool,
}

/// A fault that lasts: from its step's call onwards every main call gets
/// `kind`, for `calls` calls and then it clears, or (`None`) for the rest of
/// the turn. A fault that never clears ends the script there: the agent must
/// give up with a surfaced error within its call bound.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Persist {
    pub kind: FaultKind,
    pub calls: Option<u32>,
}

impl Persist {
    pub fn clears(&self) -> bool {
        self.calls.is_some()
    }
}

/// What a step's main call answers, once its faults are served.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Shell calls in one assistant message (1 = sequential step, more =
    /// a parallel batch), each a side effect that runs for `secs`.
    Tools { secs: Vec<f64> },
    /// One background job writing heartbeats.
    Background,
    /// The final answer, streamed with this many seconds between chunks.
    Final { gap: f64 },
}

/// One step of the script with the faults scheduled before it.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The agent is killed (then resumed) while waiting on this step's call.
    pub kill_before: bool,
    /// The agent's whole tree is frozen (SIGSTOP) for this many seconds as
    /// this step's scripted call arrives, then continued.
    pub stop_for: Option<f64>,
    pub faults: Vec<Fault>,
    /// A fault that lasts from this step's call (after `faults`), if any.
    pub persist: Option<Persist>,
    pub action: Action,
}

/// A generated trial. The last step is always `Final`.
#[derive(Debug, Clone, PartialEq)]
pub struct Trial {
    pub seed: u64,
    pub steps: Vec<Step>,
}

impl Trial {
    /// Faults in the schedule: each provider fault, each interrupt, each kill.
    pub fn fault_count(&self) -> usize {
        self.steps
            .iter()
            .map(|s| {
                s.kill_before as usize
                    + s.stop_for.is_some() as usize
                    + s.faults.len()
                    + s.faults.iter().filter(|f| f.interrupt).count()
                    + s.persist.is_some() as usize
            })
            .sum()
    }

    /// The persistent fault of the trial, if any (at most one), and its step.
    pub fn persist(&self) -> Option<(usize, Persist)> {
        self.steps
            .iter()
            .enumerate()
            .find_map(|(i, s)| s.persist.map(|p| (i, p)))
    }

    /// Whether some fault of the schedule is a value fault, on which a
    /// healthy agent may end its turn (the row then expects `ended`).
    pub fn value_faulted(&self) -> bool {
        self.steps.iter().any(|s| {
            s.faults.iter().any(|f| f.kind.ends_turn())
                || s.persist.is_some_and(|p| p.kind.ends_turn())
        })
    }

    /// Whether the script runs to its answer when the agent is healthy:
    /// no kill, and no fault that never clears.
    pub fn answers(&self) -> bool {
        !self.steps.iter().any(|s| s.kill_before) && self.persist().is_none_or(|(_, p)| p.clears())
    }

    /// The same script with every fault, interrupt, kill and stop removed.
    pub fn without_faults(&self) -> Trial {
        let mut t = self.clone();
        t.steps.retain(|s| !s.kill_before);
        for s in &mut t.steps {
            s.faults.clear();
            s.persist = None;
            s.stop_for = None;
        }
        if !matches!(
            t.steps.last().map(|s| &s.action),
            Some(Action::Final { .. })
        ) {
            t.steps.push(Step::answer(0.0));
        }
        t
    }
}

impl Step {
    /// A step that answers (no fault), with `gap` seconds between chunks.
    pub fn answer(gap: f64) -> Step {
        Step {
            kill_before: false,
            stop_for: None,
            faults: Vec::new(),
            persist: None,
            action: Action::Final { gap },
        }
    }
}

/// The retry budget (`api_max_retries`) of a trial with a persistent fault:
/// a fault that clears lasts 2..=this many calls, so a healthy agent still
/// gets through, one retry more than the transient trials' budget.
pub const PERSIST_RETRIES: u32 = 3;

/// Most faults before one step: the agent's retries (`api_max_retries`, 2 in
/// every generated row) must outlast them.
pub const MAX_FAULTS_PER_STEP: usize = 2;

/// The seed of trial `n` of an explore run seeded `seed` (SplitMix64).
pub fn trial_seed(seed: u64, n: u64) -> u64 {
    let mut z = seed.wrapping_add((n + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A log-normal draw with median `p50` and 99th percentile `p99`, capped at
/// `p99 × 2` so a trial stays short; rounded to milliseconds.
fn lognormal(rng: &mut StdRng, p50: f64, p99: f64) -> f64 {
    let sigma = (p99 / p50).ln() / 2.326_348;
    let (u1, u2): (f64, f64) = (rng.gen_range(f64::EPSILON..1.0), rng.gen());
    let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
    let v = (p50.ln() + sigma * z).exp().min(p99 * 2.0);
    (v * 1000.0).round() / 1000.0
}

fn pick_weighted(rng: &mut StdRng, w: &[f64]) -> usize {
    let total: f64 = w.iter().sum();
    let mut x = rng.gen_range(0.0..total);
    for (i, v) in w.iter().enumerate() {
        if x < *v {
            return i;
        }
        x -= v;
    }
    w.len() - 1
}

/// The faults before one call: draw a reply kind; a fault is kept and the
/// next attempt drawn again, up to [`MAX_FAULTS_PER_STEP`].
fn draw_faults(rng: &mut StdRng, c: &Config) -> Vec<Fault> {
    let w = c.weights.list();
    let mut out = Vec::new();
    while out.len() < MAX_FAULTS_PER_STEP {
        match pick_weighted(rng, &w) {
            0 => break,
            k => out.push(Fault {
                kind: FaultKind(k - 1),
                interrupt: false,
            }),
        }
    }
    out
}

/// The trial of `seed` under `c`; `resume` says whether kills are allowed.
pub fn generate(seed: u64, c: &Config, resume: bool) -> Trial {
    let mut rng = StdRng::seed_from_u64(seed);
    let n = rng.gen_range(c.steps[0]..=c.steps[1]) as usize;
    let mut steps = Vec::with_capacity(n + 1);
    for _ in 0..n {
        let action = if rng.gen_bool(c.background_share) {
            Action::Background
        } else {
            let width = if rng.gen_bool(c.parallel_share) {
                rng.gen_range(2..=c.max_parallel) as usize
            } else {
                1
            };
            let secs = (0..width)
                .map(|_| lognormal(&mut rng, c.delay.p50, c.delay.p99))
                .collect();
            Action::Tools { secs }
        };
        let faults = draw_faults(&mut rng, c);
        steps.push(Step {
            kill_before: false,
            stop_for: None,
            faults,
            persist: None,
            action,
        });
    }
    let gap = lognormal(&mut rng, c.delay.p50, c.delay.p99).min(0.5) / 4.0;
    let faults = draw_faults(&mut rng, c);
    steps.push(Step {
        kill_before: false,
        stop_for: None,
        faults,
        persist: None,
        action: Action::Final {
            gap: (gap * 1000.0).round() / 1000.0,
        },
    });
    // An agent may end its turn on a value fault: nothing placed after the
    // first one is sure to be reached (a kill, an interrupt, a stop or a
    // lasting fault there could never land), so none is placed there.
    let ends = first_value_fault(&steps);
    // A kill (before any step after the first, so a side effect is behind
    // it) or an interrupt (after one retryable error); never both.
    if resume && steps.len() > 1 && rng.gen_bool(c.kill_share) {
        // The restarted agent goes on with the probe turn: nothing of the
        // faulted turn after the kill would run, so the script ends there
        // (at the value fault's step at the latest: it is cut away).
        let at = rng
            .gen_range(1..steps.len())
            .min(ends.map_or(usize::MAX, |(i, _)| i));
        if at >= 1 {
            steps.truncate(at);
            steps.push(Step {
                kill_before: true,
                ..Step::answer(0.0)
            });
        }
    } else if rng.gen_bool(c.interrupt_share) {
        let errors: Vec<(usize, usize)> = steps
            .iter()
            .enumerate()
            .flat_map(|(i, s)| {
                s.faults
                    .iter()
                    .enumerate()
                    .filter(|(_, f)| f.kind.is_error())
                    .map(move |(j, _)| (i, j))
            })
            .filter(|at| ends.is_none_or(|e| *at < e))
            .collect();
        if !errors.is_empty() {
            let (i, j) = errors[rng.gen_range(0..errors.len())];
            steps[i].faults[j].interrupt = true;
        }
    }
    // Drawn last, so adding it left every earlier draw of a seed as it was.
    let placed = steps
        .iter()
        .any(|s| s.kill_before || s.faults.iter().any(|f| f.interrupt));
    if !placed && rng.gen_bool(c.stop_share) {
        // Frozen past (or within) the stale timeout, then continued: as the
        // step's own call arrives, after its faults (so before a value
        // fault's step only).
        let at = rng.gen_range(0..steps.len());
        let secs = f64::from(rng.gen_range(5u32..=40)) / 10.0;
        if ends.is_none_or(|(i, _)| at < i) {
            steps[at].stop_for = Some(secs);
        }
    }
    draw_persist(&mut rng, c, &mut steps, ends.map(|(i, _)| i));
    Trial { seed, steps }
}

/// Where the first value fault is (step, fault): an agent may end its turn
/// on it.
fn first_value_fault(steps: &[Step]) -> Option<(usize, usize)> {
    steps.iter().enumerate().find_map(|(i, s)| {
        let j = s.faults.iter().position(|f| f.kind.ends_turn())?;
        Some((i, j))
    })
}

/// Maybe make one step's fault last (drawn last, so every earlier draw of a
/// seed is as it was): never with a kill or an interrupt, on a step after the
/// first when there is one (a tool result is then behind it), never with a
/// stop, never after the step of the first value fault (`ends`: it replaces
/// that step's faults). A fault that never clears ends the script at its step.
fn draw_persist(rng: &mut StdRng, c: &Config, steps: &mut Vec<Step>, ends: Option<usize>) {
    let p = &c.persist;
    let other = steps
        .iter()
        .any(|s| s.kill_before || s.stop_for.is_some() || s.faults.iter().any(|f| f.interrupt));
    if other || !rng.gen_bool(p.share) {
        return;
    }
    let w = c.persist.weights.list();
    let kind = FaultKind(pick_weighted(rng, &w));
    let at = if steps.len() > 1 {
        rng.gen_range(1..steps.len())
    } else {
        0
    };
    let calls = if rng.gen_bool(p.never_clears) {
        None
    } else {
        Some(rng.gen_range(2..=PERSIST_RETRIES))
    };
    if ends.is_some_and(|v| at > v) {
        return;
    }
    let s = &mut steps[at];
    s.faults.clear();
    s.persist = Some(Persist { kind, calls });
    if calls.is_none() {
        // The agent gives up at this step: nothing after it is reached.
        steps.truncate(at + 1);
        steps[at].action = Action::Final { gap: 0.0 };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An agent may end its turn on a value fault: no kill, interrupt, stop
    /// or lasting fault is placed where only going on past one reaches it
    /// (the healthy search drew a kill after a refusal, which the reference
    /// agent ends its turn on: "the kill never fired").
    #[test]
    fn nothing_is_placed_past_the_first_value_fault() {
        let c = Config::default();
        let mut with_value = 0;
        for seed in 0..3000 {
            let t = generate(seed, &c, true);
            let Some((vi, vj)) = first_value_fault(&t.steps) else {
                continue;
            };
            with_value += 1;
            for (i, s) in t.steps.iter().enumerate() {
                assert!(
                    !s.kill_before,
                    "seed {seed}: a kill after step {vi}'s value fault: {t:?}"
                );
                assert!(
                    s.stop_for.is_none() || i < vi,
                    "seed {seed}: a stop at step {i}, value fault at {vi}: {t:?}"
                );
                assert!(
                    s.persist.is_none() || i <= vi,
                    "seed {seed}: a lasting fault at step {i}, value fault at {vi}: {t:?}"
                );
                for (j, f) in s.faults.iter().enumerate() {
                    assert!(
                        !f.interrupt || (i, j) < (vi, vj),
                        "seed {seed}: an interrupt at ({i}, {j}), value fault at ({vi}, {vj}): {t:?}"
                    );
                }
            }
        }
        assert!(
            with_value > 100,
            "only {with_value} trials drew a value fault"
        );
    }

    #[test]
    fn the_same_seed_gives_the_same_trial() {
        let c = Config::default();
        for s in 0..50 {
            assert_eq!(generate(s, &c, true), generate(s, &c, true));
        }
        assert_ne!(trial_seed(7, 0), trial_seed(7, 1));
        assert_eq!(trial_seed(7, 3), trial_seed(7, 3));
    }

    #[test]
    fn trials_respect_the_bounds_and_end_with_an_answer() {
        let c = Config::default();
        for s in 0..500 {
            let t = generate(s, &c, true);
            assert!(matches!(
                t.steps.last().unwrap().action,
                Action::Final { .. }
            ));
            assert!(t.steps.len() as u32 <= c.steps[1] + 1);
            assert!(t
                .steps
                .iter()
                .all(|s| s.faults.len() <= MAX_FAULTS_PER_STEP));
            assert!(!t.steps[0].kill_before);
            let kills = t
                .steps
                .iter()
                .filter(|s| s.kill_before || s.stop_for.is_some())
                .count();
            let ints = t
                .steps
                .iter()
                .flat_map(|s| &s.faults)
                .filter(|f| f.interrupt)
                .count();
            assert!(kills + ints <= 1);
            for f in t
                .steps
                .iter()
                .flat_map(|s| &s.faults)
                .filter(|f| f.interrupt)
            {
                assert!(f.kind.is_error());
            }
            for st in &t.steps {
                if let Action::Tools { secs } = &st.action {
                    assert!(secs.iter().all(|d| *d > 0.0 && *d <= 1.0));
                }
            }
        }
        assert!(generate(1, &c, false).steps.iter().all(|s| !s.kill_before));
    }

    #[test]
    fn the_space_holds_each_combination_often() {
        // Each combination bug of the reference agent needs one of these.
        let c = Config::default();
        let (mut int_err, mut batch_429, mut tool_5xx, mut kills) = (0, 0, 0, 0);
        for s in 0..1000 {
            let t = generate(trial_seed(1, s), &c, true);
            let st = &t.steps;
            int_err += st.iter().flat_map(|s| &s.faults).any(|f| f.interrupt) as u32;
            batch_429 += st.windows(2).any(|w| {
                matches!(&w[0].action, Action::Tools { secs } if secs.len() >= 2)
                    && w[1]
                        .faults
                        .first()
                        .is_some_and(|f| f.kind == FaultKind::Error429)
            }) as u32;
            tool_5xx += st.windows(2).any(|w| {
                matches!(&w[0].action, Action::Tools { secs } if secs.len() == 1)
                    && w[1]
                        .faults
                        .first()
                        .is_some_and(|f| f.kind == FaultKind::Error500)
            }) as u32;
            kills += st.iter().any(|s| s.kill_before) as u32;
        }
        assert!(int_err > 50, "{int_err}");
        assert!(batch_429 > 30, "{batch_429}");
        assert!(tool_5xx > 30, "{tool_5xx}");
        assert!(kills > 100, "{kills}");
    }
}
