//! Shrinking a confirmed failure: greedy delta debugging over the trial.
//! Each round lists every one-step reduction (drop a step, a kill, an
//! interrupt, a fault, a persistent fault or some of its calls; narrow a
//! parallel batch; shorten every delay), asks the
//! predicate about them in batches of `jobs` (run in parallel by the caller),
//! and keeps the first, in list order, that still fails the same check. It
//! stops when no reduction fails, or after [`MAX_EVALS`] candidate runs. Pure
//! over the predicate, so it is tested against one.

use super::generate::{Action, Trial, MAX_FAULTS_PER_STEP};

/// The most candidate runs one shrink may spend.
pub const MAX_EVALS: usize = 120;

/// Every trial one reduction smaller than `t`, biggest cuts first.
pub fn candidates(t: &Trial) -> Vec<Trial> {
    let mut out = Vec::new();
    let last = t.steps.len().saturating_sub(1);
    // Drop a whole non-final step (its faults and kill go with it).
    for i in 0..last {
        let mut c = t.clone();
        c.steps.remove(i);
        out.push(c);
    }
    // Drop a step's action but keep its faults, moved onto the next step's call.
    for i in 0..last {
        let s = &t.steps[i];
        if s.faults.is_empty() && !s.kill_before && s.persist.is_none() {
            continue;
        }
        let mut c = t.clone();
        let gone = c.steps.remove(i);
        let next = &mut c.steps[i];
        next.kill_before |= gone.kill_before;
        next.persist = next.persist.or(gone.persist);
        let mut faults = gone.faults;
        faults.append(&mut next.faults);
        faults.truncate(MAX_FAULTS_PER_STEP);
        next.faults = faults;
        out.push(c);
    }
    for (i, s) in t.steps.iter().enumerate() {
        if s.kill_before {
            let mut c = t.clone();
            c.steps[i].kill_before = false;
            out.push(c);
        }
        if s.stop_for.is_some() {
            let mut c = t.clone();
            c.steps[i].stop_for = None;
            out.push(c);
        }
        if let Some(p) = s.persist {
            // Without it; or lasting the fewest calls that still persist.
            let mut c = t.clone();
            c.steps[i].persist = None;
            out.push(c);
            if p.calls.is_some_and(|n| n > 2) {
                let mut c = t.clone();
                c.steps[i].persist = Some(super::generate::Persist {
                    calls: Some(2),
                    ..p
                });
                out.push(c);
            }
        }
        for (j, f) in s.faults.iter().enumerate() {
            let mut c = t.clone();
            c.steps[i].faults.remove(j);
            out.push(c);
            if f.interrupt {
                let mut c = t.clone();
                c.steps[i].faults[j].interrupt = false;
                out.push(c);
            }
        }
    }
    for (i, s) in t.steps.iter().enumerate() {
        if let Action::Tools { secs } = &s.action {
            if secs.len() > 1 {
                let mut c = t.clone();
                if let Action::Tools { secs } = &mut c.steps[i].action {
                    secs.pop();
                }
                out.push(c);
            }
        }
    }
    let mut short = t.clone();
    for s in &mut short.steps {
        match &mut s.action {
            Action::Tools { secs } => secs.iter_mut().for_each(|d| *d = d.min(0.01)),
            Action::Final { gap } => *gap = 0.0,
            Action::Background => {}
        }
    }
    if short != *t {
        out.push(short);
    }
    out
}

/// What a shrink did.
#[derive(Debug, Clone)]
pub struct Shrunk {
    pub trial: Trial,
    /// Candidate runs made.
    pub evals: usize,
    /// Reductions kept.
    pub steps: usize,
}

/// Shrink `t` while `fails` holds. `fails` gets a batch of at most `jobs`
/// candidates and answers, for each, whether it still fails the same check;
/// `on_step` hears each kept reduction.
pub fn shrink(
    t: Trial,
    jobs: usize,
    mut fails: impl FnMut(&[Trial]) -> Vec<bool>,
    mut on_step: impl FnMut(&Trial, usize),
) -> Shrunk {
    let mut cur = t;
    let (mut evals, mut steps) = (0, 0);
    'rounds: loop {
        let cands = candidates(&cur);
        for chunk in cands.chunks(jobs.max(1)) {
            if evals >= MAX_EVALS {
                break 'rounds;
            }
            let chunk = &chunk[..chunk.len().min(MAX_EVALS - evals)];
            let res = fails(chunk);
            evals += chunk.len();
            if let Some(i) = res.iter().position(|f| *f) {
                cur = chunk[i].clone();
                steps += 1;
                on_step(&cur, evals);
                continue 'rounds;
            }
        }
        break;
    }
    Shrunk {
        trial: cur,
        evals,
        steps,
    }
}

#[cfg(test)]
mod tests {
    use super::super::config::Config;
    use super::super::generate::{generate, trial_seed, FaultKind};
    use super::*;

    /// "A 429 right after a parallel batch": the bug (b) predicate.
    fn batch_then_429(t: &Trial) -> bool {
        t.steps.windows(2).any(|w| {
            matches!(&w[0].action, Action::Tools { secs } if secs.len() >= 2)
                && w[1]
                    .faults
                    .first()
                    .is_some_and(|f| f.kind == FaultKind::Error429)
        })
    }

    #[test]
    fn shrinks_to_the_two_facts_the_predicate_needs() {
        let c = Config::default();
        let mut shrunk_any = 0;
        for n in 0..400 {
            let t = generate(trial_seed(11, n), &c, true);
            if !batch_then_429(&t) {
                continue;
            }
            let mut batches = 0;
            let s = shrink(
                t.clone(),
                3,
                |b| {
                    batches += 1;
                    assert!(b.len() <= 3);
                    b.iter().map(batch_then_429).collect()
                },
                |_, _| {},
            );
            assert!(batch_then_429(&s.trial));
            assert_eq!(s.trial.fault_count(), 1, "{:?}", s.trial);
            // Two steps (the batch of 2, then the answer), delays shortened.
            assert_eq!(s.trial.steps.len(), 2, "{:?}", s.trial);
            match &s.trial.steps[0].action {
                Action::Tools { secs } => {
                    assert_eq!(secs.len(), 2);
                    assert!(secs.iter().all(|d| *d <= 0.01), "{secs:?}");
                }
                a => panic!("{a:?}"),
            }
            // Minimal: no single reduction still fails.
            assert!(candidates(&s.trial).iter().all(|c| !batch_then_429(c)));
            assert!(s.evals <= MAX_EVALS && batches > 0);
            shrunk_any += 1;
        }
        assert!(shrunk_any > 5);
    }

    #[test]
    fn a_predicate_that_never_fails_keeps_the_trial() {
        let t = generate(5, &Config::default(), true);
        let s = shrink(t.clone(), 2, |b| vec![false; b.len()], |_, _| {});
        assert_eq!(s.trial, t);
        assert_eq!(s.steps, 0);
        assert_eq!(s.evals, candidates(&t).len().min(MAX_EVALS));
    }

    #[test]
    fn the_eval_cap_holds_for_a_predicate_that_always_fails() {
        let t = generate(trial_seed(2, 1), &Config::default(), true);
        let s = shrink(t, 4, |b| vec![true; b.len()], |_, _| {});
        assert!(s.evals <= MAX_EVALS);
        // Everything droppable was dropped: one step, the answer.
        assert_eq!(s.trial.steps.len(), 1);
        assert_eq!(s.trial.fault_count(), 0);
    }
}
