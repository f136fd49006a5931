//! The skills the main agent sees, kept live.
//!
//! [`Skills`] holds the whole skill set behind one `RwLock<Arc<SkillSet>>`: a scan of the
//! folder (`nexbot_skill::scan_dir`, the parser and screen the subagents use too) builds a new
//! set, which replaces the old one in a single swap, so a turn that took the set sees either
//! the old skills or the new ones, never half an edit. [`Skills::watch`] is the `Stage::Service`
//! part that keeps it current: `notify` events on the folder (recursive), debounced — a quiet
//! `skills.debounce_ms` after the last event, at most [`MAX_DEBOUNCE`] while events keep
//! coming — then one rescan. Editors that write a temp file and rename, and a whole folder
//! copied in, end in a quiet folder and one scan. A folder that does not exist yet is looked
//! for every [`ABSENT_POLL`]; every [`RESCAN`] the folder is read again whatever the events
//! said (inotify can overflow).
//!
//! Eligibility is judged against what the subagent image said in its `pong`
//! ([`Skills::set_capabilities`], called once the pool is warm).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use nexbot_skill::{Entry, Environment, State};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Longest a reload waits while events keep coming.
pub const MAX_DEBOUNCE: Duration = Duration::from_secs(2);
/// How often an absent skills folder is looked for.
pub const ABSENT_POLL: Duration = Duration::from_secs(2);
/// Full rescan whatever the events said.
pub const RESCAN: Duration = Duration::from_secs(60);
/// At most this many skills are listed in the system prompt, within [`PROMPT_MAX_CHARS`].
pub const PROMPT_MAX_SKILLS: usize = 64;
pub const PROMPT_MAX_CHARS: usize = 8_000;

/// A skill as `read_skill` returned it in a turn: its name, the content hash and the
/// destinations that content declares. Kept per turn (not per chat or session), so a grant
/// follows the model having read the skill's instructions in the turn that delegates, and a
/// skill read in one chat never reaches another chat's tasks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillRead {
    pub name: String,
    pub hash: String,
    pub domains: Vec<nexbot_skill::Destination>,
}

/// The skills read so far in one turn, shared by its tool calls.
#[derive(Debug, Clone, Default)]
pub struct SkillsRead(Arc<Mutex<Vec<SkillRead>>>);

impl SkillsRead {
    /// Notes that `read_skill` returned this content (a second read of the same content is
    /// one entry).
    pub fn add(&self, read: SkillRead) {
        let mut reads = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if !reads.contains(&read) {
            reads.push(read);
        }
    }

    /// What was read so far.
    pub fn list(&self) -> Vec<SkillRead> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// One scan of the skills folder.
#[derive(Debug, Default)]
pub struct SkillSet {
    entries: Vec<Entry>,
    /// Counts the scans since the start (0: none yet).
    generation: u64,
    /// Why the folder could not be read at all (then `entries` is empty).
    error: Option<String>,
}

impl SkillSet {
    /// Every skill folder, sorted by name, whatever its state.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The skills offered to the model.
    pub fn offered(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter().filter(|e| e.state == State::Ok && e.loaded.is_some())
    }

