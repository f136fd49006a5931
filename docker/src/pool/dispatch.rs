//! The dispatch policy: which container a task gets. Rooms hold at most their limit; a task
//! takes an idle container of its room, or a blank one (making way for it by retiring the
//! longest-idle container of another room when the pool is full); otherwise it waits in a
//! bounded FIFO queue, and beyond that the pool is busy. A container released goes to the
//! first waiter it fits, or back to idle; shutdown empties the queue and drains.
//!
//! Why apart from the public face ([`super::Pool`]): this is the state under the dispatch
//! lock and the rules over it, read in one place.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::error::PoolError;
use crate::member::{Member, Retirement};
use crate::restart::RestartReason;
use crate::room::Room;
use crate::slot::{Slot, SlotState};

use super::lease::Lease;
use super::Inner;

#[derive(Debug, Default)]
pub(super) struct Dispatch {
    pub(super) queue: VecDeque<Waiter>,
    pub(super) shutting_down: bool,
}

/// A task waiting for a container of its room (or a blank its room may take).
#[derive(Debug)]
pub(super) struct Waiter {
    pub(super) room: Room,
    pub(super) tx: oneshot::Sender<Lease>,
}

/// Who holds the pool's containers, counted under the dispatch lock.
#[derive(Debug, Default)]
struct Census {
    /// Containers up per room.
    held: HashMap<Room, usize>,
    /// Blank containers up and idle.
    idle_blanks: usize,
    /// Slots whose next container is on its way (starting, being replaced, backing off):
    /// each will be a blank.
    coming: usize,
}

impl Inner {
    /// The most containers `room` may hold: the pool's room limit, or the whole pool for
    /// the default room (callers that name no room share it, as they shared the pool before
    /// rooms existed).
    fn room_limit(&self, room: &Room) -> usize {
        if *room == Room::default() {
            self.slots.len()
        } else {
            self.engine.config.room_limit()
        }
    }

    /// Who holds what, every slot but `skip` (whose lock the caller holds). Call it under the
    /// dispatch lock: that lock is what makes it safe to take the slots' locks one by one
    /// while one is held.
    fn census(&self, skip: Option<usize>) -> Census {
        let mut census = Census::default();
        for slot in self.slots.iter().filter(|slot| Some(slot.index) != skip) {
            let s = slot.lock();
            match s.member.as_ref().filter(|m| !m.is_retired() && !m.link.is_closed()) {
                Some(member) => match member.room() {
                    Some(room) => *census.held.entry(room).or_default() += 1,
                    None if s.state == SlotState::Idle => census.idle_blanks += 1,
                    None => {}
                },
                None if s.state != SlotState::Draining => census.coming += 1,
                None => {}
            }
        }
        census
    }

    /// Takes an idle container that `fits`, marking its slot busy. Under the dispatch lock.
    fn take_idle(self: &Arc<Self>, fits: impl Fn(&Member) -> bool) -> Option<Lease> {
        for slot in &self.slots {
            let mut s = slot.lock();
            if s.state != SlotState::Idle {
                continue;
            }
            let Some(member) = s.member.clone() else { continue };
            if member.is_retired() || member.link.is_closed() || !fits(&member) {
                continue;
            }
            s.state = SlotState::Busy;
            return Some(Lease::new(self.clone(), slot.index, member));
        }
        None
    }

    /// Removes the idle container of a room that has waited longest (never one of `keep`),
    /// so a blank takes its place. Under the dispatch lock.
    fn yield_longest_idle(&self, keep: Option<&Room>) {
        let mut oldest: Option<(Instant, &Slot, Arc<Member>)> = None;
        for slot in &self.slots {
            let s = slot.lock();
            if s.state != SlotState::Idle {
                continue;
            }
            let Some(member) = s.member.clone() else { continue };
            let Some(room) = member.room() else { continue };
            if keep == Some(&room) || member.is_retired() || member.link.is_closed() {
                continue;
            }
            let since = member.idle_since();
            if oldest.as_ref().is_none_or(|(at, _, _)| since < *at) {
                oldest = Some((since, slot, member));
            }
        }
        let Some((_, slot, member)) = oldest else { return };
        let room = member.room().map(|r| r.to_string()).unwrap_or_default();
        self.give_way(
            slot.lock(),
            &member,
            RestartReason::RoomYielded,
            format!("room {room}'s idle container gave way to a blank for another room"),
        );
    }

