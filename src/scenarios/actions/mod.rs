//! The process-fault actions (`process_fault: {action: NAME}`, and the kills
//! and stops of a chaos schedule): one small type per action, each in its
//! own file declaring its name, its doc and its facts ([`ActionKind`]): how
//! chaosrun lands it on the agent's processes ([`Landing`]), what shows it
//! landed ([`Evidence`]), whether the agent dies of it and is restarted,
//! and what its fields must hold. They are registered once, in the list
//! below, which makes [`FaultAction`] (written as the action's name, in
//! YAML and in saved observations alike). The rest of the code asks an
//! action's facts, never its name. A recorded fault carries [`Sent`]: the
//! action chaosrun sent, or `cont` (the end of a pause).
//!
//! Unlike the reply kinds' `registry!` (a `{kind: NAME, ...}` mapping), an
//! action is a bare name: its fields (`stop_for`, `headroom_mb`) belong to
//! the [`ProcessFault`] that names it.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::kinds::Kind;
use crate::scenarios::ProcessFault;

/// The actions' enum, `KINDS` and dispatch from one list of
/// `Variant(module::Type)` lines (each module declared here too).
macro_rules! actions {
    ($( $variant:ident($module:ident :: $ty:ident) ),+ $(,)?) => {
        $( pub mod $module; pub use $module::$ty; )+

        /// Which fault a process fault lands: see each action's file.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum FaultAction {
            $( $variant, )+
        }

        impl FaultAction {
            /// Every action's name, in registry order.
            pub const KINDS: &'static [&'static str] = &[$( <$ty as Kind>::NAME, )+];

            /// Every action, in registry order.
            pub const ALL: &'static [FaultAction] = &[$( FaultAction::$variant, )+];

            /// The action's name as written in YAML.
            pub fn kind_name(self) -> &'static str {
                match self {
                    $( Self::$variant => <$ty as Kind>::NAME, )+
                }
            }

            /// The action behind the family's trait.
            pub(crate) fn as_dyn(self) -> &'static dyn ActionKind {
                match self {
                    $( Self::$variant => &$module::$ty, )+
                }
            }
        }
    };
}

actions! {
    Kill(kill::Kill),
    Stop(stop::Stop),
    Suspend(suspend::Suspend),
    Oom(oom::Oom),
    Hangup(hangup::Hangup),
}

/// How chaosrun lands an action on the agent's processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Landing {
    /// SIGKILL: the agent through its pidfd, or the whole tree through
    /// `cgroup.kill` (`target: tree`).
    Kill,
    /// SIGSTOP through the agent's pidfd, or the tree's cgroup freeze, for
    /// `stop_for` seconds, then SIGCONT (or the thaw). `silences`: at the
    /// stop the provider also leaves every answer in flight silent for good
    /// (the machine slept: its clock jumped past every stream).
    Pause { silences: bool },
    /// A memory cgroup limit at the agent's usage plus `headroom_mb`, the
    /// reply to the trigger's call held until it is set; the kernel kills
    /// (proc_hygiene's `memory_limit`).
    MemoryLimit,
    /// The agent's terminal closes (its pty hung up; without one, SIGHUP
    /// to its process group); chaosrun waits for the exit (SIGKILL after
    /// 10 s (the driver's `KILL_WAIT`)), then restarts it.
    Hangup,
}

/// What the observation must show for an action to have landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Evidence {
    /// A recorded fault of the action's [`ActionKind::recorded`] name that
    /// signalled at least one process.
    Signalled,
    /// [`Evidence::Signalled`], and the provider silenced at least one
    /// answer in flight.
    SignalledSilencing,
    /// The kernel's OOM kill: a limit was set and the memory cgroup's own
    /// `oom_kill` counter rose (a kill of any process of the agent's tree,
    /// recorded as a landed kill).
    KernelOomKill,
}

/// What every action declares in its own file (its name: [`Kind`]).
pub(crate) trait ActionKind: Sync {
    /// How chaosrun lands it.
    fn lands(&self) -> Landing;

    /// The agent dies of it, and chaosrun restarts it on the same HOME and
    /// session (`expect: killed`).
    fn restarts(&self) -> bool {
        false
    }

    /// What shows it landed.
    fn evidence(&self) -> Evidence {
        Evidence::Signalled
    }

    /// The action a recorded fault names when this one lands (its own; an
    /// `oom` is recorded as the kill it amounts to).
    fn recorded(&self) -> FaultAction;

    /// What is wrong with a fault of this action beyond its schema
    /// (checked at load), if anything.
    fn check(&self, _f: &ProcessFault) -> Result<(), String> {
        Ok(())
    }
}

impl FaultAction {
    /// The action named `name`, if one is.
    pub fn from_name(name: &str) -> Option<FaultAction> {
        Self::ALL.iter().copied().find(|a| a.kind_name() == name)
    }

