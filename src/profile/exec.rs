//! The `exec:` section of an adapter profile: a one-shot CLI agent driven
//! without a driver script. chaosrun runs one process per turn from an argv
//! template (`first`, `next`, `resume`), feeds stdin as told, and reads the
//! turn's outcome from its output through the selectors declared here
//! (`final`, `failed`; stdout, or stderr with `from: stderr`, per selector
//! in a `final.jsonl` list; paths dotted, with list indices), and takes
//! values it printed (`capture`: its own
//! session id) for later turns' argv and the store query. Everything is
//! checked at load, so a bad selector is a
//! `FILE:LINE:COL` error (exit 2) before any agent starts; the runtime is
//! `driver::exec`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::template::{self, Kind, Kinds, Vars};

/// What the turn's process gets on stdin.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stdin {
    /// `/dev/null` (the message is in argv).
    #[default]
    Closed,
    /// The turn's message, then end of file.
    Message,
}

/// Which of a turn's output streams a selector reads (`from:`): stdout
/// unless told. An agent that answers, or prints its error, on stderr (the
/// Continue CLI's error JSON) is read with `from: stderr`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    #[default]
    Stdout,
    Stderr,
}

/// A stream's name; anything else (a list, a number, a misspelling) says
/// which two there are.
impl<'de> Deserialize<'de> for Source {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Name;
        impl serde::de::Visitor<'_> for Name {
            type Value = Source;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("`stdout` or `stderr`")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Source, E> {
                match v {
                    "stdout" => Ok(Source::Stdout),
                    "stderr" => Ok(Source::Stderr),
                    _ => Err(E::unknown_variant(v, &["stdout", "stderr"])),
                }
            }
        }
        d.deserialize_str(Name)
    }
}

impl Source {
    fn is_stdout(&self) -> bool {
        *self == Source::Stdout
    }
}

/// Picks one JSON-lines record of the stream read (stdout unless `from:`): the LAST line that is a JSON object
/// whose dotted paths in `where` equal the given values (as in a store
/// mapping's `when`: a list is any of its values, `null` is absent); `field` (a dotted
/// path, or a list of them: the first present wins, e.g. `[result,
/// error.message]`) is the value taken from it (a string as is, anything else
/// as JSON). With `join: true` the fields of the last run of consecutive
/// matching JSON lines are concatenated instead (an answer streamed as
/// deltas, Gemini CLI's `{"type":"message","delta":true}`); a matching line
/// after a JSON line that did not match starts a new run.
///
/// In a `final.jsonl` list each selector may name its own stream (`from:`,
/// else the one `final.from` names): an agent that answers on stdout and
/// prints its error on stderr (Continue CLI, mistral-vibe) is read with a
/// stdout selector for the answer and a `from: stderr` one for the error.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonlSel {
    #[serde(rename = "where", default)]
    pub where_: BTreeMap<String, serde_json::Value>,
    #[serde(default, deserialize_with = "one_or_many")]
    pub field: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub join: bool,
    /// This selector's own stream: read only in a `final.jsonl` selector
    /// ([`FinalJsonlDoc`]); a capture or `failed` names its stream itself.
    #[serde(default, skip_serializing_if = "Option::is_none", skip_deserializing)]
    pub from: Option<Source>,
}

/// A `final.jsonl` selector as written: a [`JsonlSel`] that may name its
/// own stream.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FinalJsonlDoc {
    #[serde(rename = "where", default)]
    where_: BTreeMap<String, serde_json::Value>,
    #[serde(default, deserialize_with = "one_or_many")]
    field: Option<Vec<String>>,
    #[serde(default)]
    join: bool,
    #[serde(default)]
    from: Option<Source>,
}

impl From<FinalJsonlDoc> for JsonlSel {
    fn from(d: FinalJsonlDoc) -> JsonlSel {
        JsonlSel {
            where_: d.where_,
            field: d.field,
            join: d.join,
            from: d.from,
        }
    }
}

/// One selector or a list of them (`final.jsonl`): the first that found a
/// non-empty text wins.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
enum OneOrManySel {
    Many(Vec<JsonlSel>),
    One(JsonlSel),
}

/// A list is many selectors, anything else one; a mistake inside says what
/// it is (an untagged enum would only say that nothing matched).
impl<'de> Deserialize<'de> for OneOrManySel {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let v = serde_json::Value::deserialize(d)?;
        let one = |v| serde_json::from_value::<FinalJsonlDoc>(v).map(JsonlSel::from);
        match v {
            serde_json::Value::Array(list) => list
                .into_iter()
                .map(one)
                .collect::<Result<_, _>>()
                .map(OneOrManySel::Many),
            _ => one(v).map(OneOrManySel::One),
        }
        .map_err(D::Error::custom)
    }
}

fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Field {
        One(String),
        Many(Vec<String>),
    }
    Ok(match Option::<Field>::deserialize(d)? {
        None => None,
        Some(Field::One(s)) => Some(vec![s]),
        Some(Field::Many(v)) => Some(v),
    })
}

/// Where the turn's answer (`final`) is, and which stream it is read from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "FinalDoc", into = "FinalDoc")]
pub struct Final {
    pub sel: FinalSel,
    pub from: Source,
}

