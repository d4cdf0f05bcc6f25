//! Whether a run was limited by the disk: the machine's block devices (/proc/diskstats) and its
//! dirty page cache (/proc/meminfo) sampled at the start and the end of what a run measured.
//!
//! A long async-flush run at 1 KiB fills the page cache with dirty pages; once the kernel
//! throttles writers, the broker writes at the disk's sustained speed (about 380 MB/s on the
//! project's machine, `dd bs=1M count=3000 conv=fdatasync`) whatever the bench asks for.
//! Figures measured then are the disk's, and the report says so.

use serde::{Deserialize, Serialize};

/// A device busier than this share of the wall time is the bottleneck: at 100% it has a
/// request in service every moment (`io_ticks` in Documentation/admin-guide/iostats.rst).
const BUSY_LIMITED: f64 = 0.90;
/// Writers are throttled from the midpoint between the background and the foreground dirty
/// thresholds (mm/page-writeback.c, `dirty_freerun_ceiling`); dirty pages above this share of
/// the foreground threshold mean the kernel is pacing the writers.
const DIRTY_LIMITED: f64 = 0.75;
/// The kernel's sector unit in /proc/diskstats, whatever the device's own sector size.
const SECTOR_BYTES: u64 = 512;

/// One reading of the machine's I/O counters.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DiskSample {
    /// Whole devices (no partitions, loops or RAM disks): name, sectors written, ms busy.
    devices: Vec<(String, u64, u64)>,
    dirty_kib: u64,
    writeback_kib: u64,
    /// Where the kernel starts throttling writers, from vm.dirty_bytes or vm.dirty_ratio.
    dirty_limit_kib: u64,
    /// The broker's process id and the bytes it has caused to be written to storage
    /// (`write_bytes` of /proc/PID/io), when the broker runs on this machine.
    broker: Option<(u32, u64)>,
}

/// What the disks did between two samples.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DiskFigures {
    /// Bytes written to all whole devices per second, in MB (10^6).
    pub write_mb_per_s: f64,
    /// The busiest device and the share of the time it had I/O in flight (0 to 1).
    pub busiest_device: String,
    pub busiest_busy: f64,
    /// What the broker process caused to be written to storage, in MB per second, when its
    /// process id was given.
    #[serde(default)]
    pub broker_write_mb_per_s: Option<f64>,
    /// Dirty plus writeback page cache at the end, and the throttling threshold.
    pub dirty_mib_end: f64,
    pub dirty_limit_mib: f64,
    /// Why the run was limited by the disk, in words; None when it was not.
    pub limited: Option<String>,
}

impl DiskSample {
    /// What /proc says now, with the broker's own writes when `broker_pid` runs here; an
    /// unreadable file leaves its part empty (then nothing is judged from it).
    pub fn read(broker_pid: Option<u32>) -> DiskSample {
        let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
        let number = |path: &str| read(path).trim().parse::<u64>().unwrap_or(0);
        let mut sample = DiskSample::parse(
            &read("/proc/diskstats"),
            &read("/proc/meminfo"),
            number("/proc/sys/vm/dirty_bytes"),
            number("/proc/sys/vm/dirty_ratio"),
        );
        sample.broker = broker_pid.and_then(|pid| {
            let io = read(&format!("/proc/{pid}/io"));
            Some((pid, process_write_bytes(&io)?))
        });
        sample
    }

    /// The broker process this sample reads, if any.
    pub fn broker_pid(&self) -> Option<u32> {
        self.broker.map(|(pid, _)| pid)
    }

