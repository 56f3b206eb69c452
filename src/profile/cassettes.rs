//! A table run's `--record DIR` and `--replay DIR` (see
//! [`crate::provider::cassette`]): recording needs proxy mode and writes one
//! cassette per scenario, `DIR/<id>.jsonl`; replaying turns every selected
//! scenario's `relay` rules into `{kind: cassette, file: DIR/<id>.jsonl}`
//! (same fault) and, unless a rule already answers every call, adds a last
//! such rule for the calls no rule matches (its own rules answer first). Every cassette a run will read
//! is loaded here, so a malformed one is a usage error (exit 2) naming
//! `FILE:LINE` before anything runs; one that several scenarios replay stays
//! loaded, parsed this once, and their providers share it
//! ([`cassette::shared`]). [`record_files`] and [`read_files`] are what the
//! run's output check needs (a cassette is never recorded over a file the
//! run reads).

use std::path::{Path, PathBuf};

use super::Profile;
use crate::provider::replies::{Reply, Source};
use crate::provider::{cassette, Rule};
use crate::scenarios::Scenario;

/// The cassette file of scenario `id` in `dir`.
pub fn file_for(dir: &Path, id: &str) -> PathBuf {
    let safe: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    dir.join(format!("{safe}.jsonl"))
}

/// `--record DIR` (after the upstream is merged into `profile`).
pub fn record(profile: &mut Profile, dir: Option<PathBuf>) -> Result<(), String> {
    let Some(dir) = dir else { return Ok(()) };
    let Some(up) = profile.upstream.as_mut() else {
        return Err(
            "--record writes what an upstream answers: give --upstream URL \
                    (or the profile's `upstream:`)"
                .into(),
        );
    };
    std::fs::create_dir_all(&dir).map_err(|e| format!("--record {}: {e}", dir.display()))?;
    up.record = Some(dir);
    Ok(())
}

/// The cassettes a `--record DIR` run writes, one per scenario (checked
/// with the other outputs before anything runs: none may be a file the run
/// reads, and no two scenarios may share one).
pub fn record_files(profile: &Profile, scenarios: &[Scenario]) -> Vec<PathBuf> {
    let Some(dir) = profile.upstream.as_ref().and_then(|u| u.record.as_ref()) else {
        return Vec::new();
    };
    scenarios.iter().map(|s| file_for(dir, &s.id)).collect()
}

/// The files of the run's cassette side that it reads: every cassette a
/// scenario replays (`--replay` or a row's own `cassette` rule) and the
/// upstream's CA file.
pub fn read_files(profile: &Profile, scenarios: &[Scenario]) -> Vec<PathBuf> {
    let cassettes =
        scenarios
            .iter()
            .flat_map(|s| &s.responder)
            .filter_map(|r| match r.reply.source() {
                Source::Replayed { file, .. } => Some(file.to_path_buf()),
                _ => None,
            });
    let ca = profile.upstream.as_ref().and_then(|u| u.ca.clone());
    cassettes.chain(ca).collect()
}

/// `--replay DIR` (before the upstream check): each scenario's `relay` rules
/// replay its cassette (with their fault), and a last rule answers every
/// other main call from it. Then every cassette the run reads is loaded.
pub fn replay(scenarios: &mut [Scenario], dir: Option<&Path>) -> Result<(), String> {
    if let Some(dir) = dir {
        for s in scenarios.iter_mut() {
            let file = file_for(dir, &s.id);
            if !file.is_file() {
                return Err(format!(
                    "--replay {}: no cassette for scenario `{}` ({} is not a file; record it \
                     with --record)",
                    dir.display(),
                    s.id,
                    file.display()
                ));
            }
            for r in &mut s.responder {
                if let Source::Upstream { fault } = r.reply.source() {
                    let fault = fault.cloned();
                    r.reply = Reply::replayed(file.clone(), fault);
                }
            }
            // Not when a rule already answers every call (the oracle reports
            // a rule that never answered).
            let catch_all = s
                .responder
                .iter()
                .any(|r| r.when == Default::default() && r.wait_for.is_none());
            if !catch_all {
                s.responder.push(Rule {
                    when: Default::default(),
                    wait_for: None,
                    reply: Reply::replayed(file, None),
                });
            }
        }
    }
    // Each scenario's files, once each.
    let files: Vec<(&str, Vec<&Path>)> = scenarios
        .iter()
        .map(|s| {
            let mut files: Vec<&Path> = Vec::new();
            for r in &s.responder {
                if let Source::Replayed { file, .. } = r.reply.source() {
                    if !files.contains(&file) {
                        files.push(file);
                    }
                }
            }
            (s.id.as_str(), files)
        })
        .collect();
    for (id, mine) in &files {
        for file in mine {
            let rows = files.iter().filter(|(_, f)| f.contains(file)).count();
            let loaded = if rows > 1 {
                cassette::shared::pin(file)
            } else {
                cassette::shared::get(file)
            };
            loaded.map_err(|e| format!("scenario `{id}`: {e}"))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cassette_six_rows_replay_is_parsed_once_and_shared() {
        let dir = tempfile::tempdir().unwrap();
        let tape = dir.path().join("t.jsonl");
        std::fs::write(
            &tape,
            "{\"cassette\":1,\"wire\":\"openai-chat\"}\n{\"call\":0,\"match\":{\"role\":\"user\"},\"status\":200,\"events\":[{\"type\":\"text\",\"at\":0,\"text\":\"hi\"}]}\n",
        )
        .unwrap();
        let rows: String = (0..6)
            .map(|n| {
                format!(
                    "  - id: r{n}\n    about: replayed\n    responder:\n      - reply: {{kind: cassette, file: '{}'}}\n    expect: {{answer: hi}}\n",
                    tape.display()
                )
            })
            .collect();
        let mut table =
            crate::scenarios::load::load_str(&format!("scenarios:\n{rows}"), "t.yaml").unwrap();
        replay(&mut table.scenarios, None).unwrap();
        // What each row's provider loads (see provider/server/replay.rs).
        let players: Vec<_> = (0..6)
            .map(|_| cassette::shared::get(&tape).unwrap())
            .collect();
        assert!(
            players
                .iter()
                .all(|p| std::sync::Arc::ptr_eq(p, &players[0])),
            "six rows share the one cassette parsed when the run was checked"
        );
        assert_eq!(
            std::sync::Arc::strong_count(&players[0]),
            7,
            "kept loaded for the run (pinned) and held by each row"
        );
    }

    #[test]
    fn ids_become_safe_file_names() {
        assert_eq!(
            file_for(Path::new("d"), "a/b c"),
            Path::new("d").join("a_b_c.jsonl")
        );
    }
}
