//! `nexbot-skill`: what a skill is, read one way by the host and by the subagent.
//!
//! A skill is a folder in the skills directory holding a `SKILL.md`: YAML front matter between
//! two `---` lines, then Markdown instructions (the *body*). The front matter has
//!
//! - `name` (required): equal to the folder's name;
//! - `description` (required): one line the model chooses by, 1..=1024 characters;
//! - `tools` (optional): subagent tools the skill uses, each one of
//!   [`nexbot_protocol::SUBAGENT_TOOLS`] (or the planning tool);
//! - `requires` (optional): programs the skill runs, which the subagent image must have;
//! - `domains` (optional): the destinations the skill reaches, each an exact host name or IP
//!   address with an optional port (443 unless named): `api.open-meteo.com`,
//!   `api.example.com:8443`, `[2001:db8::1]:443` ([`Destination`]). In `egress.mode = "ask"`
//!   a task delegated by a turn that read the skill reaches them without a question, as long
//!   as the skill's content is the one the daemon recorded (the host's `skill_grants`);
//! - `secrets` (optional): the names of the stored secrets the skill uses (`OPENAI_API_KEY`),
//!   shown to the operator; a skill declaring a secret does not get it (delegation names
//!   secrets, the user stores them).
//!
//! Other keys are ignored (skills written for other agents carry `license`, `metadata`…).
//!
//! [`load`] applies the one strictness: bad YAML, `name` ≠ folder, a missing description, an
//! unknown tool, any file of the skill over [`MAX_FILE_BYTES`] and a symlink leading out of
//! the skills folder are each a typed [`SkillError`] with the reason. [`scan_dir`] reads every
//! skill of a folder and says for each whether it is offered ([`State`]), and why not;
//! [`screen`] is the content screen that quarantines a skill until the operator allows its
//! exact [`content hash`](LoadedSkill::hash).
//!
//! The YAML crate is `serde-saphyr`: maintained, pure Rust without `unsafe`, built not to
//! panic on hostile input (with limits on nesting and aliases), deserializing through serde
//! straight from the parser's events. `serde_yaml` is deprecated and unmaintained, and its
//! forks wrap the C-derived `unsafe-libyaml`.

mod screen;

use std::fmt;
use std::path::{Component, Path, PathBuf};

use serde::Deserialize;
use sha2::{Digest, Sha256};

pub use screen::{screen, Finding};

/// The file that makes a folder a skill.
pub const SKILL_FILE: &str = "SKILL.md";
/// No file of a skill may be larger (256 KiB).
pub const MAX_FILE_BYTES: u64 = 256 * 1024;
/// A skill's folder may hold at most this many files (deeper trees are refused).
pub const MAX_FILES: usize = 256;
/// How deep a skill's folder may nest.
pub const MAX_DEPTH: usize = 8;
/// The longest description accepted.
pub const MAX_DESCRIPTION_CHARS: usize = 1024;

/// Why a skill cannot be used, said so an operator can fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SkillError {
    #[error(
        "folder name {0:?} is not plain (letters, digits, '-', '_', '.'; not starting with '.')"
    )]
    BadFolderName(String),
    #[error("no SKILL.md in the folder")]
    NoSkillFile,
    #[error(
        "SKILL.md has no front matter: it must start with a `---` line and close it with another"
    )]
    NoFrontMatter,
    #[error("bad YAML in the front matter: {0}")]
    BadYaml(String),
    #[error("`name` is missing from the front matter (it must be the folder name {folder:?})")]
    MissingName { folder: String },
    #[error("`name` is {name:?} but the folder is {folder:?}; they must be equal")]
    NameMismatch { name: String, folder: String },
    #[error("`description` is missing or empty")]
    MissingDescription,
    #[error("`description` is {0} characters, over the limit of 1024")]
    DescriptionTooLong(usize),
    #[error("`tools` names {tool:?}, which is not a subagent tool ({known})")]
    UnknownTool { tool: String, known: String },
    #[error("`requires` names {0:?}, which is not a program name")]
    BadRequirement(String),
    #[error(
        "`domains` names {entry:?}, which is not a destination: {why} (write an exact host or \
         IP address, optionally with a port: `api.example.com`, `api.example.com:8443`, \
         `[2001:db8::1]:443`)"
    )]
    BadDomain { entry: String, why: String },
    #[error(
        "`secrets` names {0:?}, which is not a secret name (capital letters, digits and '_', \
         not starting with a digit, at most 64 characters)"
    )]
    BadSecretName(String),
    #[error("{path} is {bytes} bytes, over the limit of 256 KiB")]
    TooLarge { path: String, bytes: u64 },
    #[error("{path} is a symlink leading out of the skills folder")]
    SymlinkEscapes { path: String },
    #[error("the skill has more than {MAX_FILES} files or nests deeper than {MAX_DEPTH} folders")]
    TooManyFiles,
    #[error("cannot read {path}: {reason}")]
    Io { path: String, reason: String },
}