/// How the turn's answer is picked from its stream's lines.
#[derive(Debug, Clone, PartialEq)]
pub enum FinalSel {
    /// `{jsonl: {where: {...}, field: PATH}}`, or a list of such selectors:
    /// the first that found a non-empty text wins.
    Jsonl(Vec<JsonlSel>),
    /// `{last_line: true}`: the last non-empty line.
    LastLine,
    /// `{regex: "..."}`: the last line matching; its first capture
    /// group (or the whole match).
    Regex(String),
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FinalDoc {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    jsonl: Option<OneOrManySel>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_line: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    regex: Option<String>,
    #[serde(default, skip_serializing_if = "Source::is_stdout")]
    from: Source,
}

impl TryFrom<FinalDoc> for Final {
    type Error = String;
    fn try_from(d: FinalDoc) -> Result<Self, String> {
        let from = d.from;
        FinalSel::try_from(d).map(|sel| Final { sel, from })
    }
}

impl From<Final> for FinalDoc {
    fn from(f: Final) -> FinalDoc {
        FinalDoc {
            from: f.from,
            ..FinalDoc::from(f.sel)
        }
    }
}

impl TryFrom<FinalDoc> for FinalSel {
    type Error = String;
    fn try_from(d: FinalDoc) -> Result<Self, String> {
        let n = usize::from(d.jsonl.is_some())
            + usize::from(d.last_line == Some(true))
            + usize::from(d.regex.is_some());
        if n != 1 {
            return Err(
                "`exec.final` takes exactly one of `jsonl: {where: {...}, field: PATH}`, \
                        `last_line: true`, `regex: \"...\"`"
                    .into(),
            );
        }
        if let Some(j) = d.jsonl {
            let sels = match j {
                OneOrManySel::One(s) => vec![s],
                OneOrManySel::Many(v) => v,
            };
            if sels.is_empty() {
                return Err("`exec.final.jsonl` is an empty list of selectors".into());
            }
            if sels.iter().any(|j| {
                j.field
                    .as_deref()
                    .is_none_or(|f| f.is_empty() || f.iter().any(String::is_empty))
            }) {
                return Err(
                    "`exec.final.jsonl` needs a `field` (the answer's dotted path, e.g. `result`)"
                        .into(),
                );
            }
            for j in &sels {
                j.check_paths("exec.final.jsonl")?;
            }
            return Ok(FinalSel::Jsonl(sels));
        }
        if let Some(r) = d.regex {
            check_regex(&r, "exec.final.regex")?;
            return Ok(FinalSel::Regex(r));
        }
        Ok(FinalSel::LastLine)
    }
}

impl From<FinalSel> for FinalDoc {
    fn from(s: FinalSel) -> FinalDoc {
        match s {
            FinalSel::Jsonl(j) => FinalDoc {
                jsonl: Some(OneOrManySel::Many(j)),
                ..FinalDoc::default()
            },
            FinalSel::LastLine => FinalDoc {
                last_line: Some(true),
                ..FinalDoc::default()
            },
            FinalSel::Regex(r) => FinalDoc {
                regex: Some(r),
                ..FinalDoc::default()
            },
        }
    }
}

/// What marks the turn failed; any one that holds does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailedSel {
    /// A nonzero exit code (or death by a signal chaosrun did not send).
    #[serde(default = "yes")]
    pub exit_code_nonzero: bool,
    /// A JSON line matching `where` (its `field` is not used), on the
    /// stream `from` names.
    #[serde(default)]
    pub jsonl: Option<JsonlSel>,
    /// With `jsonl`: only the LAST JSON line matching these `where`
    /// pairs is judged, and the turn failed if that line also matches
    /// `jsonl`. For an agent that prints an error line and then goes on: a
    /// retried call's error event before the answer (pi), a subagent's own
    /// `result` line before the parent's (qwen-code).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_of: Option<BTreeMap<String, serde_json::Value>>,
    /// A regex any stderr line matches.
    #[serde(default)]
    pub stderr: Option<String>,
    /// The turn failed unless its last non-empty line (on the stream `from`
    /// names) matches this regex: for an agent whose exit code says nothing
    /// and whose answer always ends with a known line (aider exits 0 after
    /// an error; its answers end with `Tokens: N sent, M received.`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unless_last_line: Option<String>,
    /// The stream `jsonl`, `last_of` and `unless_last_line` read: stdout
    /// unless told.
    #[serde(default, skip_serializing_if = "Source::is_stdout")]
    pub from: Source,
}

fn yes() -> bool {
    true
}

impl Default for FailedSel {
    fn default() -> Self {
        FailedSel {
            exit_code_nonzero: true,
            jsonl: None,
            last_of: None,
            stderr: None,
            unless_last_line: None,
            from: Source::Stdout,
        }
    }
}

fn check_regex(r: &str, what: &str) -> Result<(), String> {
    regex::Regex::new(r)
        .map(drop)
        .map_err(|e| format!("`{what}` is not a valid regex: {e}"))
}