    pub fn get(&self, name: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.name == name)
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// The system prompt's list of skills (name and description), `None` when none is offered.
    pub fn prompt_section(&self) -> Option<String> {
        let mut lines = String::new();
        for entry in self.offered().take(PROMPT_MAX_SKILLS) {
            let line = format!("- {}: {}\n", entry.name, entry.description().unwrap_or_default());
            if lines.len() + line.len() > PROMPT_MAX_CHARS {
                break;
            }
            lines.push_str(&line);
        }
        if lines.is_empty() {
            return None;
        }
        Some(format!(
            "## Skills\n\nSkills are instructions for particular kinds of task. Before doing a task \
             a skill covers, read it with `read_skill` (it returns the instructions and lists the \
             skill's other files). When you delegate such a task, read the skill first in the \
             same turn (the destinations it declares are then open to the task without asking \
             the user) and name the skill in the task: a sub-agent has `read_skill` too, with \
             the same names.\n\n{lines}"
        ))
    }
}

#[derive(Debug)]
struct Inner {
    dir: Option<PathBuf>,
    env: Mutex<Environment>,
    current: RwLock<Arc<SkillSet>>,
    /// The generation of the set now current, for whoever follows the changes.
    changes: tokio::sync::watch::Sender<u64>,
    debounce: Duration,
}

/// The live skill set (cheap to clone).
#[derive(Debug, Clone)]
pub struct Skills {
    inner: Arc<Inner>,
}

impl Skills {
    /// Reads the folder once. `dir` `None`: no skills folder configured (an empty set).
    pub fn load(dir: Option<PathBuf>, allow_hashes: Vec<String>, debounce: Duration) -> Self {
        let skills = Self {
            inner: Arc::new(Inner {
                dir,
                env: Mutex::new(Environment { allow_hashes, ..Environment::default() }),
                current: RwLock::new(Arc::new(SkillSet::default())),
                changes: tokio::sync::watch::Sender::new(0),
                debounce,
            }),
        };
        skills.reload();
        skills
    }

    pub fn dir(&self) -> Option<&Path> {
        self.inner.dir.as_deref()
    }

    /// The set as it is now; hold it for a whole turn.
    pub fn current(&self) -> Arc<SkillSet> {
        self.inner.current.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// What the subagent said it has (its `pong`); skills are judged again against it.
    pub fn set_capabilities(&self, tools: Option<Vec<String>>, programs: Option<Vec<String>>) {
        {
            let mut env = self.inner.env.lock().unwrap_or_else(|e| e.into_inner());
            // Every task has the planning tool, whatever the pong lists.
            env.tools = tools.map(|mut tools| {
                tools.push(nexbot_protocol::PLANNING_TOOL.to_owned());
                tools
            });
            env.programs = programs;
        }
        self.reload();
    }

    /// Allows the contents `hashes` despite the content screen from now on (the operator's
    /// live allowances), and reads the folder again, once.
    pub fn allow_contents(&self, hashes: &[String]) -> Arc<SkillSet> {
        {
            let mut env = self.inner.env.lock().unwrap_or_else(|e| e.into_inner());
            for hash in hashes {
                if !env.allow_hashes.contains(hash) {
                    env.allow_hashes.push(hash.clone());
                }
            }
        }
        self.reload()
    }

    /// Reads the folder again and swaps the whole set in (blocking: call it off the runtime's
    /// worker threads for large folders). Logs what changed.
    pub fn reload(&self) -> Arc<SkillSet> {
        let env = self.inner.env.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let previous = self.current();
        let (entries, error) = match &self.inner.dir {
            None => (Vec::new(), None),
            Some(dir) => match nexbot_skill::scan_dir(dir, &env) {
                Ok(entries) => (entries, None),
                Err(e) => (Vec::new(), Some(e.to_string())),
            },
        };
        let set = Arc::new(SkillSet { entries, generation: previous.generation + 1, error });
        log_changes(&previous, &set);
        *self.inner.current.write().unwrap_or_else(|e| e.into_inner()) = set.clone();
        self.inner.changes.send_replace(set.generation);
        set
    }

    /// Wakes on every new set (a scan swapped it in); the host records the content hashes of
    /// the skills it sees for the first time.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.changes.subscribe()
    }