    /// Retires `member`, idle in the slot `s` guards, so that a blank takes its place: the
    /// slot is marked restarting, the retirement counted by its reason, and the member's link
    /// failed (its supervisor hears it at once and brings up a blank). Every way a room's
    /// container makes way goes through here.
    fn give_way(
        &self,
        mut s: std::sync::MutexGuard<'_, crate::slot::SlotInner>,
        member: &Member,
        reason: RestartReason,
        why: String,
    ) {
        s.state = SlotState::Restarting;
        drop(s);
        match reason {
            RestartReason::RoomIdle => self.rooms.record_idle_retired(),
            _ => self.rooms.record_yielded(),
        }
        member.retire(Retirement::new(reason, why));
    }

    /// After a blank was taken: when no blank is left or coming, the longest-idle container of
    /// another room makes way, so the next new room's first task still finds a warm one.
    /// `census` is the one taken before that blank was.
    fn refill_blanks(&self, census: &Census, taken_by: &Room) {
        if census.idle_blanks.saturating_sub(1) + census.coming == 0 {
            self.yield_longest_idle(Some(taken_by));
        }
    }

    /// Retires `member` of slot `index` if it has been idle in its room longer than the
    /// pool's `room_idle_secs`; `true` when it did. Its supervisor then replaces it with a
    /// blank.
    pub(crate) fn retire_if_idle_too_long(&self, index: usize, member: &Arc<Member>) -> bool {
        let _dispatch = self.dispatch();
        let slot = &self.slots[index];
        let s = slot.lock();
        let current = s.member.as_ref().is_some_and(|m| Arc::ptr_eq(m, member));
        let idle_for = member.idle_since().elapsed();
        if !current
            || s.state != SlotState::Idle
            || member.is_blank()
            || member.is_retired()
            || idle_for < self.engine.config.room_idle()
        {
            return false;
        }
        let why = format!(
            "idle in room {} for {} s",
            member.room().unwrap_or_default(),
            idle_for.as_secs()
        );
        self.give_way(s, member, RestartReason::RoomIdle, why);
        true
    }

    /// Whether a task waits in the queue for a container.
    pub(super) fn has_waiters(&self) -> bool {
        self.dispatch().queue.iter().any(|w| !w.tx.is_closed())
    }

    /// Takes an idle container of `room`, or a blank (up to the room's limit), or a place in
    /// the queue, or fails with "busy".
    pub(super) async fn acquire(
        self: &Arc<Self>,
        room: &Room,
        task_id: &str,
        cancel: &CancellationToken,
    ) -> Result<Lease, PoolError> {
        self.pause.dispatched();
        let mut rx = {
            let mut dispatch = self.dispatch();
            if dispatch.shutting_down {
                return Err(PoolError::ShuttingDown);
            }
            if let Some(lease) = self.take_idle(|m| m.in_room(room)) {
                return Ok(lease);
            }
            let census = self.census(None);
            if census.held.get(room).copied().unwrap_or(0) < self.room_limit(room) {
                if let Some(lease) = self.take_idle(|m| m.is_blank() && m.bind(room)) {
                    self.rooms.record_blank_taken();
                    self.refill_blanks(&census, room);
                    return Ok(lease);
                }
                // No blank ready: this task waits for one. One idle container of another
                // room makes way unless enough blanks are on their way for every such waiter.
                self.rooms.record_blank_empty_wait();
                let needing = 1 + dispatch.queue.iter().filter(|w| !w.tx.is_closed()).count();
                if census.coming < needing {
                    self.yield_longest_idle(Some(room));
                }
            }
            dispatch.queue.retain(|w| !w.tx.is_closed());
            let capacity = self.engine.config.queue_capacity;
            if dispatch.queue.len() >= capacity {
                return Err(PoolError::Busy { size: self.slots.len(), queue: capacity });
            }
            let (tx, rx) = oneshot::channel();
            dispatch.queue.push_back(Waiter { room: room.clone(), tx });
            self.pause.demanded();
            rx
        };
        let queue_timeout = Duration::from_secs(self.engine.config.queue_timeout_secs);
        let gave_up = tokio::select! {
            lease = &mut rx => return lease.map_err(|_| PoolError::ShuttingDown),
            _ = cancel.cancelled() => PoolError::Cancelled { task_id: task_id.to_owned() },
            _ = tokio::time::sleep(queue_timeout) => PoolError::QueueTimeout {
                task_id: task_id.to_owned(),
                waited_secs: queue_timeout.as_secs(),
            },
        };
        // A lease handed over while we were giving up goes back (its Drop releases it).
        rx.close();
        drop(rx.try_recv());
        Err(gave_up)
    }