/// A parsed `SKILL.md`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    pub name: String,
    pub description: String,
    pub tools: Vec<String>,
    pub requires: Vec<String>,
    /// Where the skill goes (`domains`), in the order written, without repeats.
    pub domains: Vec<Destination>,
    /// The secret names the skill uses (`secrets`).
    pub secrets: Vec<String>,
    /// The Markdown after the front matter.
    pub body: String,
}

#[derive(Debug, Deserialize)]
struct FrontMatter {
    name: Option<String>,
    description: Option<String>,
    #[serde(default)]
    tools: Vec<String>,
    #[serde(default)]
    requires: Vec<String>,
    #[serde(default)]
    domains: Vec<String>,
    #[serde(default)]
    secrets: Vec<String>,
}

/// One destination a skill declares: an exact host (lower-case, no trailing dot) or IP
/// address, and a port (443 unless named), as the egress proxy normalises a request's.
///
/// Why exact and not a pattern like `egress.allow`'s `*.example.com`: a skill's domains are
/// allowed without the operator reading them, so each must name one place; a skill that
/// needs several hosts lists each.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Destination {
    pub host: String,
    pub port: u16,
}

/// The port a destination means when it names none (HTTPS).
pub const DEFAULT_PORT: u16 = 443;

impl Destination {
    /// Reads `host`, `host:port`, an IPv6 address, or `[v6]:port`.
    pub fn parse(entry: &str) -> Result<Self, SkillError> {
        let bad = |why: &str| SkillError::BadDomain { entry: entry.to_owned(), why: why.into() };
        let text = entry.trim();
        let (host, port) = if let Some(rest) = text.strip_prefix('[') {
            let (addr, tail) = rest.split_once(']').ok_or_else(|| bad("no closing ]"))?;
            if addr.parse::<std::net::Ipv6Addr>().is_err() {
                return Err(bad("not an IPv6 address between [ and ]"));
            }
            match tail {
                "" => (addr.to_owned(), None),
                _ => (
                    addr.to_owned(),
                    Some(tail.strip_prefix(':').ok_or_else(|| bad("junk after ]"))?),
                ),
            }
        } else if text.parse::<std::net::Ipv6Addr>().is_ok() {
            (text.to_owned(), None)
        } else {
            match text.split_once(':') {
                Some((host, port)) => (host.to_owned(), Some(port)),
                None => (text.to_owned(), None),
            }
        };
        let port = match port {
            None => DEFAULT_PORT,
            Some(port) => match port.parse::<u16>() {
                Ok(port) if port > 0 => port,
                _ => return Err(bad(&format!("{port:?} is not a port"))),
            },
        };
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        if host.contains('*') {
            return Err(bad("a wildcard is not a destination; list each host"));
        }
        let is_ip = host.parse::<std::net::IpAddr>().is_ok();
        let labels_ok = host.len() <= 253
            && host.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && !label.starts_with('-')
                    && !label.ends_with('-')
                    && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            });
        if !is_ip && !labels_ok {
            return Err(bad("not a host name"));
        }
        Ok(Self { host, port })
    }
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// Whether `name` is acceptable as a skill folder's name (and so as `read_skill`'s argument).
pub fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Parses the text of the `SKILL.md` in folder `folder`.
pub fn parse(folder: &str, text: &str) -> Result<Skill, SkillError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    if lines.next().map(|l| l.trim_end()) != Some("---") {
        return Err(SkillError::NoFrontMatter);
    }
    let mut offset = text.find('\n').map_or(text.len(), |i| i + 1);
    let yaml_start = offset;
    let mut yaml_end = None;
    for line in lines {
        if line.trim_end() == "---" {
            yaml_end = Some((offset, offset + line.len()));
            break;
        }
        offset += line.len();
    }
    let (yaml_end, body_start) = yaml_end.ok_or(SkillError::NoFrontMatter)?;
    let yaml = &text[yaml_start..yaml_end];
    let front: FrontMatter = if yaml.trim().is_empty() {
        return Err(SkillError::MissingName { folder: folder.to_owned() });
    } else {
        serde_saphyr::from_str(yaml).map_err(|e| SkillError::BadYaml(one_line(&e.to_string())))?
    };
    let name = front.name.ok_or_else(|| SkillError::MissingName { folder: folder.to_owned() })?;
    if name != folder {
        return Err(SkillError::NameMismatch { name, folder: folder.to_owned() });
    }
    let description = front.description.unwrap_or_default().trim().to_owned();
    if description.is_empty() {
        return Err(SkillError::MissingDescription);
    }
    let chars = description.chars().count();
    if chars > MAX_DESCRIPTION_CHARS {
        return Err(SkillError::DescriptionTooLong(chars));
    }
    if let Some(tool) = nexbot_protocol::unknown_tools(&front.tools).first() {
        return Err(SkillError::UnknownTool {
            tool: (*tool).to_owned(),
            known: nexbot_protocol::SUBAGENT_TOOLS.join(", "),
        });
    }
    for program in &front.requires {
        let plain = !program.is_empty()
            && program.len() <= 64
            && program
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '+'));
        if !plain {
            return Err(SkillError::BadRequirement(program.clone()));
        }
    }
    let mut domains: Vec<Destination> = Vec::new();
    for entry in &front.domains {
        let destination = Destination::parse(entry)?;
        if !domains.contains(&destination) {
            domains.push(destination);
        }
    }
    if let Some(bad) = front.secrets.iter().find(|s| !nexbot_redact::is_valid_secret_name(s)) {
        return Err(SkillError::BadSecretName(bad.clone()));
    }
    Ok(Skill {
        name,
        description,
        tools: front.tools,
        requires: front.requires,
        domains,
        secrets: front.secrets,
        body: text[body_start..].trim_start_matches(['\r', '\n']).to_owned(),
    })
}

