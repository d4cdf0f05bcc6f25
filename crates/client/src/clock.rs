//! Wall-clock time and a small random source, passed in so tests can control both.

use std::sync::atomic::{AtomicU64, Ordering};

/// Milliseconds since the Unix epoch, as born timestamps and `subVersion` need.
pub trait Clock: Send + Sync {
    fn now_ms(&self) -> i64;
}

/// The system clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| elapsed.as_millis() as i64)
            .unwrap_or(0)
    }
}

/// splitmix64: enough to spread start positions (queues, name servers) across clients; not
/// for anything secret.
#[derive(Debug)]
pub struct Random {
    state: AtomicU64,
}

impl Random {
    pub fn new(seed: u64) -> Random {
        Random {
            state: AtomicU64::new(seed),
        }
    }

    /// A seed that differs between processes and between clients of one process.
    pub fn seed_from_environment() -> u64 {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| elapsed.as_nanos() as u64)
            .unwrap_or(0);
        nanos ^ u64::from(std::process::id()) << 32 ^ COUNTER.fetch_add(1, Ordering::Relaxed)
    }

    pub fn next_u64(&self) -> u64 {
        let mut z = self
            .state
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
            .wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `bound` (0 when `bound` is 0).
    pub fn below(&self, bound: usize) -> usize {
        if bound == 0 {
            return 0;
        }
        (self.next_u64() % bound as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence() {
        let (a, b) = (Random::new(42), Random::new(42));
        let first: Vec<u64> = (0..4).map(|_| a.next_u64()).collect();
        let second: Vec<u64> = (0..4).map(|_| b.next_u64()).collect();
        assert_eq!(first, second);
        assert!(first.windows(2).all(|pair| pair[0] != pair[1]));
        assert!((0..100).all(|_| a.below(7) < 7));
        assert_eq!(a.below(0), 0);
    }
}
