//! The one reader of `/proc/PID/stat`: the fields chaosrun uses (state,
//! parent, start time), parsed after the last `)` so a command name with
//! spaces or parentheses cannot shift them. CPU and memory sampling go
//! through `sysinfo` (the process sampler), not through this.

/// What chaosrun reads of one process's `/proc/PID/stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// Field 3: `R`, `S`, `Z`, ...
    pub state: char,
    /// Field 4.
    pub ppid: i32,
    /// Field 22: start time, in clock ticks since boot.
    pub start: u64,
}

impl Stat {
    /// A zombie or a dead process (`Z`, `X`).
    pub fn gone(&self) -> bool {
        matches!(self.state, 'Z' | 'X')
    }
}

/// `pid`'s stat, if the process exists.
pub fn read(pid: i32) -> Option<Stat> {
    parse(&super::pseudo::read(format!("/proc/{pid}/stat"), MAX).ok()?)
}

/// More than a stat line can hold (its longest field, the command name, is
/// 16 bytes; the other 51 are numbers).
const MAX: usize = 4096;

/// The fields of one `/proc/PID/stat` text.
pub fn parse(raw: &[u8]) -> Option<Stat> {
    // The command name may contain spaces and parens: split after the last ')'.
    let close = raw.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&raw[close + 1..]).ok()?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // f[0] is field 3 (state), f[1] field 4 (ppid), f[19] field 22 (starttime).
    Some(Stat {
        state: f.first()?.chars().next()?,
        ppid: f.get(1)?.parse().ok()?,
        start: f.get(19)?.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_name_with_parens_and_spaces_does_not_shift_the_fields() {
        let raw = b"4242 (a) b (c) d) S 17 4242 4242 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(
            parse(raw),
            Some(Stat {
                state: 'S',
                ppid: 17,
                start: 987654
            })
        );
        assert_eq!(parse(b"1 (x) Z 1"), None, "too few fields");
        assert_eq!(parse(b"garbage"), None);
    }

    #[test]
    fn our_own_stat_names_our_parent() {
        let me = read(std::process::id() as i32).expect("our own stat");
        assert_eq!(me.ppid, std::os::unix::process::parent_id() as i32);
        assert!(!me.gone());
    }
}
