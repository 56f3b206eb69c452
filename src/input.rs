//! Every file chaosrun reads, opened so that it can never block or exhaust
//! memory.
//!
//! * **Files the agent controls** (its JSONL transcripts, its SQLite store,
//!   logs, the journal, stderr's tail) go through [`open_regular`]: opened
//!   with `O_NONBLOCK` (an open of a FIFO returns at once instead of waiting
//!   for a writer), then `fstat`ed on the open descriptor, and refused unless
//!   it is a regular file ([`OpenError::NotRegular`], which the caller reports
//!   as "not checked", never a pass). Checking the descriptor, not the path,
//!   leaves no window for the agent to swap the file between check and read
//!   (SQLite opens the path itself: it is vetted this way first, after the
//!   agent's processes are gone). Logs chaosrun appends to in the run folder
//!   get the same care ([`crate::output::append_log`]).
//! * **Inputs the user names** (the table, `--config`, the profile, `merge`
//!   inputs, serve scripts and MCP rules, `explore --known` files and
//!   cassettes) go through [`read_input`]: the same open, then a read bounded
//!   by the input's documented [`Cap`]; `/dev/zero`, a FIFO, a directory or a
//!   file over the cap is an error naming the path and the cap (the CLI exits
//!   2). The read stops one byte past the cap, so nothing is read whole first.

use std::fs::{File, Metadata};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// What kind of thing `m` is, for messages ("a fifo", "a directory", ...).
pub fn kind(m: &Metadata) -> &'static str {
    let t = m.file_type();
    if t.is_symlink() {
        "a symbolic link"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a fifo"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_file() {
        "a regular file"
    } else {
        "not a regular file"
    }
}

/// Whether [`open_regular`] follows a symlink at the path's last component.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Follow {
    /// Follow it (the caller resolved and vetted the path first).
    Yes,
    /// Refuse it (`O_NOFOLLOW`): for files in a folder the agent can write.
    No,
}

/// Why [`open_regular`] gave no file.
#[derive(Debug)]
pub enum OpenError {
    /// It exists but is not a regular file: never read.
    NotRegular { what: &'static str },
    /// The open or the `fstat` failed (missing, permission, a symlink refused).
    Io(io::Error),
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::NotRegular { what } => write!(f, "is {what}, not a regular file"),
            OpenError::Io(e) => write!(f, "{e}"),
        }
    }
}

/// Open `path` for reading without ever blocking, and hand it back only if the
/// open descriptor is a regular file (with its metadata).
pub fn open_regular(path: &Path, follow: Follow) -> Result<(File, Metadata), OpenError> {
    let mut flags = libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY;
    if follow == Follow::No {
        flags |= libc::O_NOFOLLOW;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .map_err(OpenError::Io)?;
    let meta = file.metadata().map_err(OpenError::Io)?;
    if !meta.file_type().is_file() {
        return Err(OpenError::NotRegular { what: kind(&meta) });
    }
    Ok((file, meta))
}

/// An input's size cap: what it is (a noun for messages: "the {what}") and
/// its most bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cap {
    pub what: &'static str,
    pub bytes: u64,
}

const MIB: u64 = 1024 * 1024;

/// The scenario table (also `--only`'s row source and the history's hash).
pub const TABLE: Cap = Cap {
    what: "scenario table",
    bytes: 8 * MIB,
};
/// An adapter profile.
pub const PROFILE: Cap = Cap {
    what: "adapter profile",
    bytes: MIB,
};
/// `chaosrun explore --config`.
pub const EXPLORE_CONFIG: Cap = Cap {
    what: "explore config",
    bytes: MIB,
};
/// One `chaosrun merge` input (a `--json` report).
pub const REPORT: Cap = Cap {
    what: "JSON report",
    bytes: 64 * MIB,
};
/// `chaosrun serve --script`.
pub const SERVE_SCRIPT: Cap = Cap {
    what: "serve script",
    bytes: 8 * MIB,
};
/// `chaosrun serve --mcp` rules.
pub const MCP_RULES: Cap = Cap {
    what: "MCP rules",
    bytes: 8 * MIB,
};
/// A `--known` file (table failures explore does not re-report).
pub const KNOWN: Cap = Cap {
    what: "known-failures file",
    bytes: 64 * MIB,
};
/// A recorded session (cassette).
pub const CASSETTE: Cap = Cap {
    what: "cassette",
    bytes: 64 * MIB,
};
/// An HTML page chaosrun adds a section to (its own earlier output).
pub const HTML_PAGE: Cap = Cap {
    what: "HTML report",
    bytes: 256 * MIB,
};

/// `n` bytes as a short size ("8 MiB", "512 KiB", "100 bytes").
pub fn size(n: u64) -> String {
    if n >= MIB && n % MIB == 0 {
        format!("{} MiB", n / MIB)
    } else if n >= 1024 && n % 1024 == 0 {
        format!("{} KiB", n / 1024)
    } else {
        format!("{n} bytes")
    }
}