    pub fn parse(diskstats: &str, meminfo: &str, dirty_bytes: u64, dirty_ratio: u64) -> Self {
        let devices = diskstats
            .lines()
            .filter_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                let name = *fields.get(2)?;
                if !is_whole_disk(name) {
                    return None;
                }
                let sectors_written = fields.get(9)?.parse().ok()?;
                let busy_ms = fields.get(12)?.parse().ok()?;
                Some((name.to_owned(), sectors_written, busy_ms))
            })
            .collect();
        let kib = |name: &str| {
            meminfo
                .lines()
                .find_map(|line| {
                    let (key, value) = line.split_once(':')?;
                    (key.trim() == name).then(|| value.trim().trim_end_matches("kB").trim())
                })
                .and_then(|value| value.parse::<u64>().ok())
                .unwrap_or(0)
        };
        // The kernel applies the ratio to the memory it can dirty, close to MemAvailable.
        let dirty_limit_kib = if dirty_bytes > 0 {
            dirty_bytes / 1024
        } else {
            kib("MemAvailable") * dirty_ratio / 100
        };
        DiskSample {
            devices,
            dirty_kib: kib("Dirty"),
            writeback_kib: kib("Writeback"),
            dirty_limit_kib,
            broker: None,
        }
    }

    /// What happened from `self` to `later`, `seconds` apart.
    pub fn figures(&self, later: &DiskSample, seconds: f64) -> DiskFigures {
        let seconds = seconds.max(1e-3);
        let mut written = 0u64;
        let mut busiest = (String::new(), 0.0f64);
        for (name, sectors, busy_ms) in &later.devices {
            let Some((_, sectors0, busy0)) = self.devices.iter().find(|(n, ..)| n == name) else {
                continue;
            };
            written += sectors.saturating_sub(*sectors0) * SECTOR_BYTES;
            let busy = (busy_ms.saturating_sub(*busy0) as f64 / 1e3 / seconds).min(1.0);
            if busy > busiest.1 {
                busiest = (name.clone(), busy);
            }
        }
        let mib = |kib: u64| kib as f64 / 1024.0;
        let broker_write_mb_per_s = match (self.broker, later.broker) {
            (Some((pid, before)), Some((pid_later, after))) if pid == pid_later => {
                Some(after.saturating_sub(before) as f64 / 1e6 / seconds)
            }
            _ => None,
        };
        let mut figures = DiskFigures {
            write_mb_per_s: written as f64 / 1e6 / seconds,
            broker_write_mb_per_s,
            busiest_device: busiest.0,
            busiest_busy: busiest.1,
            dirty_mib_end: mib(later.dirty_kib + later.writeback_kib),
            dirty_limit_mib: mib(later.dirty_limit_kib),
            limited: None,
        };
        figures.limited = figures.judge();
        figures
    }
}

impl DiskFigures {
    fn judge(&self) -> Option<String> {
        let mut reasons = Vec::new();
        if self.busiest_busy >= BUSY_LIMITED {
            reasons.push(format!(
                "{} had I/O in flight {:.0}% of the time while the machine wrote {:.0} MB/s",
                self.busiest_device,
                self.busiest_busy * 100.0,
                self.write_mb_per_s
            ));
        }
        if self.dirty_limit_mib > 0.0 && self.dirty_mib_end >= self.dirty_limit_mib * DIRTY_LIMITED
        {
            reasons.push(format!(
                "the page cache held {:.0} MiB of unwritten data, near the {:.0} MiB at which the kernel makes writers wait for the disk",
                self.dirty_mib_end, self.dirty_limit_mib
            ));
        }
        (!reasons.is_empty()).then(|| {
            format!(
                "limited by the disk: {}; figures are the disk's sustained speed, not the broker's",
                reasons.join(", and ")
            )
        })
    }

    /// `disk: 12 MB/s written, vda busy 3%` plus the verdict when limited.
    pub fn line(&self) -> String {
        let mut line = format!(
            "Disk: {:.0} MB/s written, busiest {} {:.0}% busy, {:.0} MiB dirty of {:.0} MiB",
            self.write_mb_per_s,
            if self.busiest_device.is_empty() {
                "device"
            } else {
                &self.busiest_device
            },
            self.busiest_busy * 100.0,
            self.dirty_mib_end,
            self.dirty_limit_mib
        );
        if let Some(broker) = self.broker_write_mb_per_s {
            line.push_str(&format!(", the broker wrote {broker:.0} MB/s"));
        }
        if let Some(limited) = &self.limited {
            line.push_str(" -- ");
            line.push_str(limited);
        }
        line
    }
}

/// `write_bytes` of a /proc/PID/io: what the process caused to be sent to storage.
fn process_write_bytes(io: &str) -> Option<u64> {
    io.lines()
        .find_map(|line| line.strip_prefix("write_bytes:"))
        .and_then(|value| value.trim().parse().ok())
}

