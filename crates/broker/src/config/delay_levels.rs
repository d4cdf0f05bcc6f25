//! `messageDelayLevel`: RocketMQ's delay levels, read and written as that key spells them.

/// RocketMQ's default `messageDelayLevel`: 1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h.
pub const DEFAULT_LEVELS_MS: [u64; 18] = [
    1_000, 5_000, 10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000, 360_000, 420_000,
    480_000, 540_000, 600_000, 1_200_000, 1_800_000, 3_600_000, 7_200_000,
];
/// More levels would mean more schedule queues to poll; RocketMQ ships 18.
const LEVELS_MAX: usize = 64;
/// A level's delay at most: 30 days.
const LEVEL_MS_MAX: u64 = 30 * 24 * 3_600_000;
/// Parses `messageDelayLevel`: space-separated durations with the units RocketMQ accepts
/// (`s`, `m`, `h`, `d`), e.g. "1s 5s 10s 30s 1m".
pub fn parse_levels(text: &str) -> Result<Vec<u64>, &'static str> {
    const ALLOWED: &str =
        "space-separated durations such as 1s 5s 2m 1h 1d (1 to 64 levels, each up to 30 days)";
    let mut levels = Vec::new();
    for word in text.split_whitespace() {
        let split = word.find(|c: char| !c.is_ascii_digit()).ok_or(ALLOWED)?;
        let (number, unit) = word.split_at(split);
        let number: u64 = number.parse().map_err(|_| ALLOWED)?;
        let unit_ms = match unit {
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(ALLOWED),
        };
        let ms = number.checked_mul(unit_ms).ok_or(ALLOWED)?;
        if ms == 0 || ms > LEVEL_MS_MAX {
            return Err(ALLOWED);
        }
        levels.push(ms);
    }
    if levels.is_empty() || levels.len() > LEVELS_MAX {
        return Err(ALLOWED);
    }
    Ok(levels)
}

/// The levels as `messageDelayLevel` writes them, each in the largest unit that divides it
/// (`1s 5s 10s 30s 1m ... 2h`); `parse_levels` reads it back to the same values.
pub fn format_levels(levels_ms: &[u64]) -> String {
    let words: Vec<String> = levels_ms
        .iter()
        .map(|&ms| {
            let (unit, unit_ms) = [("d", 86_400_000), ("h", 3_600_000), ("m", 60_000)]
                .into_iter()
                .find(|(_, unit_ms)| ms % unit_ms == 0)
                .unwrap_or(("s", 1_000));
            format!("{}{unit}", ms / unit_ms)
        })
        .collect();
    words.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_like_rocketmq() {
        assert_eq!(
            parse_levels("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h").unwrap(),
            DEFAULT_LEVELS_MS.to_vec()
        );
        assert_eq!(parse_levels(" 2s  1d ").unwrap(), vec![2_000, 86_400_000]);
        for bad in ["", "1", "1x", "s", "0s", "31d", "-1s"] {
            assert!(parse_levels(bad).is_err(), "{bad:?}");
        }
    }
}
