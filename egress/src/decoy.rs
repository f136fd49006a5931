//! Decoy secrets at the proxy: the trip wire for a prompt injection that starts working.
//!
//! A decoy is a secret that looks real (the right shape for the provider it imitates), is
//! listed to the model like a real one, and is bound nowhere: no legitimate task ever needs
//! one. A task given one holds only its placeholder, exactly as for a proxy-mode secret
//! ([`crate::Credential::decoy`]); the proxy never fills it in, whatever the destination. A
//! request that carries a decoy's placeholder is therefore the act of sending "all the API
//! keys" somewhere: it is refused with the very answer a secret not bound to that host gets
//! (nothing tells the task it was a decoy), written to the audit with `"decoy": true`, and
//! the [`DecoyAlarm`] the host set is rung — it tells the owner, stops the task and retires
//! its container.

use super::approval::Late;
use super::credentials::TaskSecrets;
use super::inject;

/// What the proxy saw: a task's request carrying a decoy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecoyTrip {
    /// The task in whose name the request came (attributed by its egress credential).
    pub task_id: Option<String>,
    /// The container it came from.
    pub container: Option<String>,
    /// The decoy's name.
    pub secret: String,
    /// The request that carried it: method and URL (its placeholder shown, no value).
    pub request: String,
}

/// Told when a decoy trips (set by the host with [`crate::Egress::set_decoy_alarm`]). Called
/// on the proxy's connection task: it must not block (spawn what takes time).
pub trait DecoyAlarm: Send + Sync {
    fn tripped(&self, trip: DecoyTrip);
}

/// Rings `alarm` (set by the host); without one the trip is only logged (and audited by the
/// caller).
pub(crate) fn ring(alarm: &Late<dyn DecoyAlarm>, trip: DecoyTrip) {
    tracing::error!(
        task = trip.task_id.as_deref().unwrap_or("-"),
        container = trip.container.as_deref().unwrap_or("-"),
        secret = %trip.secret,
        request = %trip.request,
        "a task tried to send a decoy secret: a prompt injection is likely at work"
    );
    if let Some(alarm) = alarm.get() {
        alarm.tripped(trip);
    }
}

/// The request target and the header values: where a decoy is looked for before the body
/// is read.
pub(crate) fn head(parts: &http::request::Parts) -> impl Iterator<Item = &[u8]> {
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    std::iter::once(target.as_bytes()).chain(parts.headers.values().map(|v| v.as_bytes()))
}

/// The first decoy of `secrets` whose placeholder is in one of `texts` (the request's
/// [`head`], then its body) — wherever it stands, before any other placeholder is looked at
/// (a refused real secret earlier in the request must not hide it).
pub(crate) fn carried<'a, 'b>(
    secrets: &'a TaskSecrets,
    texts: impl IntoIterator<Item = &'b [u8]>,
) -> Option<&'a str> {
    if !secrets.has_decoy() {
        return None;
    }
    texts.into_iter().flat_map(inject::find).find_map(|placeholder| {
        secrets.get(&placeholder.name).filter(|c| c.decoy).map(|c| c.name.as_str())
    })
}
