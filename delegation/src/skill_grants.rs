//! Skills say where they go (issue 26 §4): the destinations a `SKILL.md` declares
//! (`domains:`) are allowed, without a question, to the tasks a turn delegates after reading
//! that skill — if the content it read is the content the daemon recorded for the skill.
//!
//! Why these rules:
//! - **Which task.** The main agent's `read_skill` notes the skill and its content hash in
//!   the turn ([`nexbot_agent::skills::SkillsRead`]); each task that turn delegates gets the
//!   declared destinations as "allowed for this task" grants of the egress approvals. So a
//!   skill read in chat A never reaches a task of chat B, nor a later turn that did not read
//!   it again. The subagent's own `read_skill` grants nothing: it runs inside the sandbox,
//!   and what it says it read is the untrusted side speaking (a prompt-injected task could
//!   "read" every skill to open every declared host). The host's side is the main agent's
//!   tool call, which the daemon runs itself.
//! - **Which content.** The grant needs the skill's hash recorded in `skill_hashes`: the
//!   first time the daemon sees a skill usable (state `ok`: well formed, not quarantined)
//!   its hash is recorded ([`record_first_seen`], on every scan — a new install's bundled
//!   skills just work); a later edit changes the hash, and the skill's destinations are
//!   asked about again until the operator accepts the new content with
//!   `nexbot-ctl skills allow NAME` ([`allow`]). A quarantined skill is never recorded and
//!   `read_skill` refuses it, so it grants nothing — until the operator allows exactly its
//!   content (`nexbot-ctl skills allow NAME HASH`, the dashboard, or `[skills]
//!   allow_hashes`): the allowance is kept in the store ([`apply_allowances`] at start),
//!   takes effect at once for the main agent and goes to every task (`execute.skills_allow`).
//!   The trust this puts in the folder: a *new* skill is trusted as first seen, like the
//!   bundled ones (whoever can add a folder can already add instructions the model follows);
//!   an *edit* of a known skill is not.
//! - **Unattended tasks.** A scheduled job's or heartbeat's turn that reads a skill grants its
//!   tasks the same destinations: nobody is asked either way, and the recorded content is
//!   what the operator accepted.
//! - **Only an allow.** The grant is the approvals' per-task grant, which the proxy consults
//!   only in `egress.mode = "ask"`, and only after its deny list and address rules, which
//!   still refuse first. In `allowlist` and `open` the grant is never read.

use nexbot_agent::skills::{SkillRead, Skills};
use nexbot_skill::{Destination, State};
use tokio_util::sync::CancellationToken;

use nexbot_store::Store;

/// Records the content hash of every usable skill the daemon has no hash for, now and after
/// each scan, until `stop`. A skill whose hash is recorded keeps it (an edit is not accepted
/// by being seen).
pub async fn record_first_seen(skills: Skills, store: Store, stop: CancellationToken) {
    let mut changes = skills.subscribe();
    loop {
        let set = skills.current();
        for entry in set.entries().iter().filter(|e| e.state == State::Ok) {
            let Some(hash) = entry.hash() else { continue };
            match store.record_first_skill_hash(&entry.name, hash).await {
                Ok(recorded) if recorded != hash => tracing::info!(
                    skill = %entry.name,
                    %recorded,
                    now = %hash,
                    "skill changed since its content was recorded: its declared domains are \
                     asked about until `nexbot-ctl skills allow {}`",
                    entry.name
                ),
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(skill = %entry.name, error = %e, "cannot record a skill's hash")
                }
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            changed = changes.changed() => if changed.is_err() { return },
        }
    }
}

/// The reads of the turn that grant their destinations: each skill whose content, as read, is
/// the recorded one. A skill with no record yet (read before the first scan's recording
/// finished) is recorded as first seen now, as the scan would have.
pub async fn granting(store: &Store, reads: &[SkillRead]) -> Vec<SkillRead> {
    let mut granted = Vec::new();
    for read in reads.iter().filter(|r| !r.domains.is_empty()) {
        let recorded = match store.record_first_skill_hash(&read.name, &read.hash).await {
            Ok(recorded) => recorded,
            Err(e) => {
                tracing::warn!(skill = %read.name, error = %e, "cannot read a skill's recorded hash; granting nothing");
                continue;
            }
        };
        if recorded != read.hash {
            tracing::info!(
                skill = %read.name,
                %recorded,
                read = %read.hash,
                "the skill read differs from its recorded content: its domains are not granted \
                 (accept it with `nexbot-ctl skills allow {}`)",
                read.name
            );
            continue;
        }
        granted.push(read.clone());
    }
    granted
}