/// Why an input was not read: its path and what is wrong (shown as
/// `PATH: PROBLEM`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputError {
    pub path: String,
    pub problem: String,
}

impl std::fmt::Display for InputError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.problem)
    }
}

impl From<InputError> for String {
    fn from(e: InputError) -> String {
        e.to_string()
    }
}

/// The input at `path` opened for reading, at most `cap.bytes` (one byte
/// more shows it grew past the cap: see [`too_big`]), and its size: it must
/// be a regular file within its cap, else an error naming the path and the
/// cap.
pub fn open_input(path: &Path, cap: Cap) -> Result<(std::io::Take<File>, u64), InputError> {
    let fail = |problem: String| InputError {
        path: path.display().to_string(),
        problem,
    };
    let (file, meta) = open_regular(path, Follow::Yes).map_err(|e| match e {
        OpenError::NotRegular { what } => fail(format!(
            "is {what}; the {} must be a regular file (at most {})",
            cap.what,
            size(cap.bytes)
        )),
        OpenError::Io(e) => fail(format!("cannot read the {}: {e}", cap.what)),
    })?;
    if meta.len() > cap.bytes {
        return Err(too_big(path, cap));
    }
    Ok((file.take(cap.bytes + 1), meta.len()))
}

/// The error of an input past its cap.
pub fn too_big(path: &Path, cap: Cap) -> InputError {
    InputError {
        path: path.display().to_string(),
        problem: format!(
            "larger than {}, the cap for the {}; nothing was read",
            size(cap.bytes),
            cap.what
        ),
    }
}

/// Read the input at `path` whole, at most `cap.bytes`: it must be a regular
/// file within its cap, else an error naming the path and the cap.
pub fn read_input(path: &Path, cap: Cap) -> Result<Vec<u8>, InputError> {
    let (mut file, len) = open_input(path, cap)?;
    let mut out = Vec::with_capacity(len as usize);
    file.read_to_end(&mut out).map_err(|e| InputError {
        path: path.display().to_string(),
        problem: format!("cannot read the {}: {e}", cap.what),
    })?;
    if out.len() as u64 > cap.bytes {
        // It grew while being read.
        return Err(too_big(path, cap));
    }
    Ok(out)
}

/// [`read_input`] as UTF-8 text.
pub fn read_input_text(path: &Path, cap: Cap) -> Result<String, InputError> {
    let bytes = read_input(path, cap)?;
    String::from_utf8(bytes).map_err(|e| InputError {
        path: path.display().to_string(),
        problem: format!(
            "not UTF-8 text (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn fifo(p: &Path) {
        nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    }

    #[test]
    fn a_fifo_with_no_writer_is_refused_without_blocking() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("pipe");
        fifo(&p);
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&p, &link).unwrap();
        let t = Instant::now();
        for (path, follow) in [(&p, Follow::No), (&link, Follow::Yes)] {
            match open_regular(path, follow) {
                Err(OpenError::NotRegular { what }) => assert_eq!(what, "a fifo"),
                other => panic!("{path:?}: {other:?}"),
            }
        }
        assert!(matches!(
            open_regular(&link, Follow::No),
            Err(OpenError::Io(_))
        ));
        // An open that blocked would never have returned at all.
        assert!(t.elapsed() < Duration::from_secs(5));
        let e = read_input(&p, TABLE).unwrap_err().to_string();
        assert!(e.contains(": is a fifo") && e.contains("8 MiB"), "{e}");
    }

    #[test]
    fn inputs_are_capped_and_must_be_regular_files() {
        let d = tempfile::tempdir().unwrap();
        for (p, why) in [
            (Path::new("/dev/zero"), "is a device"),
            (d.path(), "is a directory"),
        ] {
            let e = read_input(p, PROFILE).unwrap_err().to_string();
            assert!(
                e.contains(why) && e.contains(&p.display().to_string()) && e.contains("1 MiB"),
                "{e}"
            );
        }
        let big = d.path().join("big.yaml");
        let f = File::create(&big).unwrap();
        f.set_len(MIB + 1).unwrap();
        let e = read_input(&big, PROFILE).unwrap_err().to_string();
        assert!(
            e.contains("larger than 1 MiB, the cap for the adapter profile"),
            "{e}"
        );
        f.set_len(MIB).unwrap();
        assert_eq!(read_input(&big, PROFILE).unwrap().len() as u64, MIB);
        let e = read_input(&d.path().join("none"), PROFILE).unwrap_err();
        assert!(e.problem.starts_with("cannot read"), "{e}");
        std::fs::write(&big, b"ok\xff").unwrap();
        let e = read_input_text(&big, PROFILE).unwrap_err().to_string();
        assert!(e.contains("not UTF-8") && e.contains("offset 2"), "{e}");
    }
}