/// Where a captured value is in a turn's output (`exec.capture.NAME`;
/// stdout unless `from: stderr`): a
/// JSON line matching `jsonl` (its `field`, as `final.jsonl` reads it), or
/// the first group (or whole match) of `regex` on any line. The latest match
/// of any turn so far is the value; later turns' argv, the resume argv and
/// `store_session` use it as `{{captured.NAME}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "CaptureDoc", into = "CaptureDoc")]
pub struct Capture {
    pub sel: CaptureSel,
    pub from: Source,
}

/// How a captured value is picked from its stream's lines.
#[derive(Debug, Clone, PartialEq)]
pub enum CaptureSel {
    Jsonl(JsonlSel),
    Regex(String),
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CaptureDoc {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    jsonl: Option<JsonlSel>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    regex: Option<String>,
    #[serde(default, skip_serializing_if = "Source::is_stdout")]
    from: Source,
}

impl TryFrom<CaptureDoc> for Capture {
    type Error = String;
    fn try_from(d: CaptureDoc) -> Result<Self, String> {
        let from = d.from;
        let sel: CaptureSel = match (d.jsonl, d.regex) {
            (Some(j), None) => {
                if j.join {
                    return Err("`exec.capture.*.jsonl` takes no `join`".into());
                }
                if j.field
                    .as_deref()
                    .is_none_or(|f| f.is_empty() || f.iter().any(String::is_empty))
                {
                    return Err("`exec.capture.*.jsonl` needs a `field` (the value's dotted path, e.g. `session_id`)".into());
                }
                j.check_paths("exec.capture.*.jsonl")?;
                CaptureSel::Jsonl(j)
            }
            (None, Some(r)) => {
                check_regex(&r, "exec.capture.*.regex")?;
                CaptureSel::Regex(r)
            }
            _ => return Err("a capture takes exactly one of `jsonl: {where: {...}, field: PATH}` or `regex: \"...\"`".into()),
        };
        Ok(Capture { sel, from })
    }
}

impl From<Capture> for CaptureDoc {
    fn from(c: Capture) -> CaptureDoc {
        let (jsonl, regex) = match c.sel {
            CaptureSel::Jsonl(j) => (Some(j), None),
            CaptureSel::Regex(r) => (None, Some(r)),
        };
        CaptureDoc {
            jsonl,
            regex,
            from: c.from,
        }
    }
}

/// Characters kept of a captured value.
pub const MAX_CAPTURE_CHARS: usize = 1024;
/// Captures one profile may declare.
pub const MAX_CAPTURES: usize = 16;

/// The template variable a capture is read as: `captured.NAME`.
pub fn captured_var(name: &str) -> String {
    format!("captured.{name}")
}

/// The `exec:` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "ExecDoc", into = "ExecDoc")]
pub struct ExecSpec {
    /// argv of the first turn.
    pub first: Vec<String>,
    /// argv of every later turn (default: `first`).
    pub next: Vec<String>,
    /// argv of the first turn after a kill (default: `next`).
    pub resume: Vec<String>,
    pub stdin: Stdin,
    pub final_sel: Final,
    pub failed: FailedSel,
    /// Seconds between SIGINT to the turn's process group and SIGKILL.
    pub interrupt_grace: f64,
    /// Values taken from the agent's output, by name.
    pub capture: BTreeMap<String, Capture>,
    /// The value bound as the store query's session id (`:session_id`,
    /// `$1`); default `{{session_id}}`, e.g. `{{captured.session}}`.
    pub store_session: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExecDoc {
    first: Vec<String>,
    #[serde(default)]
    next: Option<Vec<String>>,
    #[serde(default)]
    resume: Option<Vec<String>>,
    #[serde(default)]
    stdin: Stdin,
    #[serde(rename = "final")]
    final_sel: Final,
    #[serde(default)]
    failed: FailedSel,
    #[serde(default)]
    interrupt_grace: Option<f64>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    capture: BTreeMap<String, Capture>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    store_session: Option<String>,
}

/// The variables an exec argv may use on top of a run's: the turn's text,
/// the session id as a UUID, the turn's index.
pub const EXEC_VARS: [&str; 3] = ["message", "session_uuid", "turn"];

impl TryFrom<ExecDoc> for ExecSpec {
    type Error = String;
    fn try_from(d: ExecDoc) -> Result<Self, String> {
        let next = d.next.unwrap_or_else(|| d.first.clone());
        let resume = d.resume.unwrap_or_else(|| next.clone());
        let mut vars: Vars = super::placeholder_vars();
        let mut kinds = super::var_kinds();
        for v in EXEC_VARS {
            vars.insert(v.into(), "1".into());
            let kind = if v == "turn" { Kind::Count } else { Kind::Text };
            kinds.insert(v.into(), kind);
        }
        let check_argv =
            |name: &str, argv: &[String], vars: &Vars| check_argv(name, argv, vars, &kinds);
        // `first` runs before the agent printed anything: no capture yet.
        check_argv("first", &d.first, &vars)?;
        check_captures(&d.capture)?;
        for name in d.capture.keys() {
            vars.insert(captured_var(name), "1".into());
        }
        check_argv("next", &next, &vars)?;
        check_argv("resume", &resume, &vars)?;
        let store_session = d.store_session.unwrap_or_else(|| "{{session_id}}".into());
        template::check(&store_session, &vars, &kinds)
            .map_err(|e| format!("`exec.store_session`: {e}"))?;
        if let Some(r) = &d.failed.stderr {
            check_regex(r, "exec.failed.stderr")?;
        }
        if let Some(r) = &d.failed.unless_last_line {
            check_regex(r, "exec.failed.unless_last_line")?;
        }
        let reads_from = d.failed.jsonl.is_some() || d.failed.unless_last_line.is_some();
        if d.failed.from == Source::Stderr && !reads_from {
            return Err("`exec.failed.from` says which stream `exec.failed.jsonl` (or `unless_last_line`) reads: give `jsonl` too, or `unless_last_line` (`exec.failed.stderr` is a pattern on stderr already)".into());
        }
        if let Some(j) = &d.failed.jsonl {
            j.check_paths("exec.failed.jsonl")?;
        }
        for k in d.failed.last_of.iter().flat_map(BTreeMap::keys) {
            check_path(k, "exec.failed.last_of")?;
        }
        if d.failed.last_of.is_some() && d.failed.jsonl.is_none() {
            return Err("`exec.failed.last_of` picks which line `exec.failed.jsonl` judges: give `jsonl` too".into());
        }
        let grace = d.interrupt_grace.unwrap_or(5.0);
        if !(grace.is_finite() && (0.0..=600.0).contains(&grace)) {
            return Err("`exec.interrupt_grace` is seconds, 0 to 600".into());
        }
        Ok(ExecSpec {
            first: d.first,
            next,
            resume,
            stdin: d.stdin,
            final_sel: d.final_sel,
            failed: d.failed,
            interrupt_grace: grace,
            capture: d.capture,
            store_session,
        })
    }
}

/// An argv template: non-empty, and every `{{...}}` known in `vars`; a
/// `{{captured.X}}` that is not declared says so.
fn check_argv(name: &str, argv: &[String], vars: &Vars, kinds: &Kinds) -> Result<(), String> {
    if argv.first().is_none_or(|a| a.trim().is_empty()) {
        return Err(format!("`exec.{name}` must be a non-empty argv"));
    }
    for a in argv {
        template::check(a, vars, kinds).map_err(|e| {
            if a.contains("captured.") && name == "first" {
                format!("`exec.first`: {e} (the first turn runs before anything is captured; use captures in `next` and `resume`)")
            } else if a.contains("captured.") {
                format!("`exec.{name}`: {e} (declare it under `exec.capture`)")
            } else {
                format!("`exec.{name}`: {e}")
            }
        })?;
    }
    Ok(())
}

/// Capture names are identifiers; at most [`MAX_CAPTURES`].
fn check_captures(capture: &BTreeMap<String, Capture>) -> Result<(), String> {
    if capture.len() > MAX_CAPTURES {
        return Err(format!(
            "`exec.capture` declares {} values; at most {MAX_CAPTURES}",
            capture.len()
        ));
    }
    for name in capture.keys() {
        let ok = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            return Err(format!(
                "`exec.capture`: `{name}` is not a name (letters, digits, `_`)"
            ));
        }
    }
    Ok(())
}

impl From<ExecSpec> for ExecDoc {
    fn from(s: ExecSpec) -> ExecDoc {
        ExecDoc {
            first: s.first,
            next: Some(s.next),
            resume: Some(s.resume),
            stdin: s.stdin,
            final_sel: s.final_sel,
            failed: s.failed,
            interrupt_grace: Some(s.interrupt_grace),
            capture: s.capture,
            store_session: Some(s.store_session),
        }
    }
}

/// A UUID (RFC 4122 layout, version 4 and variant bits set) derived from the
/// session id: the same id always gives the same UUID, for CLIs that insist
/// on one (`--session-id UUID`).
pub fn session_uuid(session_id: &str) -> String {
    use sha2::Digest;
    let h = sha2::Sha256::digest(session_id.as_bytes());
    let mut b = [0u8; 16];
    b.copy_from_slice(&h[..16]);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let x: String = b.iter().map(|v| format!("{v:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &x[..8],
        &x[8..12],
        &x[12..16],
        &x[16..20],
        &x[20..]
    )
}

/// One step of a selector's path: a key, or a list index (negative from
/// the end: `-1` is the last element).
#[derive(Debug, PartialEq)]
enum Step<'a> {
    /// `name`, or a bare number: on a list an index, on an object a key.
    Key(&'a str),
    /// `[N]`: on a list only.
    Index(i64),
}

/// A selector path split into steps: dotted keys, each followed by any
/// number of `[N]` list indices (`messages[-1].content`); a bare number
/// between dots is an index too on a list (`messages.0.content`,
/// `messages.-1.content`).
fn steps(path: &str) -> Result<Vec<Step<'_>>, String> {
    let mut out = Vec::new();
    for part in path.split('.') {
        let (key, mut rest) = part.split_at(part.find('[').unwrap_or(part.len()));
        if !key.is_empty() {
            out.push(Step::Key(key));
        } else if rest.is_empty() {
            return Err(format!(
                "`{path}` has an empty step (two dots, or a dot at an end)"
            ));
        }
        while let Some(inner) = rest.strip_prefix('[') {
            let close = inner
                .find(']')
                .ok_or_else(|| format!("`{path}`: `[` without `]`"))?;
            let i = inner[..close].trim().parse::<i64>().map_err(|_| {
                format!(
                    "`{path}`: `[{}]` is not a list index (a whole number, `-1` the last)",
                    &inner[..close]
                )
            })?;
            out.push(Step::Index(i));
            rest = &inner[close + 1..];
        }
        if !rest.is_empty() {
            return Err(format!(
                "`{path}`: `{rest}` after an index (write `a[0].b`)"
            ));
        }
    }
    Ok(out)
}

/// A selector path checked at load ([`steps`]), `what` naming where it stands.
fn check_path(path: &str, what: &str) -> Result<(), String> {
    steps(path).map(drop).map_err(|e| format!("`{what}`: {e}"))
}

/// Element `i` of `a`, counting from the end when negative.
fn index(a: &[serde_json::Value], i: i64) -> Option<&serde_json::Value> {
    let at = if i < 0 {
        a.len()
            .checked_sub(usize::try_from(i.unsigned_abs()).ok()?)?
    } else {
        usize::try_from(i).ok()?
    };
    a.get(at)
}

/// The value at `path` in `v`: dotted keys, list indices as `[N]` or as a
/// bare number between dots, negative from the end ([`steps`]). A path that
/// does not parse finds nothing (the load check refuses it first).
pub fn at_path<'a>(v: &'a serde_json::Value, path: &str) -> Option<&'a serde_json::Value> {
    steps(path)
        .ok()?
        .into_iter()
        .try_fold(v, |v, step| match (v, step) {
            (serde_json::Value::Array(a), Step::Key(k)) => index(a, k.parse().ok()?),
            (serde_json::Value::Array(a), Step::Index(i)) => index(a, i),
            (_, Step::Key(k)) => v.get(k),
            (_, Step::Index(_)) => None,
        })
}