/// A YAML error's message on one line (its snippets span several).
fn one_line(message: &str) -> String {
    let joined: Vec<&str> = message.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let mut line = joined.join(" ");
    if line.len() > 300 {
        let mut cut = 300;
        while !line.is_char_boundary(cut) {
            cut -= 1;
        }
        line.truncate(cut);
        line.push('…');
    }
    line
}

/// One file of a skill's folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillFile {
    /// Relative to the skill's folder, `/`-separated.
    pub path: String,
    pub bytes: u64,
}

/// A skill read from its folder, with every file checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedSkill {
    pub skill: Skill,
    /// Every file of the folder (`SKILL.md` included), sorted by path.
    pub files: Vec<SkillFile>,
    /// `sha256:<hex>` over every file's path and bytes: what `[skills] allow_hashes` names.
    pub hash: String,
    /// What the content screen found (empty: nothing).
    pub findings: Vec<Finding>,
}

impl LoadedSkill {
    /// The other files (not `SKILL.md`), for "this skill also has …".
    pub fn other_files(&self) -> impl Iterator<Item = &SkillFile> {
        self.files.iter().filter(|f| f.path != SKILL_FILE)
    }
}

/// Reads skill `name` from the skills folder `root`: every file is checked (size, symlinks),
/// hashed and screened, and `SKILL.md` parsed.
pub fn load(root: &Path, name: &str) -> Result<LoadedSkill, SkillError> {
    if !is_plain_name(name) {
        return Err(SkillError::BadFolderName(name.to_owned()));
    }
    let io = |path: &Path, e: std::io::Error| SkillError::Io {
        path: path.display().to_string(),
        reason: e.to_string(),
    };
    let root_real = std::fs::canonicalize(root).map_err(|e| io(root, e))?;
    let dir = root.join(name);
    let meta = std::fs::symlink_metadata(&dir).map_err(|e| io(&dir, e))?;
    if meta.file_type().is_symlink() {
        let target = std::fs::canonicalize(&dir).map_err(|e| io(&dir, e))?;
        if !target.starts_with(&root_real) || target == root_real {
            return Err(SkillError::SymlinkEscapes { path: name.to_owned() });
        }
    }
    let mut found = Vec::new();
    walk(&root_real, &dir, "", 0, &mut found)?;
    found.sort_by(|a, b| a.0.cmp(&b.0));
    let skill_text = found
        .iter()
        .find(|(path, _)| path == SKILL_FILE)
        .map(|(_, bytes)| bytes)
        .ok_or(SkillError::NoSkillFile)?;
    let skill_text = String::from_utf8_lossy(skill_text).into_owned();
    let skill = parse(name, &skill_text)?;
    let mut hasher = Sha256::new();
    let mut findings = Vec::new();
    for (path, bytes) in &found {
        hasher.update((path.len() as u64).to_le_bytes());
        hasher.update(path.as_bytes());
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(bytes);
        if let Ok(text) = std::str::from_utf8(bytes) {
            findings.extend(screen(path, text));
        } else if bytes.len() > 64 {
            findings.push(Finding {
                file: path.clone(),
                line: 0,
                text: format!("{} bytes that are not text", bytes.len()),
                rule: screen::Rule::Binary,
            });
        }
    }
    let hash = format!("sha256:{}", hex(&hasher.finalize()));
    let files = found
        .into_iter()
        .map(|(path, bytes)| SkillFile { path, bytes: bytes.len() as u64 })
        .collect();
    Ok(LoadedSkill { skill, files, hash, findings })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Collects `(relative path, bytes)` of every file under `dir`.
fn walk(
    root_real: &Path,
    dir: &Path,
    prefix: &str,
    depth: usize,
    found: &mut Vec<(String, Vec<u8>)>,
) -> Result<(), SkillError> {
    if depth > MAX_DEPTH {
        return Err(SkillError::TooManyFiles);
    }
    let io = |path: &Path, e: std::io::Error| SkillError::Io {
        path: path.display().to_string(),
        reason: e.to_string(),
    };
    let entries = std::fs::read_dir(dir).map_err(|e| io(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| io(dir, e))?;
        let file_name = entry.file_name().to_string_lossy().into_owned();
        let rel = if prefix.is_empty() { file_name } else { format!("{prefix}/{file_name}") };
        let path = entry.path();
        let kind = entry.file_type().map_err(|e| io(&path, e))?;
        let (is_dir, real) = if kind.is_symlink() {
            let target = match std::fs::canonicalize(&path) {
                Ok(target) => target,
                // A dangling link leads nowhere inside the folder either.
                Err(_) => return Err(SkillError::SymlinkEscapes { path: rel }),
            };
            if !target.starts_with(root_real) {
                return Err(SkillError::SymlinkEscapes { path: rel });
            }
            // A link to a folder inside the skills folder is listed, never followed (no loops).
            (target.is_dir(), target)
        } else {
            (kind.is_dir(), path.clone())
        };
        if is_dir {
            if !kind.is_symlink() {
                walk(root_real, &path, &rel, depth + 1, found)?;
            }
            continue;
        }
        if found.len() >= MAX_FILES {
            return Err(SkillError::TooManyFiles);
        }
        let size = std::fs::metadata(&real).map_err(|e| io(&real, e))?.len();
        if size > MAX_FILE_BYTES {
            return Err(SkillError::TooLarge { path: rel, bytes: size });
        }
        let bytes = std::fs::read(&real).map_err(|e| io(&real, e))?;
        if bytes.len() as u64 > MAX_FILE_BYTES {
            return Err(SkillError::TooLarge { path: rel, bytes: bytes.len() as u64 });
        }
        found.push((rel, bytes));
    }
    Ok(())
}

/// Whether a skill is offered to the model, and if not, which kind of reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    /// Well formed, nothing flagged (or its hash allowed), runnable: offered.
    Ok,
    /// Malformed: the reason is the [`SkillError`].
    Invalid,
    /// Well formed but needs a tool or program the subagent does not have.
    Ineligible,
    /// The content screen flagged it and its hash is not allowed.
    Quarantined,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Ok => "ok",
            State::Invalid => "invalid",
            State::Ineligible => "ineligible",
            State::Quarantined => "quarantined",
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the place a skill runs offers, and what the operator allowed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Environment {
    /// The subagent's tools; `None`: [`nexbot_protocol::SUBAGENT_TOOLS`] and the planning tool.
    pub tools: Option<Vec<String>>,
    /// The programs of the subagent image; `None`: not known, so a skill with `requires` is
    /// ineligible (said so) until the image reports them.
    pub programs: Option<Vec<String>>,
    /// Content hashes (`sha256:<hex>`) the operator allowed despite the screen.
    pub allow_hashes: Vec<String>,
}

/// One skill folder as a scan saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The folder's name.
    pub name: String,
    pub state: State,
    /// Why it is not offered (`None` when [`State::Ok`]).
    pub reason: Option<String>,
    /// The skill, when it parsed (offered only when `state` is `Ok`).
    pub loaded: Option<LoadedSkill>,
}

