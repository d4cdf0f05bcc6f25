//! GET_TIMER_CHECK_POINT's response body: RocketMQ 5's `TimerCheckpoint.encode`, seven
//! big-endian i64s (`store/timer/TimerCheckpoint.java`). Versions before the data version was
//! added send only the first four; decoding accepts both.

/// A timer wheel's progress as a RocketMQ slave copies it (`SlaveSynchronize.syncTimerCheckPoint`
/// takes `last_read_time_ms`, `master_timer_queue_offset` and the data version).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TimerCheckpoint {
    /// The wheel has delivered the timer messages due before this time.
    pub last_read_time_ms: i64,
    pub last_timer_log_flush_pos: i64,
    /// The next offset of the timer queue (`rmq_sys_wheel_timer`, queue 0) the wheel reads.
    pub last_timer_queue_offset: i64,
    pub master_timer_queue_offset: i64,
    pub state_version: i64,
    pub timestamp: i64,
    pub counter: i64,
}

pub const TIMER_CHECKPOINT_BYTES: usize = 7 * 8;
const TIMER_CHECKPOINT_BYTES_OLD: usize = 4 * 8;

impl TimerCheckpoint {
    pub fn encode(&self) -> Vec<u8> {
        [
            self.last_read_time_ms,
            self.last_timer_log_flush_pos,
            self.last_timer_queue_offset,
            self.master_timer_queue_offset,
            self.state_version,
            self.timestamp,
            self.counter,
        ]
        .iter()
        .flat_map(|v| v.to_be_bytes())
        .collect()
    }

    /// Err names the length when the body is neither the old nor the current size.
    pub fn decode(bytes: &[u8]) -> Result<TimerCheckpoint, String> {
        if bytes.len() != TIMER_CHECKPOINT_BYTES && bytes.len() != TIMER_CHECKPOINT_BYTES_OLD {
            return Err(format!(
                "a timer checkpoint is {TIMER_CHECKPOINT_BYTES} bytes (or \
                 {TIMER_CHECKPOINT_BYTES_OLD}), not {}",
                bytes.len()
            ));
        }
        let mut values = [0i64; 7];
        for (value, chunk) in values.iter_mut().zip(bytes.chunks_exact(8)) {
            let mut b = [0u8; 8];
            b.copy_from_slice(chunk);
            *value = i64::from_be_bytes(b);
        }
        let [last_read_time_ms, last_timer_log_flush_pos, last_timer_queue_offset, master_timer_queue_offset, state_version, timestamp, counter] =
            values;
        Ok(TimerCheckpoint {
            last_read_time_ms,
            last_timer_log_flush_pos,
            last_timer_queue_offset,
            master_timer_queue_offset,
            state_version,
            timestamp,
            counter,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_seven_big_endian_longs_and_reads_the_old_four() {
        let checkpoint = TimerCheckpoint {
            last_read_time_ms: 1_700_000_000_000,
            last_timer_log_flush_pos: 0,
            last_timer_queue_offset: 42,
            master_timer_queue_offset: 42,
            state_version: 0,
            timestamp: 1_700_000_000_500,
            counter: 3,
        };
        let bytes = checkpoint.encode();
        assert_eq!(bytes.len(), TIMER_CHECKPOINT_BYTES);
        assert_eq!(&bytes[..8], &1_700_000_000_000i64.to_be_bytes());
        assert_eq!(&bytes[16..24], &42i64.to_be_bytes());
        assert_eq!(TimerCheckpoint::decode(&bytes), Ok(checkpoint));
        let old = TimerCheckpoint::decode(&bytes[..32]).expect("the four-field form");
        assert_eq!(old.master_timer_queue_offset, 42);
        assert_eq!(old.counter, 0);
        assert!(TimerCheckpoint::decode(&bytes[..40]).is_err());
        assert!(TimerCheckpoint::decode(&[]).is_err());
    }
}
