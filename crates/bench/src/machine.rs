//! The machine a run happened on, and the CPU time the bench process used, from /proc.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Machine {
    pub cpu_count: usize,
    pub cpu_model: String,
    pub memory_kib: u64,
    pub kernel: String,
}

impl Machine {
    /// What /proc says; fields it cannot read stay empty or zero.
    pub fn read() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let mut machine = Machine::parse(&cpuinfo, &meminfo, &kernel);
        if machine.cpu_count == 0 {
            machine.cpu_count = std::thread::available_parallelism().map_or(0, |n| n.get());
        }
        machine
    }

    pub fn parse(cpuinfo: &str, meminfo: &str, kernel: &str) -> Machine {
        let field = |line: &str, name: &str| {
            let (key, value) = line.split_once(':')?;
            (key.trim() == name).then(|| value.trim().to_owned())
        };
        Machine {
            cpu_count: cpuinfo
                .lines()
                .filter(|line| field(line, "processor").is_some())
                .count(),
            cpu_model: cpuinfo
                .lines()
                .find_map(|line| field(line, "model name"))
                .unwrap_or_default(),
            memory_kib: meminfo
                .lines()
                .find_map(|line| field(line, "MemTotal"))
                .and_then(|value| value.trim_end_matches("kB").trim().parse().ok())
                .unwrap_or(0),
            kernel: kernel.trim().to_owned(),
        }
    }

    pub fn line(&self) -> String {
        format!(
            "{} CPUs ({}), {:.1} GiB, Linux {}",
            self.cpu_count,
            if self.cpu_model.is_empty() {
                "unknown model"
            } else {
                &self.cpu_model
            },
            self.memory_kib as f64 / (1024.0 * 1024.0),
            self.kernel
        )
    }
}

/// `USER_HZ`: the unit of /proc/PID/stat times, 100 on every Linux architecture we run on.
const CLOCK_TICKS_PER_S: f64 = 100.0;

/// User plus system CPU seconds this process has used so far (0 if /proc is unreadable).
pub fn process_cpu_s() -> f64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| cpu_ticks(&stat))
        .map_or(0.0, |ticks| ticks as f64 / CLOCK_TICKS_PER_S)
}

/// utime + stime (fields 14 and 15) of a /proc/PID/stat line. The command name (field 2) may
/// hold spaces and parentheses, so fields are counted after its last ')'.
fn cpu_ticks(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    Some(user + system)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_files_parse() {
        let cpuinfo = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t: x\n\nprocessor\t: 1\nmodel name\t: AMD EPYC 7B13\n";
        let meminfo = "MemTotal:       24591212 kB\nMemFree:  1 kB\n";
        let machine = Machine::parse(cpuinfo, meminfo, "6.1.0-18-amd64\n");
        assert_eq!(
            machine,
            Machine {
                cpu_count: 2,
                cpu_model: "AMD EPYC 7B13".into(),
                memory_kib: 24_591_212,
                kernel: "6.1.0-18-amd64".into(),
            }
        );
        assert!(machine
            .line()
            .starts_with("2 CPUs (AMD EPYC 7B13), 23.5 GiB"));
    }

    #[test]
    fn stat_times_are_found_after_the_command_name() {
        let stat = "4242 (quiver (x) y) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0";
        assert_eq!(cpu_ticks(stat), Some(300));
        assert_eq!(cpu_ticks("garbage"), None);
        assert!(process_cpu_s() >= 0.0);
    }
}