impl Entry {
    /// The content hash, when the folder could be read whole.
    pub fn hash(&self) -> Option<&str> {
        self.loaded.as_ref().map(|l| l.hash.as_str())
    }

    /// The description, when the skill parsed.
    pub fn description(&self) -> Option<&str> {
        self.loaded.as_ref().map(|l| l.skill.description.as_str())
    }

    /// What the screen found (empty when nothing, or not read).
    pub fn findings(&self) -> &[Finding] {
        self.loaded.as_ref().map_or(&[], |l| l.findings.as_slice())
    }
}

/// Judges one skill folder of `root`.
pub fn judge(root: &Path, name: &str, env: &Environment) -> Entry {
    let loaded = match load(root, name) {
        Ok(loaded) => loaded,
        Err(e) => {
            return Entry {
                name: name.to_owned(),
                state: State::Invalid,
                reason: Some(e.to_string()),
                loaded: None,
            }
        }
    };
    let (state, reason) = verdict(&loaded, env);
    Entry { name: name.to_owned(), state, reason, loaded: Some(loaded) }
}

fn verdict(loaded: &LoadedSkill, env: &Environment) -> (State, Option<String>) {
    if !loaded.findings.is_empty() && !env.allow_hashes.iter().any(|h| h == &loaded.hash) {
        let rules: Vec<&str> = {
            let mut rules: Vec<&str> = loaded.findings.iter().map(|f| f.rule.describe()).collect();
            rules.dedup();
            rules
        };
        return (
            State::Quarantined,
            Some(format!(
                "flagged by the content screen ({}); the operator allows exactly this content \
                 with `nexbot-ctl skills allow {} \"{}\"` (or [skills] allow_hashes)",
                rules.join("; "),
                loaded.skill.name,
                loaded.hash
            )),
        );
    }
    let skill = &loaded.skill;
    if let Some(tools) = &env.tools {
        // A skill may name a tool by its alias (`fetch_page`); the subagent reports canonical
        // names.
        let offered = |t: &String| {
            let wanted = nexbot_protocol::canonical_tool(t).unwrap_or(t);
            tools.iter().any(|have| have == wanted)
        };
        if let Some(missing) = skill.tools.iter().find(|t| !offered(t)) {
            return (
                State::Ineligible,
                Some(format!("needs tool {missing:?}, which the subagent does not offer")),
            );
        }
    }
    if !skill.requires.is_empty() {
        match &env.programs {
            None => {
                return (
                    State::Ineligible,
                    Some(format!(
                        "requires {}, and the subagent image has not said which programs it has",
                        skill.requires.join(", ")
                    )),
                )
            }
            Some(programs) => {
                let missing: Vec<&str> = skill
                    .requires
                    .iter()
                    .filter(|p| !programs.contains(p))
                    .map(String::as_str)
                    .collect();
                if !missing.is_empty() {
                    return (
                        State::Ineligible,
                        Some(format!("requires {}, not in the subagent image", missing.join(", "))),
                    );
                }
            }
        }
    }
    (State::Ok, None)
}

/// Every skill folder of `root` (entries starting with `.` and plain files are not skills),
/// sorted by name. An absent folder has no skills; an unreadable one is an error.
pub fn scan_dir(root: &Path, env: &Environment) -> Result<Vec<Entry>, SkillError> {
    let io = |e: std::io::Error| SkillError::Io {
        path: root.display().to_string(),
        reason: e.to_string(),
    };
    let entries = match std::fs::read_dir(root) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(e)),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io)?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        // Symlinked folders count (judged by `load`), plain files do not.
        if std::fs::metadata(entry.path()).map(|m| m.is_dir()).unwrap_or(entry.path().is_symlink())
        {
            names.push(name);
        }
    }
    names.sort();
    Ok(names.iter().map(|name| judge(root, name, env)).collect())
}

/// A path inside skill `name` for the file `rel`, refusing anything that climbs out.
pub fn file_path(root: &Path, name: &str, rel: &str) -> Option<PathBuf> {
    if !is_plain_name(name) {
        return None;
    }
    let rel = Path::new(rel);
    if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        return None;
    }
    Some(root.join(name).join(rel))
}

#[cfg(test)]
mod tests;