    /// How chaosrun lands it.
    pub fn lands(self) -> Landing {
        self.as_dyn().lands()
    }

    /// The agent dies of it and is restarted.
    pub fn restarts(self) -> bool {
        self.as_dyn().restarts()
    }

    /// What shows it landed.
    pub fn evidence(self) -> Evidence {
        self.as_dyn().evidence()
    }

    /// What a recorded fault says when it lands.
    pub fn recorded(self) -> Sent {
        Sent::Action(self.as_dyn().recorded())
    }

    /// What is wrong with `f` (a fault of this action) beyond its schema.
    pub fn check(self, f: &ProcessFault) -> Result<(), String> {
        self.as_dyn().check(f)
    }
}

impl Serialize for FaultAction {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.kind_name())
    }
}

impl<'de> Deserialize<'de> for FaultAction {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Self::from_name(&name).ok_or_else(|| D::Error::unknown_variant(&name, Self::KINDS))
    }
}

/// What a recorded process fault (the observation's `Event::ProcessFault`)
/// says chaosrun sent: an action ([`FaultAction::recorded`]) or `cont`, the
/// end of a pause. Written as the name (`"kill"`, `"cont"`), so saved
/// observations read as they always did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    Action(FaultAction),
    /// SIGCONT (or the thaw) ending a pause.
    Cont,
}

/// The name [`Sent::Cont`] is recorded as.
const CONT: &str = "cont";

impl Sent {
    /// The recorded name.
    pub fn name(self) -> &'static str {
        match self {
            Sent::Action(a) => a.kind_name(),
            Sent::Cont => CONT,
        }
    }

    /// A fault the agent dies of (and is restarted after).
    pub fn kills(self) -> bool {
        matches!(self, Sent::Action(a) if a.restarts())
    }

    /// The start of a pause.
    pub fn pauses(self) -> bool {
        matches!(self, Sent::Action(a) if matches!(a.lands(), Landing::Pause { .. }))
    }
}

impl Serialize for Sent {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Sent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        if name == CONT {
            return Ok(Sent::Cont);
        }
        FaultAction::from_name(&name)
            .map(Sent::Action)
            .ok_or_else(|| {
                let mut known = FaultAction::KINDS.to_vec();
                known.push(CONT);
                D::Error::custom(format!(
                    "unknown process fault `{name}`, expected one of {}",
                    known.join(", ")
                ))
            })
    }
}

/// Test fixtures write a recorded fault by its name.
#[cfg(test)]
impl From<&str> for Sent {
    fn from(name: &str) -> Sent {
        serde_json::from_value(serde_json::Value::from(name)).expect("a recorded action name")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names unique; each action reads back from its name, in YAML and
    /// JSON; an unknown one lists the known ones.
    #[test]
    fn each_action_is_registered_once_and_round_trips() {
        let mut names = FaultAction::KINDS.to_vec();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), FaultAction::ALL.len());
        for &a in FaultAction::ALL {
            let json = serde_json::to_string(&a).unwrap();
            assert_eq!(json, format!("\"{}\"", a.kind_name()));
            assert_eq!(serde_json::from_str::<FaultAction>(&json).unwrap(), a);
            assert_eq!(
                serde_yaml::from_str::<FaultAction>(a.kind_name()).unwrap(),
                a
            );
            let sent: Sent = serde_json::from_str(&json).unwrap();
            assert_eq!(sent, Sent::Action(a));
        }
        let e = serde_yaml::from_str::<FaultAction>("kil")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unknown variant `kil`") && e.contains("`oom`"),
            "{e}"
        );
        let e = serde_json::from_str::<Sent>("\"pause\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("`pause`") && e.contains("cont"), "{e}");
        assert_eq!(serde_json::to_string(&Sent::Cont).unwrap(), "\"cont\"");
    }

    /// What the oracle asks of a recorded fault, from the action's facts:
    /// an `oom` lands as the kill it amounts to; a `hangup` ends the agent
    /// (by itself, or killed after the wait), so it restarts as a kill does.
    #[test]
    fn recorded_faults_answer_from_their_actions_facts() {
        assert_eq!(FaultAction::Oom.recorded(), FaultAction::Kill.recorded());
        assert!(FaultAction::Oom.recorded().kills());
        assert!(Sent::from("kill").kills() && !Sent::from("kill").pauses());
        assert!(Sent::from("stop").pauses() && Sent::from("suspend").pauses());
        assert!(!Sent::Cont.kills() && !Sent::Cont.pauses());
        let restart: Vec<_> = FaultAction::ALL.iter().filter(|a| a.restarts()).collect();
        assert_eq!(
            restart,
            [&FaultAction::Kill, &FaultAction::Oom, &FaultAction::Hangup]
        );
    }
}