    /// Keeps the set current until `stop` (see the module documentation).
    pub async fn watch(self, stop: CancellationToken) {
        let Some(dir) = self.inner.dir.clone() else { return };
        loop {
            if !dir.is_dir() {
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(ABSENT_POLL) => {}
                }
                if dir.is_dir() {
                    self.reload_off_thread().await;
                }
                continue;
            }
            let (tx, mut rx) = mpsc::unbounded_channel::<()>();
            let watcher =
                notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                    if event.map_or(true, |e| is_change(&e.kind)) {
                        let _ = tx.send(());
                    }
                });
            let mut watcher = match watcher {
                Ok(watcher) => watcher,
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "cannot watch the skills folder; reading it every {} s", RESCAN.as_secs());
                    tokio::select! {
                        () = stop.cancelled() => return,
                        () = tokio::time::sleep(RESCAN) => {}
                    }
                    self.reload_off_thread().await;
                    continue;
                }
            };
            use notify::Watcher as _;
            if let Err(e) = watcher.watch(&dir, notify::RecursiveMode::Recursive) {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot watch the skills folder");
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(ABSENT_POLL) => {}
                }
                continue;
            }
            // Whatever changed between the last scan and the watch taking hold.
            self.reload_off_thread().await;
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    got = rx.recv() => if got.is_none() { break },
                    () = tokio::time::sleep(RESCAN) => {}
                }
                let deadline = Instant::now() + MAX_DEBOUNCE;
                loop {
                    let wait =
                        self.inner.debounce.min(deadline.saturating_duration_since(Instant::now()));
                    match tokio::time::timeout(wait, rx.recv()).await {
                        Ok(Some(())) if Instant::now() < deadline => continue,
                        _ => break,
                    }
                }
                self.reload_off_thread().await;
                if !dir.is_dir() {
                    // Removed (or replaced): watch again once it is back.
                    break;
                }
            }
        }
    }

    async fn reload_off_thread(&self) {
        let skills = self.clone();
        if let Err(e) = tokio::task::spawn_blocking(move || skills.reload()).await {
            tracing::error!(error = %e, "reading the skills folder failed");
        }
    }
}

/// The skills in one line, for `/status`: how many are offered, and the others by state.
pub fn status_line(set: &SkillSet) -> String {
    if let Some(error) = set.error() {
        return format!("cannot read the folder: {error}");
    }
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for entry in set.entries() {
        *counts.entry(entry.state.as_str()).or_default() += 1;
    }
    let offered = counts.remove("ok").unwrap_or(0);
    let mut line = format!("{offered} offered");
    for (state, n) in counts {
        line.push_str(&format!(", {n} {state}"));
    }
    if set.entries().iter().any(|e| e.state != State::Ok) {
        line.push_str(" (nexbot-ctl skills ls says why)");
    }
    line
}

/// Events that may change what a scan sees (not the scan's own reads).
fn is_change(kind: &notify::EventKind) -> bool {
    use notify::event::{AccessKind, AccessMode, MetadataKind, ModifyKind};
    use notify::EventKind;
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        EventKind::Modify(ModifyKind::Metadata(MetadataKind::AccessTime)) => false,
        _ => true,
    }
}