    /// Makes `member` available again: to the first queued task of its room (a blank: to the
    /// first queued task whose room may take another container), or as idle — or, when it
    /// belongs to a room nobody waits for while other rooms wait for blanks that are not
    /// coming, it makes way for a blank.
    pub(super) fn release(self: &Arc<Self>, index: usize, member: &Arc<Member>) {
        let mut dispatch = self.dispatch();
        let slot = &self.slots[index];
        let census = self.census(Some(index));
        let mut s = slot.lock();
        let current = s.member.as_ref().is_some_and(|m| Arc::ptr_eq(m, member));
        if !current || member.is_retired() || member.link.is_closed() {
            return;
        }
        if dispatch.shutting_down {
            s.state = SlotState::Draining;
            return;
        }
        let room = member.room();
        let may_take_blank = |waiter: &Waiter| {
            census.held.get(&waiter.room).copied().unwrap_or(0) < self.room_limit(&waiter.room)
        };
        loop {
            dispatch.queue.retain(|w| !w.tx.is_closed());
            let next = match &room {
                Some(room) => dispatch.queue.iter().position(|w| w.room == *room),
                None => dispatch.queue.iter().position(&may_take_blank),
            };
            let Some(position) = next else { break };
            let Some(waiter) = dispatch.queue.remove(position) else { break };
            if room.is_none() {
                if !member.bind(&waiter.room) {
                    dispatch.queue.insert(position, waiter);
                    break;
                }
                self.rooms.record_blank_taken();
            }
            s.state = SlotState::Busy;
            match waiter.tx.send(Lease::new(self.clone(), index, member.clone())) {
                Ok(()) => return,
                Err(mut unwanted) => {
                    unwanted.armed = false;
                    if room.is_none() {
                        // Bound for a task that went away: it served nobody, but a bound
                        // container stays in its room; as idle it gives way first.
                        break;
                    }
                }
            }
        }
        if let Some(room) = &room {
            let waiting_for_blanks = dispatch.queue.iter().filter(|w| may_take_blank(w)).count();
            if waiting_for_blanks > census.idle_blanks + census.coming {
                let why = format!("room {room}'s container gave way to a blank for a waiting room");
                self.give_way(s, member, RestartReason::RoomYielded, why);
                return;
            }
        }
        s.state = SlotState::Idle;
        member.mark_idle();
    }

    /// Called when a lease ends: recycle the container, leave it to its supervisor (it
    /// died), or put it back in service.
    pub(super) fn finish(
        self: &Arc<Self>,
        index: usize,
        member: &Arc<Member>,
        recycle: Option<Retirement>,
    ) {
        member.set_current_task(None);
        let slot = &self.slots[index];
        if let Some(retirement) = recycle {
            member.retire(retirement);
            slot.wake.notify_one();
        } else if member.is_retired() || member.link.is_closed() {
            slot.wake.notify_one();
        } else {
            self.release(index, member);
        }
        self.drained.notify_waiters();
    }

    pub(super) fn begin_shutdown(&self) {
        let queued = {
            let mut dispatch = self.dispatch();
            dispatch.shutting_down = true;
            std::mem::take(&mut dispatch.queue)
        };
        drop(queued);
        for slot in &self.slots {
            let mut s = slot.lock();
            if s.state == SlotState::Idle {
                s.state = SlotState::Draining;
            }
        }
    }

    /// Waits until no container serves a task. Every task ends by its hard limit; the wait
    /// is bounded by the latest of those plus a margin.
    pub(super) async fn drain(&self) {
        loop {
            let latest = self
                .slots
                .iter()
                .filter_map(|s| s.member().and_then(|m| m.current_task()))
                .map(|t| t.hard_deadline)
                .max();
            let Some(latest) = latest else { return };
            if Instant::now() > latest + Duration::from_secs(5) {
                tracing::warn!("tasks still running past their hard limit at shutdown");
                return;
            }
            tokio::select! {
                _ = self.drained.notified() => {}
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
        }
    }
}
