//! One catalog entry (a shipped agent) and how its install is found.

/// Where `setup.sh` leaves the pinned install, relative to the agent's folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Install {
    /// Nothing to install (the reference agent: Python's standard library).
    Bundled,
    /// npm, into `./prefix/lib` (the layout of `npm install -g --prefix ./prefix PKG`, from the folder's lock): `prefix/lib/node_modules/PKG/package.json`.
    Npm(&'static str),
    /// `pip install DIST` into `./.venv`: `.venv/lib/python*/site-packages/DIST-VERSION.dist-info`.
    Pip(&'static str),
}

/// A shipped agent: `examples/<name>/<profile>`, pinned at `pinned`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The name `--agent` takes; also the folder under `examples/`.
    pub name: &'static str,
    /// What `--agent` is given inside the folder: the profile (`*.yaml`), or
    /// a driver executable whose profile `NAME.yaml` sits beside it.
    pub profile: &'static str,
    /// The version `setup.sh` installs (`3.2.*`: any 3.2.x).
    pub pinned: &'static str,
    /// Where the install is found.
    pub install: Install,
}

/// An entry (const, so the registry is one table of one-liners).
pub const fn entry(
    name: &'static str,
    profile: &'static str,
    pinned: &'static str,
    install: Install,
) -> Entry {
    Entry {
        name,
        profile,
        pinned,
        install,
    }
}

impl Entry {
    /// The profile's YAML file inside the folder.
    pub fn profile_yaml(&self) -> String {
        if self.profile.ends_with(".yaml") {
            self.profile.to_string()
        } else {
            format!("{}.yaml", self.profile)
        }
    }

    /// Does an installed `version` satisfy the pin (`3.2.*` matches `3.2.7`)?
    pub fn matches(&self, version: &str) -> bool {
        match self.pinned.strip_suffix('*') {
            Some(prefix) => version.starts_with(prefix),
            None => version == self.pinned,
        }
    }
}