/// Whether `rec` is an object matching every `where` pair (see
/// [`JsonlSel::matches`]).
fn matches_where(where_: &BTreeMap<String, serde_json::Value>, rec: &serde_json::Value) -> bool {
    rec.is_object()
        && where_.iter().all(|(k, want)| {
            let got = at_path(rec, k).unwrap_or(&serde_json::Value::Null);
            match want {
                serde_json::Value::Array(any) => any.contains(got),
                one => one == got,
            }
        })
}

impl FailedSel {
    /// Whether stdout JSON line `rec` decides the turn failed: `Some(true)`
    /// it failed, `Some(false)` (only with `last_of`) a later line cleared
    /// an earlier failure, `None` the line says nothing.
    pub fn judge_line(&self, rec: &serde_json::Value) -> Option<bool> {
        let sel = self.jsonl.as_ref()?;
        match &self.last_of {
            Some(of) => matches_where(of, rec).then(|| sel.matches(rec)),
            None => sel.matches(rec).then_some(true),
        }
    }
}

impl JsonlSel {
    /// Every path it names (its `where` keys, its `field`s) parses.
    fn check_paths(&self, what: &str) -> Result<(), String> {
        let fields = self.field.iter().flatten();
        self.where_
            .keys()
            .chain(fields)
            .try_for_each(|p| check_path(p, what))
    }