/// Block devices that hold data: partitions, loop devices and RAM disks are left out, so that
/// a write is not counted twice (a partition's writes are also its disk's).
fn is_whole_disk(name: &str) -> bool {
    if ["loop", "ram", "zram", "dm-", "md", "sr"]
        .iter()
        .any(|prefix| name.starts_with(prefix))
    {
        return false;
    }
    // sda1, vda2, nvme0n1p1, mmcblk0p1 are partitions; nvme0n1 and mmcblk0 are disks.
    let partition_of_numbered = |base: &str| {
        name.strip_prefix(base).is_some_and(|rest| {
            rest.split_once('p')
                .is_some_and(|(_, part)| part.chars().all(|c| c.is_ascii_digit()))
        })
    };
    if name.starts_with("nvme") || name.starts_with("mmcblk") {
        return !partition_of_numbered("nvme") && !partition_of_numbered("mmcblk");
    }
    !name.ends_with(|c: char| c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEMINFO: &str =
        "MemTotal: 24591212 kB\nMemAvailable:   20000000 kB\nDirty: 1000 kB\nWriteback: 24 kB\n";

    fn stats(sectors: u64, busy_ms: u64) -> String {
        format!(
            "   7       0 loop0 1 0 8 1 999 0 {sectors} 5 0 {busy_ms} 1\n \
             254       0 vda 10 0 80 1 20 0 {sectors} 5 0 {busy_ms} 9 0 0 0 0\n \
             254       1 vda1 10 0 80 1 20 0 {sectors} 5 0 {busy_ms} 9 0 0 0 0\n"
        )
    }

    #[test]
    fn a_busy_disk_is_named_as_the_limit() {
        let before = DiskSample::parse(&stats(0, 0), MEMINFO, 0, 20);
        // 10 s: 7,812,500 sectors of 512 B = 4 GB, so 400 MB/s, busy 9.8 of 10 s.
        let after = DiskSample::parse(&stats(7_812_500, 9_800), MEMINFO, 0, 20);
        let figures = before.figures(&after, 10.0);
        assert!((figures.write_mb_per_s - 400.0).abs() < 1e-6, "{figures:?}");
        assert_eq!(
            figures.busiest_device, "vda",
            "loops and partitions are left out"
        );
        assert!((figures.busiest_busy - 0.98).abs() < 1e-9);
        let limited = figures.limited.clone().expect("limited");
        assert!(limited.contains("vda had I/O in flight 98%"), "{limited}");
        assert!(figures.line().contains("limited by the disk"));
    }

    #[test]
    fn an_idle_disk_limits_nothing_and_full_dirty_cache_does() {
        let before = DiskSample::parse(&stats(0, 0), MEMINFO, 0, 20);
        let after = DiskSample::parse(&stats(2_000, 100), MEMINFO, 0, 20);
        let figures = before.figures(&after, 10.0);
        assert_eq!(figures.limited, None, "{figures:?}");
        // 20% of 20,000,000 KiB = 4,000,000 KiB limit; 3.5 GB dirty is above 75% of it.
        let dirty = "MemAvailable: 20000000 kB\nDirty: 3500000 kB\nWriteback: 0 kB\n";
        let after = DiskSample::parse(&stats(2_000, 100), dirty, 0, 20);
        let limited = before.figures(&after, 10.0).limited.expect("limited");
        assert!(limited.contains("3418 MiB of unwritten data"), "{limited}");
        // vm.dirty_bytes wins over the ratio when set.
        let fixed = DiskSample::parse("", dirty, 8 << 30, 20);
        assert_eq!(fixed.dirty_limit_kib, 8 << 20);
    }

    #[test]
    fn the_brokers_own_writes_are_reported_when_its_pid_is_given() {
        let io = "rchar: 1\nwchar: 2\nwrite_bytes: 40000000\ncancelled_write_bytes: 0\n";
        assert_eq!(process_write_bytes(io), Some(40_000_000));
        assert_eq!(process_write_bytes("garbage"), None);
        let mut before = DiskSample::parse(&stats(0, 0), MEMINFO, 0, 20);
        let mut after = DiskSample::parse(&stats(0, 0), MEMINFO, 0, 20);
        before.broker = Some((42, 0));
        after.broker = Some((42, 40_000_000));
        let figures = before.figures(&after, 2.0);
        assert_eq!(figures.broker_write_mb_per_s, Some(20.0));
        assert!(
            figures.line().contains(", the broker wrote 20 MB/s"),
            "{}",
            figures.line()
        );
        after.broker = Some((43, 40_000_000));
        assert_eq!(
            before.figures(&after, 2.0).broker_write_mb_per_s,
            None,
            "another process"
        );
        // This process's own figures are readable.
        assert!(DiskSample::read(Some(std::process::id()))
            .broker_pid()
            .is_some());
    }

    #[test]
    fn whole_disks_are_told_from_partitions() {
        for disk in ["sda", "vda", "nvme0n1", "mmcblk0", "xvdb"] {
            assert!(is_whole_disk(disk), "{disk}");
        }
        for other in [
            "sda1",
            "nvme0n1p2",
            "mmcblk0p1",
            "loop3",
            "zram0",
            "dm-0",
            "md127",
        ] {
            assert!(!is_whole_disk(other), "{other}");
        }
        assert_eq!(
            DiskSample::parse("garbage\n1 2\n", "", 0, 0).devices,
            vec![]
        );
    }
}
