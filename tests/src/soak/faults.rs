//! The soak's fault injector: a plan drawn from the seed (which fault, after how long), run one
//! fault at a time against the real parts (the test's engine, the daemon's process, the model,
//! the data directory's disk), each window recorded for the report.

use std::time::Duration;

/// A fault the injector can cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fault {
    /// One of the pool's containers removed by force (`docker rm -f`).
    ContainerKilled,
    /// The daemon killed (SIGKILL), started again a moment later.
    DaemonKilled,
    /// The engine stopped as `systemctl restart docker` does (SIGTERM), then started again;
    /// every other time with `--live-restore` on (its containers survive the stop).
    EngineRestarted,
    /// The model answers HTTP 500 for a while.
    ModelFailing,
    /// The model answers only after the daemon's timeout for a while.
    ModelStalling,
    /// The data directory's disk filled to the last byte for a while, then freed.
    DiskFull,
}

impl Fault {
    pub const ALL: [Self; 6] = [
        Self::ContainerKilled,
        Self::DaemonKilled,
        Self::EngineRestarted,
        Self::ModelFailing,
        Self::ModelStalling,
        Self::DiskFull,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::ContainerKilled => "container killed",
            Self::DaemonKilled => "daemon killed (SIGKILL)",
            Self::EngineRestarted => "engine restarted (SIGTERM)",
            Self::ModelFailing => "model failing (500)",
            Self::ModelStalling => "model stalling",
            Self::DiskFull => "disk full",
        }
    }
}

/// How long the chats run before the first fault.
pub const WARM_UP: Duration = Duration::from_secs(20);

/// One step of the plan: wait `after`, then cause `fault` (held for `hold` where it lasts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub after: Duration,
    pub fault: Fault,
    pub hold: Duration,
}

/// The faults for a run of `duration` from `seed`: rounds of every kind in a shuffled order
/// (so a short run still meets each kind), a pause of 3–8 s before each and a hold of 5–9 s,
/// until the time is used up. The same seed gives the same plan.
pub fn plan(seed: u64, duration: Duration) -> Vec<Step> {
    let mut rng = fastrand::Rng::with_seed(seed ^ 0x5eed_fa17);
    let mut steps = Vec::new();
    // Warm-up first: the pool and the chats get going before the first fault.
    let mut used = WARM_UP;
    'rounds: loop {
        let mut round = Fault::ALL;
        rng.shuffle(&mut round);
        for fault in round {
            let after = Duration::from_millis(rng.u64(3_000..=8_000));
            let hold = Duration::from_millis(rng.u64(5_000..=9_000));
            // What a fault costs beyond its hold (a restart, the recovery).
            if used + after + hold + Duration::from_secs(10) > duration {
                break 'rounds;
            }
            used += after + hold + Duration::from_secs(5);
            steps.push(Step { after, fault, hold });
        }
    }
    if let Some(first) = steps.first_mut() {
        first.after += WARM_UP;
    }
    steps
}

/// One fault as it happened: its kind, when (since the soak began), and what was seen.
#[derive(Debug, Clone)]
pub struct Window {
    pub fault: Fault,
    pub from: Duration,
    pub to: Duration,
    pub note: String,
}

impl Window {
    /// Whether `[from, to]` meets this window (or the few seconds of recovery after it).
    pub fn touches(&self, from: Duration, to: Duration) -> bool {
        let settle = Duration::from_secs(5);
        from <= self.to + settle && to >= self.from
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_one_plan_with_every_kind_in_three_minutes() {
        let three = Duration::from_secs(180);
        assert_eq!(plan(7, three), plan(7, three));
        assert_ne!(plan(7, three), plan(8, three));
        for seed in 0..50 {
            let steps = plan(seed, three);
            for fault in Fault::ALL {
                assert!(steps.iter().any(|s| s.fault == fault), "seed {seed}: no {fault:?}");
            }
        }
    }
}