    /// The stream this selector reads: its own `from`, else `default`
    /// (the `from` of the `final` it stands in).
    pub fn source(&self, default: Source) -> Source {
        self.from.unwrap_or(default)
    }

    /// Whether the record matches every `where` pair: a list is any of its
    /// values (Codex ends a turn with `item.completed` or `turn.failed`), and
    /// `null` is a path that is absent (or null).
    pub fn matches(&self, rec: &serde_json::Value) -> bool {
        matches_where(&self.where_, rec)
    }

    /// The `field` of a matching record, as text.
    pub fn take(&self, rec: &serde_json::Value) -> Option<String> {
        let v = self
            .field
            .as_deref()?
            .iter()
            .find_map(|f| at_path(rec, f).filter(|v| !v.is_null()))?;
        Some(match v {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Null => String::new(),
            other => other.to_string(),
        })
    }
}

/// One `final.jsonl` selector's state over a turn's stdout: its text so
/// far, and whether the last JSON line matched it (a `join` run goes on).
pub type Pick = (Option<String>, bool);

fn clip(s: &str, chars: usize) -> String {
    s.chars().take(chars).collect()
}

/// Feed one stdout JSON record to the `final.jsonl` selectors (`picks` holds
/// their state); the turn's `final` so far: the first selector's non-empty
/// text, each kept to `keep` characters.
pub fn pick_final(
    sels: &[JsonlSel],
    picks: &mut Vec<Pick>,
    rec: &serde_json::Value,
    keep: usize,
) -> Option<String> {
    pick_final_from(sels, None, picks, rec, keep)
}

