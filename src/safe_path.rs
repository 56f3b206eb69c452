//! Path containment: a path the profile names stays inside the agent's HOME,
//! judged lexically when it is rendered ([`within_home`]) and with every
//! symlink resolved right before chaosrun reads it ([`resolve_inside`]).
//! The safe-I/O rules beside [`crate::input`] (no blocking open, no symlink
//! followed where the agent can plant one) and [`crate::output`].

use std::path::{Path, PathBuf};

/// `rendered` (a profile path: relative to HOME, or absolute under it) as a
/// path inside `home`, judged lexically: an absolute path elsewhere or a `..`
/// that climbs out is refused. Used at load (with a placeholder HOME) and when
/// a run renders its paths.
pub fn within_home(home: &Path, rendered: &str) -> Result<PathBuf, String> {
    use std::path::Component;
    let joined = home.join(rendered);
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            Component::ParentDir => {
                if !out.pop() {
                    return Err(format!("`{rendered}` climbs out of HOME"));
                }
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    if out.starts_with(home) && out != home {
        Ok(out)
    } else {
        Err(format!("`{rendered}` is not a path inside HOME"))
    }
}

/// `path` with every symlink resolved, if it is still inside `home` now (call
/// it right before each access: the agent may have planted a symlink since).
pub fn resolve_inside(home: &Path, path: &Path) -> Result<PathBuf, String> {
    let home = std::fs::canonicalize(home).map_err(|e| format!("HOME: {e}"))?;
    let real = std::fs::canonicalize(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if real.starts_with(&home) {
        Ok(real)
    } else {
        Err(format!(
            "{} resolves to {}, outside the agent's HOME; not read",
            path.display(),
            real.display()
        ))
    }
}