/// Every destination of `reads`, once.
pub fn destinations(reads: &[SkillRead]) -> Vec<Destination> {
    let mut all: Vec<Destination> = Vec::new();
    for destination in reads.iter().flat_map(|r| &r.domains) {
        if !all.contains(destination) {
            all.push(destination.clone());
        }
    }
    all
}

/// The receipt's words for `reads`: `probe (api.example.com:443, …)`.
pub fn receipt_lines(reads: &[SkillRead]) -> Vec<String> {
    reads
        .iter()
        .map(|r| {
            let domains: Vec<String> = r.domains.iter().map(ToString::to_string).collect();
            format!("{} ({})", r.name, domains.join(", "))
        })
        .collect()
}

/// Why `nexbot-ctl skills allow` did not record a hash.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllowError {
    #[error("no skill named {0:?} in the skills folder; `nexbot-ctl skills ls` lists them")]
    NoSuchSkill(String),
    #[error(
        "skill {name:?} is {state}, not usable ({reason}); fix it first (a quarantined one is \
         allowed by its hash: `nexbot-ctl skills allow {name} HASH` with the hash `skills ls` \
         shows)"
    )]
    NotUsable { name: String, state: State, reason: String },
    #[error(
        "skill {name:?} now has content {now}, not {given}: it changed since you looked; read it \
         again (`nexbot-ctl skills ls`) and allow the hash shown"
    )]
    HashDiffers { name: String, now: String, given: String },
    #[error("cannot record the skill's hash: {0}")]
    Store(String),
}

/// Applies the contents the operator allowed despite the content screen (kept in the store)
/// to the live skill set.
pub async fn apply_allowances(skills: &Skills, store: &Store) {
    match store.skill_allowances().await {
        Ok(hashes) if hashes.is_empty() => {}
        Ok(hashes) => {
            let skills = skills.clone();
            let _ = tokio::task::spawn_blocking(move || skills.allow_contents(&hashes)).await;
        }
        Err(e) => tracing::warn!(error = %e, "cannot read the skills allowed by the operator"),
    }
}

/// Accepts skill `name`'s current content (`hash`, when given, must be it: what the operator
/// reviewed), so its declared destinations are granted again. A quarantined skill needs
/// `hash` (the operator read exactly that content): it is allowed despite the screen from
/// now on, kept in the store, and then accepted. Returns the hash recorded.
pub async fn allow(
    skills: &Skills,
    store: &Store,
    name: &str,
    hash: Option<&str>,
    by: &str,
) -> Result<String, AllowError> {
    let mut set = skills.current();
    let mut entry = set.get(name).ok_or_else(|| AllowError::NoSuchSkill(name.to_owned()))?;
    if let (State::Quarantined, Some(now), Some(given)) = (entry.state, entry.hash(), hash) {
        if given != now {
            return Err(AllowError::HashDiffers {
                name: name.to_owned(),
                now: now.to_owned(),
                given: given.into(),
            });
        }
        store
            .allow_skill_content(name, now, by)
            .await
            .map_err(|e| AllowError::Store(e.to_string()))?;
        tracing::info!(skill = %name, hash = %now, %by, "skill allowed despite the content screen");
        let (skills, hashes) = (skills.clone(), vec![now.to_owned()]);
        set = tokio::task::spawn_blocking(move || skills.allow_contents(&hashes))
            .await
            .map_err(|e| AllowError::Store(e.to_string()))?;
        entry = set.get(name).ok_or_else(|| AllowError::NoSuchSkill(name.to_owned()))?;
    }
    let now = match (entry.state, entry.hash()) {
        (State::Ok, Some(now)) => now.to_owned(),
        (state, _) => {
            return Err(AllowError::NotUsable {
                name: name.to_owned(),
                state,
                reason: entry.reason.clone().unwrap_or_else(|| "-".into()),
            })
        }
    };
    if let Some(given) = hash {
        if given != now {
            return Err(AllowError::HashDiffers {
                name: name.to_owned(),
                now,
                given: given.into(),
            });
        }
    }
    store.set_skill_hash(name, &now, by).await.map_err(|e| AllowError::Store(e.to_string()))?;
    tracing::info!(skill = %name, hash = %now, %by, "skill content accepted: its declared domains are granted");
    Ok(now)
}
