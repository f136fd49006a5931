//! Caps that hold under concurrency: reserve the worst case before a call, settle after.
//!
//! A cap checked before a call and charged after it lets every concurrent call pass (all see
//! the same "used"). An [`Allowance`] instead counts what is *reserved* by calls in flight
//! next to what was *used*: a call reserves its worst case (prompt estimate + `max_tokens`, or
//! that in money) and is refused when `used + reserved + worst case` would pass the cap. When
//! the call ends, [`Hold::settle`] swaps the reservation for the real figure. A hold dropped
//! without settling (the call was abandoned mid-flight: the provider may still bill it) is
//! charged its whole reservation — a budget errs on the side of the cap.
//!
//! Units are the caller's: tokens, or micro-dollars for cost caps.

use std::fmt;
use std::sync::{Arc, Mutex};

/// One cap and what counts against it.
#[derive(Debug)]
pub struct Allowance {
    /// `None`: unlimited (still counted, for `/status`).
    cap: Option<u64>,
    /// What the cap is, for messages: "tokens today for this chat".
    what: String,
    counts: Mutex<Counts>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub used: u64,
    pub reserved: u64,
}

/// A call that would pass a cap.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the cap of {cap} {what} would be passed ({used} used, {reserved} reserved by calls in flight, this call needs up to {asked})")]
pub struct Exceeded {
    pub what: String,
    pub cap: u64,
    pub used: u64,
    pub reserved: u64,
    pub asked: u64,
}

impl Allowance {
    pub fn new(cap: Option<u64>, what: impl Into<String>) -> Arc<Self> {
        Arc::new(Self { cap, what: what.into(), counts: Mutex::default() })
    }

    /// Starts from what was used already (e.g. today's usage read back from the database).
    pub fn with_used(self: Arc<Self>, used: u64) -> Arc<Self> {
        self.lock().used = used;
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        // The counts stay consistent under every panic point (plain additions), so a poisoned
        // lock is safe to keep using.
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn cap(&self) -> Option<u64> {
        self.cap
    }

    pub fn what(&self) -> &str {
        &self.what
    }

    pub fn counts(&self) -> Counts {
        *self.lock()
    }

    /// Reserves `amount`, or says which cap it would pass.
    pub fn try_reserve(self: &Arc<Self>, amount: u64) -> Result<Hold, Exceeded> {
        let mut counts = self.lock();
        if let Some(cap) = self.cap {
            if counts.used.saturating_add(counts.reserved).saturating_add(amount) > cap {
                return Err(Exceeded {
                    what: self.what.clone(),
                    cap,
                    used: counts.used,
                    reserved: counts.reserved,
                    asked: amount,
                });
            }
        }
        counts.reserved += amount;
        Ok(Hold { allowance: Some(self.clone()), amount })
    }

    /// Counts `amount` as used without a reservation (it already happened).
    pub fn charge(&self, amount: u64) {
        let mut counts = self.lock();
        counts.used = counts.used.saturating_add(amount);
    }
}

/// A reservation; settle it with the real figure, or release it when the call never went out.
pub struct Hold {
    allowance: Option<Arc<Allowance>>,
    amount: u64,
}

impl fmt::Debug for Hold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hold").field("amount", &self.amount).finish()
    }
}

impl Hold {
    /// The call cost `actual`: the reservation becomes that.
    pub fn settle(mut self, actual: u64) {
        if let Some(allowance) = self.allowance.take() {
            let mut counts = allowance.lock();
            counts.reserved = counts.reserved.saturating_sub(self.amount);
            counts.used = counts.used.saturating_add(actual);
        }
    }

    /// The call was never sent: nothing is charged.
    pub fn release(mut self) {
        if let Some(allowance) = self.allowance.take() {
            let mut counts = allowance.lock();
            counts.reserved = counts.reserved.saturating_sub(self.amount);
        }
    }

    pub fn amount(&self) -> u64 {
        self.amount
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        if let Some(allowance) = self.allowance.take() {
            let mut counts = allowance.lock();
            counts.reserved = counts.reserved.saturating_sub(self.amount);
            counts.used = counts.used.saturating_add(self.amount);
        }
    }
}

/// Holds on several allowances at once: all or none.
#[derive(Debug, Default)]
pub struct Holds(Vec<Hold>);

impl Holds {
    /// Reserves `amount` on each `(allowance, amount)`; on the first refusal the ones taken are
    /// released and the refusal returned.
    pub fn reserve(
        wanted: impl IntoIterator<Item = (Arc<Allowance>, u64)>,
    ) -> Result<Self, Exceeded> {
        let mut holds = Vec::new();
        for (allowance, amount) in wanted {
            match allowance.try_reserve(amount) {
                Ok(hold) => holds.push(hold),
                Err(exceeded) => {
                    holds.into_iter().for_each(Hold::release);
                    return Err(exceeded);
                }
            }
        }
        Ok(Self(holds))
    }

    /// Settles each hold with `actual(amount reserved, index)`.
    pub fn settle(self, mut actual: impl FnMut(usize) -> u64) {
        for (i, hold) in self.0.into_iter().enumerate() {
            hold.settle(actual(i));
        }
    }

    pub fn release(self) {
        self.0.into_iter().for_each(Hold::release);
    }
}

/// What a task's model calls cost in money: priced calls in micro-dollars, and how many
/// calls a provider without prices answered (counted, never shown as $0). The relay adds it up
/// per task; the spending caps charge it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TaskCost {
    /// Micro-dollars of the priced calls.
    pub micros: u64,
    /// Calls answered by a provider without prices (counted, not priced).
    pub unpriced_calls: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrent_reservations_at_the_edge() {
        let a = Allowance::new(Some(100), "tokens");
        let holds: Vec<_> = (0..4).map(|_| a.try_reserve(30)).collect();
        assert_eq!(holds.iter().filter(|h| h.is_ok()).count(), 3);
        let err = holds[3].as_ref().unwrap_err();
        assert_eq!((err.used, err.reserved, err.asked), (0, 90, 30));
        let mut holds = holds.into_iter().flatten();
        holds.next().unwrap().settle(5);
        holds.next().unwrap().release();
        assert_eq!(a.counts(), Counts { used: 5, reserved: 30 });
        drop(holds); // the third hold is abandoned: charged in full
        assert_eq!(a.counts(), Counts { used: 35, reserved: 0 });
        assert!(a.try_reserve(65).is_ok());
        assert!(a.try_reserve(66).is_err());
    }

    #[test]
    fn all_or_none() {
        let big = Allowance::new(Some(100), "big");
        let small = Allowance::new(Some(10), "small");
        let err = Holds::reserve([(big.clone(), 50), (small.clone(), 20)]).unwrap_err();
        assert_eq!(err.what, "small");
        assert_eq!(big.counts(), Counts::default());
        let holds = Holds::reserve([(big.clone(), 50), (small.clone(), 5)]).unwrap();
        holds.settle(|i| [7, 3][i]);
        assert_eq!((big.counts().used, small.counts().used), (7, 3));
        let unlimited = Allowance::new(None, "x").with_used(u64::MAX - 1);
        assert!(unlimited.try_reserve(u64::MAX).is_ok());
    }
}