fn log_changes(previous: &SkillSet, now: &SkillSet) {
    if let Some(error) = now.error() {
        if previous.error() != Some(error) {
            tracing::warn!(error, "cannot read the skills folder");
        }
    }
    let before: BTreeMap<&str, &Entry> =
        previous.entries.iter().map(|e| (e.name.as_str(), e)).collect();
    for entry in &now.entries {
        let old = before.get(entry.name.as_str());
        if old.is_some_and(|old| {
            old.state == entry.state && old.hash() == entry.hash() && old.reason == entry.reason
        }) {
            continue;
        }
        let what = if old.is_some() { "skill changed" } else { "skill found" };
        match entry.state {
            State::Ok => {
                tracing::info!(skill = %entry.name, hash = entry.hash().unwrap_or("-"), "{what}")
            }
            state => tracing::warn!(
                skill = %entry.name,
                state = state.as_str(),
                reason = entry.reason.as_deref().unwrap_or("-"),
                findings = entry.findings().len(),
                "{what}; not offered"
            ),
        }
    }
    for name in before.keys() {
        if now.get(name).is_none() {
            tracing::info!(skill = %name, "skill removed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("nxh-skills-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn write(dir: &Path, name: &str, description: &str) {
        std::fs::create_dir_all(dir.join(name)).unwrap();
        std::fs::write(
            dir.join(name).join("SKILL.md"),
            format!("---\nname: {name}\ndescription: \"{description}\"\n---\nDo it well.\n"),
        )
        .unwrap();
    }

    #[test]
    fn the_prompt_lists_only_offered_skills() {
        let dir = temp_dir();
        write(&dir, "alpha", "First skill");
        std::fs::create_dir_all(dir.join("broken")).unwrap();
        std::fs::write(dir.join("broken/SKILL.md"), "no front matter").unwrap();
        std::fs::create_dir_all(dir.join("needs")).unwrap();
        std::fs::write(
            dir.join("needs/SKILL.md"),
            "---\nname: needs\ndescription: d\nrequires: [jq]\n---\nx",
        )
        .unwrap();
        let skills = Skills::load(Some(dir.clone()), Vec::new(), Duration::from_millis(50));
        let set = skills.current();
        assert_eq!(set.entries().len(), 3);
        let prompt = set.prompt_section().unwrap();
        assert!(prompt.contains("- alpha: First skill\n"), "{prompt}");
        assert!(!prompt.contains("broken") && !prompt.contains("needs"), "{prompt}");
        assert_eq!(set.get("needs").unwrap().state, State::Ineligible);
        // The image says it has jq: the skill is offered.
        skills.set_capabilities(None, Some(vec!["jq".into()]));
        assert!(skills.current().prompt_section().unwrap().contains("- needs: d"));
        assert!(skills.current().generation() > set.generation());
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(skills.reload().entries().len(), 0, "a removed folder has no skills");
        assert_eq!(
            status_line(&set),
            "1 offered, 1 ineligible, 1 invalid (nexbot-ctl skills ls says why)"
        );
        let none = Skills::load(None, Vec::new(), Duration::from_millis(50));
        assert_eq!(status_line(&none.current()), "0 offered");
        assert!(none.current().prompt_section().is_none());
    }

    /// Whether `check` holds within a generous deadline.
    async fn wait_for(skills: &Skills, check: impl Fn(&SkillSet) -> bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if check(&skills.current()) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    #[tokio::test]
    async fn the_watcher_picks_up_a_renamed_file_and_a_copied_folder() {
        let dir = temp_dir();
        let skills = Skills::load(Some(dir.clone()), Vec::new(), Duration::from_millis(50));
        let stop = CancellationToken::new();
        let task = tokio::spawn(skills.clone().watch(stop.clone()));
        // A folder built elsewhere and moved in whole.
        let staging = temp_dir();
        write(&staging, "copied", "Copied in");
        tokio::time::sleep(Duration::from_millis(100)).await;
        std::fs::rename(staging.join("copied"), dir.join("copied")).unwrap();
        let seen = wait_for(&skills, |s| s.get("copied").is_some()).await;
        assert!(seen, "a folder moved in is picked up");
        // An editor's temp file renamed over SKILL.md.
        let tmp = dir.join("copied/.SKILL.md.swp");
        std::fs::write(&tmp, "---\nname: copied\ndescription: \"Edited\"\n---\nNew.\n").unwrap();
        std::fs::rename(&tmp, dir.join("copied/SKILL.md")).unwrap();
        let edited =
            wait_for(&skills, |s| s.get("copied").and_then(Entry::description) == Some("Edited"))
                .await;
        assert!(edited, "an edit by rename is picked up");
        std::fs::remove_dir_all(dir.join("copied")).unwrap();
        let gone = wait_for(&skills, |s| s.entries().is_empty()).await;
        assert!(gone, "a removed skill goes");
        stop.cancel();
        task.await.unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let _ = std::fs::remove_dir_all(&staging);
    }
}