/// [`pick_final`] for a record of one stream: `read` is `(the stream, the
/// `final.from` default)`, and only the selectors reading that stream see
/// the record (each keeps its own state; the first non-empty text of the
/// whole list still wins, whichever stream it came from).
pub fn pick_final_from(
    sels: &[JsonlSel],
    read: Option<(Source, Source)>,
    picks: &mut Vec<Pick>,
    rec: &serde_json::Value,
    keep: usize,
) -> Option<String> {
    picks.resize(sels.len(), (None, false));
    for (sel, (text, in_run)) in sels.iter().zip(picks.iter_mut()) {
        if read.is_some_and(|(stream, default)| sel.source(default) != stream) {
            continue;
        }
        let hit = sel.matches(rec);
        if hit {
            let got = sel.take(rec);
            *text = match (sel.join && *in_run, text.take(), got) {
                (true, Some(before), Some(t)) => Some(clip(&(before + &t), keep)),
                (true, before, None) => before,
                (_, _, got) => got.map(|t| clip(&t, keep)),
            };
        }
        *in_run = hit;
    }
    picks
        .iter()
        .find_map(|(t, _)| t.clone().filter(|t| !t.trim().is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(y: &str) -> Result<ExecSpec, String> {
        serde_yaml::from_str::<ExecSpec>(y).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_chain_first_next_resume() {
        let s = parse("first: [a, \"{{message}}\"]\nfinal: {last_line: true}\n").unwrap();
        assert_eq!(s.next, s.first);
        assert_eq!(s.resume, s.first);
        assert_eq!(s.stdin, Stdin::Closed);
        assert!(s.failed.exit_code_nonzero);
        assert_eq!(s.interrupt_grace, 5.0);
    }

    #[test]
    fn bad_sections_are_refused_with_a_reason() {
        for (y, says) in [
            ("first: []\nfinal: {last_line: true}\n", "non-empty argv"),
            (
                "first: [a, \"{{mesage}}\"]\nfinal: {last_line: true}\n",
                "mesage",
            ),
            ("first: [a]\nfinal: {}\n", "exactly one"),
            (
                "first: [a]\nfinal: {last_line: true, regex: x}\n",
                "exactly one",
            ),
            (
                "first: [a]\nfinal: {jsonl: {where: {type: result}}}\n",
                "needs a `field`",
            ),
            ("first: [a]\nfinal: {regex: \"(\"}\n", "not a valid regex"),
            (
                "first: [a]\nfinal: {last_line: true}\nfailed: {stderr: \"[\"}\n",
                "not a valid regex",
            ),
            (
                "first: [a]\nfinal: {last_line: true}\nstdin: pipe\n",
                "unknown variant",
            ),
            (
                "first: [a]\nfinal: {last_line: true}\nfailed: {last_of: {type: result}}\n",
                "give `jsonl` too",
            ),
            (
                "first: [a]\nfinal: {last_line: true}\ninterrupt_grace: -1\n",
                "0 to 600",
            ),
            (
                "first: [a]\nfinal: {last_line: true}\nfinale: 1\n",
                "unknown field",
            ),
            (
                "first: [a]\nfinal: {last_line: true, from: stdrr}\n",
                "unknown variant `stdrr`, expected `stdout` or `stderr`",
            ),
            (
                "first: [a]\nfinal: {last_line: true}\nfailed: {from: stderr}\n",
                "give `jsonl` too",
            ),
            (
                "first: [a]\nfinal: {last_line: true}\ncapture: {s: {regex: x, from: [stderr]}}\n",
                "expected `stdout` or `stderr`",
            ),
        ] {
            let e = parse(y).unwrap_err();
            assert!(e.contains(says), "{y}: {e}");
        }
    }

    #[test]
    fn from_names_the_stream_and_defaults_to_stdout() {
        let s = parse(
            "first: [a]\nfinal: {regex: \"^A: (.*)\", from: stderr}\n\
             failed: {jsonl: {where: {error: true}}, from: stderr}\n\
             capture: {id: {regex: \"id=(\\\\w+)\", from: stderr}, other: {regex: x}}\n",
        )
        .unwrap();
        assert_eq!(s.final_sel.from, Source::Stderr);
        assert_eq!(s.failed.from, Source::Stderr);
        assert_eq!(s.capture["id"].from, Source::Stderr);
        assert_eq!(s.capture["other"].from, Source::Stdout);
        // What a profile says survives a round trip (`--explain`, the report).
        let back: ExecSpec = serde_yaml::from_str(&serde_yaml::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
        let d = parse("first: [a]\nfinal: {last_line: true}\n").unwrap();
        assert_eq!(d.final_sel.from, Source::Stdout);
        assert_eq!(d.failed.from, Source::Stdout);
    }

    #[test]
    fn selectors_pick_the_record_and_field() {
        let sel = JsonlSel {
            where_: [
                ("type".to_string(), serde_json::json!("result")),
                ("meta.is_error".to_string(), serde_json::json!(true)),
            ]
            .into(),
            field: Some(vec!["result".into(), "error.message".into()]),
            join: false,
            from: None,
        };
        let hit =
            serde_json::json!({"type": "result", "meta": {"is_error": true}, "result": "boom"});
        let miss = serde_json::json!({"type": "result", "meta": {"is_error": false}});
        assert!(sel.matches(&hit) && !sel.matches(&miss));
        assert_eq!(sel.take(&hit).as_deref(), Some("boom"));
        let err = serde_json::json!({"type": "result", "error": {"message": "HTTP 400"}});
        assert_eq!(sel.take(&err).as_deref(), Some("HTTP 400"));
        let one: JsonlSel = serde_yaml::from_str("{field: result}").unwrap();
        assert_eq!(one.field, Some(vec!["result".to_string()]));
        assert!(!sel.matches(&serde_json::json!("result")));
    }

    /// Judge `lines` in order as a turn's stdout would be.
    fn failed_after(failed: &str, lines: &[serde_json::Value]) -> bool {
        let f: FailedSel = serde_yaml::from_str(failed).unwrap();
        let mut out = false;
        for l in lines {
            if let Some(v) = f.judge_line(l) {
                out = v;
            }
        }
        out
    }

    #[test]
    fn last_of_judges_only_the_last_line_of_its_kind() {
        use serde_json::json;
        // qwen-code: a subagent's LOOP_DETECTED result, then the parent's success.
        let sub = json!({"type": "result", "is_error": true, "num_turns": 0});
        let ok = json!({"type": "result", "is_error": false, "result": "done"});
        let any = "{jsonl: {where: {type: result, is_error: true}}}";
        let last = "{jsonl: {where: {type: result, is_error: true}}, last_of: {type: result}}";
        assert!(failed_after(any, &[sub.clone(), ok.clone()]));
        assert!(!failed_after(last, &[sub.clone(), ok.clone()]));
        assert!(failed_after(last, &[ok.clone(), sub.clone()]));
        // pi: an assistant message_end with stopReason error (a retried call),
        // then one that stops normally; other lines do not move the verdict.
        let err =
            json!({"type": "message_end", "message": {"role": "assistant", "stopReason": "error"}});
        let stop =
            json!({"type": "message_end", "message": {"role": "assistant", "stopReason": "stop"}});
        let user = json!({"type": "message_end", "message": {"role": "user"}});
        let pi = "{jsonl: {where: {message.stopReason: [error, aborted]}}, \
                  last_of: {type: message_end, message.role: assistant}}";
        assert!(!failed_after(
            pi,
            &[err.clone(), stop.clone(), user.clone()]
        ));
        assert!(failed_after(pi, &[stop, err, user]));
    }

    #[test]
    fn a_where_list_is_any_of_and_null_is_absent() {
        // Codex CLI's turn ends with its answer item or with `turn.failed`.
        let sel: JsonlSel = serde_yaml::from_str(
            "{where: {type: [item.completed, turn.failed], item.type: [agent_message, null]}, \
              field: [item.text, error.message]}",
        )
        .unwrap();
        let answer = serde_json::json!({"type": "item.completed",
            "item": {"type": "agent_message", "text": "done"}});
        let failed = serde_json::json!({"type": "turn.failed", "error": {"message": "HTTP 400"}});
        let tool = serde_json::json!({"type": "item.completed",
            "item": {"type": "command_execution", "command": "ls"}});
        let started = serde_json::json!({"type": "turn.started"});
        assert!(sel.matches(&answer) && sel.matches(&failed));
        assert!(!sel.matches(&tool) && !sel.matches(&started));
        assert_eq!(sel.take(&answer).as_deref(), Some("done"));
        assert_eq!(sel.take(&failed).as_deref(), Some("HTTP 400"));
    }

    #[test]
    fn join_concatenates_the_last_run_of_deltas_and_a_list_falls_back() {
        let s = parse(
            "first: [a]\nfinal: {jsonl: [{where: {type: message, role: assistant}, field: content, join: true},\n  {where: {type: result}, field: error.message}]}\n",
        )
        .unwrap();
        let FinalSel::Jsonl(sels) = &s.final_sel.sel else {
            panic!("{:?}", s.final_sel)
        };
        let lines = [
            r#"{"type":"message","role":"user","content":"hi"}"#,
            r#"{"type":"message","role":"assistant","content":"Running ","delta":true}"#,
            r#"{"type":"message","role":"assistant","content":"ls.","delta":true}"#,
            r#"{"type":"tool_use","tool_name":"run_shell_command"}"#,
            r#"{"type":"message","role":"assistant","content":"alive ","delta":true}"#,
            r#"{"type":"message","role":"assistant","content":"42","delta":true}"#,
            r#"{"type":"result","status":"success"}"#,
        ];
        let mut picks = Vec::new();
        let mut last = None;
        for l in lines {
            last = pick_final(sels, &mut picks, &serde_json::from_str(l).unwrap(), 100);
        }
        assert_eq!(last.as_deref(), Some("alive 42"));
        // No assistant text: the error's message is the answer.
        let mut picks = Vec::new();
        let err = serde_json::json!({"type": "result", "status": "error", "error": {"message": "HTTP 400"}});
        assert_eq!(
            pick_final(sels, &mut picks, &err, 100).as_deref(),
            Some("HTTP 400")
        );
        // Kept to `keep` characters however many deltas come.
        let mut picks = Vec::new();
        let d = serde_json::json!({"type": "message", "role": "assistant", "content": "abcdef"});
        for _ in 0..10 {
            last = pick_final(sels, &mut picks, &d, 8);
        }
        assert_eq!(last.as_deref(), Some("abcdefab"));
        assert!(parse("first: [a]\nfinal: {jsonl: []}\n")
            .unwrap_err()
            .contains("empty list"));
    }

    #[test]
    fn each_final_selector_may_name_its_own_stream() {
        let s = parse(
            "first: [a]\nfinal: {jsonl: [{where: {status: success}, field: response},\n  \
             {where: {status: error}, field: message, from: stderr}]}\n",
        )
        .unwrap();
        let FinalSel::Jsonl(sels) = &s.final_sel.sel else {
            panic!("{:?}", s.final_sel)
        };
        assert_eq!(s.final_sel.from, Source::Stdout);
        assert_eq!(sels[0].source(s.final_sel.from), Source::Stdout);
        assert_eq!(sels[1].source(s.final_sel.from), Source::Stderr);
        let back: ExecSpec = serde_yaml::from_str(&serde_yaml::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
        // A stderr record reaches only the stderr selector, a stdout one only
        // the stdout selector; the list's order decides between them.
        let err = serde_json::json!({"status": "error", "message": "HTTP 500"});
        let ok = serde_json::json!({"status": "success", "response": "42"});
        let out = Some((Source::Stdout, Source::Stdout));
        let errs = Some((Source::Stderr, Source::Stdout));
        let mut picks = Vec::new();
        assert_eq!(pick_final_from(sels, out, &mut picks, &err, 100), None);
        let got = pick_final_from(sels, errs, &mut picks, &err, 100);
        assert_eq!(got.as_deref(), Some("HTTP 500"));
        let got = pick_final_from(sels, out, &mut picks, &ok, 100);
        assert_eq!(got.as_deref(), Some("42"));
        assert_eq!(
            pick_final_from(sels, errs, &mut picks, &ok, 100).as_deref(),
            Some("42")
        );
        // Where a selector's own stream is already said, a `from` inside it is refused.
        for (y, says) in [
            (
                "first: [a]\nfinal: {last_line: true}\ncapture: {s: {jsonl: {field: id, from: stderr}}}\n",
                "unknown field `from`",
            ),
            (
                "first: [a]\nfinal: {last_line: true}\nfailed: {jsonl: {where: {e: 1}, from: stderr}}\n",
                "unknown field `from`",
            ),
            (
                "first: [a]\nfinal: {jsonl: {field: x, from: stdrr}}\n",
                "expected `stdout` or `stderr`",
            ),
        ] {
            let e = parse(y).unwrap_err();
            assert!(e.contains(says), "{y}: {e}");
        }
    }

    #[test]
    fn paths_take_list_indices_negative_from_the_end() {
        let v = serde_json::json!({"messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"text": "a"}, {"text": "last"}]}
        ]});
        for (path, want) in [
            ("messages[-1].role", Some("assistant")),
            ("messages[0].content", Some("hi")),
            ("messages.0.content", Some("hi")),
            ("messages.-1.role", Some("assistant")),
            ("messages[-1].content[-1].text", Some("last")),
            ("messages[1].content.0.text", Some("a")),
            ("messages[2].role", None),
            ("messages[-3].role", None),
            ("messages[0][0]", None),
        ] {
            let got = at_path(&v, path).and_then(|v| v.as_str());
            assert_eq!(got, want, "{path}");
        }
        let s = parse(
            "first: [a]\nfinal: {jsonl: {where: {type: done}, field: \"messages[-1].content\"}}\n",
        )
        .unwrap();
        let FinalSel::Jsonl(sels) = &s.final_sel.sel else {
            panic!()
        };
        let rec = serde_json::json!({"type": "done", "messages": [{"content": "x"}, {"content": "answer"}]});
        assert_eq!(sels[0].take(&rec).as_deref(), Some("answer"));
        for (y, says) in [
            ("final: {jsonl: {field: \"messages[-1\"}}", "without `]`"),
            (
                "final: {jsonl: {field: \"messages[last]\"}}",
                "not a list index",
            ),
            (
                "final: {jsonl: {field: \"messages[0]x\"}}",
                "after an index",
            ),
            ("final: {jsonl: {field: \"a..b\"}}", "empty step"),
            (
                "final: {last_line: true}\ncapture: {s: {jsonl: {field: \"a[x]\"}}}",
                "exec.capture",
            ),
            (
                "final: {last_line: true}\nfailed: {jsonl: {where: {\"a[\": 1}}}",
                "exec.failed.jsonl",
            ),
        ] {
            let e = parse(&format!("first: [a]\n{y}\n")).unwrap_err();
            assert!(e.contains(says), "{y}: {e}");
        }
    }

    #[test]
    fn the_session_uuid_is_stable_and_shaped() {
        let a = session_uuid("chaos-x-1");
        assert_eq!(a, session_uuid("chaos-x-1"));
        assert_ne!(a, session_uuid("chaos-x-2"));
        let parts: Vec<&str> = a.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(parts[2].starts_with('4'));
        assert!(matches!(parts[3].as_bytes()[0], b'8' | b'9' | b'a' | b'b'));
    }
}
