//! The runs waiting for the scheduler's workers, shared fairly between chats.
//!
//! Why not one FIFO: a chat runs one turn at a time, so with a FIFO one chat's fifty due jobs
//! would hold every worker waiting on that chat while another chat's run, and the heartbeat,
//! sat behind them. Here each chat has a lane (the heartbeat checks one of their own), a
//! worker takes from the lanes in turn and never from a chat that is running a job already,
//! and when the queue is full a new run takes the place of the newest run of the lane with
//! the most waiting (when that lane has more than the newcomer's would), so the full queue
//! drops the greedy chat's runs, not everyone else's.

use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;

use nexbot_core::ChatRef;
use tokio::sync::Notify;

use super::jobs::Job;

/// One run handed to the workers.
#[derive(Debug)]
pub(crate) struct Work {
    pub job: Job,
    pub run_id: i64,
}

/// Whose turn a run waits in: its chat's lane, or, for a heartbeat check, the heartbeat's.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct LaneKey {
    chat: ChatRef,
    heartbeat: bool,
}

impl LaneKey {
    pub fn of(job: &Job) -> Self {
        Self { chat: job.chat.clone(), heartbeat: job.heartbeat }
    }
}

#[derive(Debug)]
struct Lane {
    key: LaneKey,
    waiting: VecDeque<Work>,
}

#[derive(Debug, Default)]
struct State {
    /// In turn order: the front lane is served first.
    lanes: VecDeque<Lane>,
    /// Chats with a run in a worker now.
    running: HashSet<ChatRef>,
    closed: bool,
}

#[derive(Debug, Default)]
pub(crate) struct FairQueue {
    state: Mutex<State>,
    ready: Notify,
}

impl FairQueue {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs waiting (not running).
    #[cfg(test)]
    pub fn waiting(&self) -> usize {
        self.state().lanes.iter().map(|l| l.waiting.len()).sum()
    }

    /// Queues `work` at the back of its lane.
    pub fn push(&self, work: Work) {
        let key = LaneKey::of(&work.job);
        {
            let mut state = self.state();
            match state.lanes.iter_mut().find(|l| l.key == key) {
                Some(lane) => lane.waiting.push_back(work),
                None => state.lanes.push_back(Lane { key, waiting: VecDeque::from([work]) }),
            }
        }
        self.ready.notify_waiters();
        self.ready.notify_one();
    }

    /// The queue is full and a run of `key` is due: takes out the newest waiting run of the
    /// lane with the most waiting, if that lane has at least two more than `key`'s has, so
    /// that the new run can take its place. `None`: the new run is the one to drop.
    pub fn make_room_for(&self, key: &LaneKey) -> Option<Work> {
        let mut state = self.state();
        let own = state.lanes.iter().find(|l| l.key == *key).map_or(0, |l| l.waiting.len());
        let greedy =
            state.lanes.iter_mut().filter(|l| l.key != *key).max_by_key(|l| l.waiting.len())?;
        if greedy.waiting.len() < own + 2 {
            return None;
        }
        greedy.waiting.pop_back()
    }

    /// The next run to start: from the first lane in turn whose chat runs nothing now (that
    /// lane then goes to the back). Waits for one; `None` once closed and empty. After
    /// closing, runs come out whatever runs (they are only recorded as cancelled).
    pub async fn take(&self) -> Option<Work> {
        loop {
            let notified = self.ready.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut state = self.state();
                let closed = state.closed;
                let position =
                    state.lanes.iter().position(|l| closed || !state.running.contains(&l.key.chat));
                if let Some(position) = position {
                    let mut lane = state.lanes.remove(position).expect("found");
                    let work = lane.waiting.pop_front().expect("lanes are never empty");
                    if !lane.waiting.is_empty() {
                        state.lanes.push_back(lane);
                    }
                    state.running.insert(work.job.chat.clone());
                    return Some(work);
                }
                if closed {
                    return None;
                }
            }
            notified.await;
        }
    }

    /// A run of `chat` ended: its lane may be served again.
    pub fn done(&self, chat: &ChatRef) {
        self.state().running.remove(chat);
        self.ready.notify_waiters();
    }

    /// No more runs come: the workers drain what waits, then stop.
    pub fn close(&self) {
        self.state().closed = true;
        self.ready.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::{JobCreator, Missed};

    fn work(chat: &str, heartbeat: bool, run_id: i64) -> Work {
        let job = Job {
            id: run_id,
            chat: ChatRef::console(chat).unwrap(),
            name: String::new(),
            task: String::new(),
            cron: None,
            at: None,
            time_zone: "UTC".into(),
            missed: Missed::Skip,
            next_run: None,
            heartbeat,
            state: crate::jobs::JobState::Active,
            created_at: 0,
            created_by: JobCreator::Operator,
            token_budget: None,
        };
        Work { job, run_id }
    }

    async fn next(queue: &FairQueue) -> i64 {
        let work = tokio::time::timeout(std::time::Duration::from_secs(5), queue.take());
        work.await.expect("a run is ready").expect("open").run_id
    }

    #[tokio::test]
    async fn lanes_take_turns_and_a_running_chat_waits() {
        let queue = FairQueue::default();
        for id in 1..=5 {
            queue.push(work("greedy", false, id));
        }
        queue.push(work("other", false, 10));
        queue.push(work("greedy", true, 20));
        // Greedy's first run, then the other chat and the heartbeat before greedy's second.
        assert_eq!(next(&queue).await, 1);
        assert_eq!(next(&queue).await, 10);
        // The heartbeat's lane is greedy's chat, which is running: it waits too.
        let blocked = tokio::time::timeout(std::time::Duration::from_millis(100), queue.take());
        assert!(blocked.await.is_err(), "a chat's second run started beside its first");
        queue.done(&ChatRef::console("greedy").unwrap());
        assert_eq!(next(&queue).await, 20, "the heartbeat's lane before greedy's own");
        queue.done(&ChatRef::console("greedy").unwrap());
        assert_eq!(next(&queue).await, 2);
        queue.close();
        // Closed: the rest come out at once whatever runs, then nothing.
        for id in 3..=5 {
            assert_eq!(next(&queue).await, id);
        }
        assert!(queue.take().await.is_none());
    }

    #[test]
    fn a_full_queue_drops_the_greedy_lanes_newest_run() {
        let queue = FairQueue::default();
        for id in 1..=3 {
            queue.push(work("greedy", false, id));
        }
        let other = LaneKey::of(&work("other", false, 0).job);
        assert_eq!(queue.make_room_for(&other).map(|w| w.run_id), Some(3));
        queue.push(work("other", false, 10));
        // Greedy has 2, other 1: not two more, so the newcomer of other is the one dropped.
        assert!(queue.make_room_for(&other).is_none());
        let greedy = LaneKey::of(&work("greedy", false, 0).job);
        assert!(queue.make_room_for(&greedy).is_none(), "a lane never makes room for itself");
        assert_eq!(queue.waiting(), 3);
    }
}
