//! The standard `process_*` metrics of Prometheus clients, read from `/proc/self` at
//! scrape time (prometheus-client has no collector for them): CPU seconds, resident and
//! virtual memory, open and maximum file descriptors, and the start time. Where `/proc`
//! is missing (not Linux) nothing is reported.
//!
//! CPU times in `/proc/<pid>/stat` are in clock ticks; like the Go client's procfs, the
//! tick is taken as 1/100 s (USER_HZ, fixed at 100 on every Linux architecture that
//! Kubernetes runs on).

use std::fmt;
use std::path::Path;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeGaugeValue, EncodeMetric as _};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;

/// Clock ticks per second of `/proc/<pid>/stat` (USER_HZ).
const TICKS_PER_SECOND: f64 = 100.0;

/// One reading of the process's figures.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sample {
    pub(crate) cpu_seconds: f64,
    pub(crate) resident_bytes: u64,
    pub(crate) virtual_bytes: u64,
    pub(crate) open_fds: u64,
    pub(crate) max_fds: Option<u64>,
    pub(crate) start_time_seconds: Option<f64>,
}

/// Reads the figures of this process from `proc` (normally `/proc`).
pub fn read(proc: &Path) -> Option<Sample> {
    let stat = std::fs::read_to_string(proc.join("self/stat")).ok()?;
    let status = std::fs::read_to_string(proc.join("self/status")).ok();
    let limits = std::fs::read_to_string(proc.join("self/limits")).ok();
    let boot = std::fs::read_to_string(proc.join("stat")).ok();
    let stat = parse_stat(&stat)?;
    let resident_bytes = status
        .as_deref()
        .and_then(|s| status_kib(s, "VmRSS:"))
        .map_or(stat.rss_pages * 4096, |kib| kib * 1024);
    Some(Sample {
        cpu_seconds: (stat.utime + stat.stime) as f64 / TICKS_PER_SECOND,
        resident_bytes,
        virtual_bytes: stat.vsize,
        open_fds: std::fs::read_dir(proc.join("self/fd")).map_or(0, |d| d.count() as u64),
        max_fds: limits.as_deref().and_then(max_open_files),
        start_time_seconds: boot
            .as_deref()
            .and_then(boot_time)
            .map(|boot| boot as f64 + stat.starttime as f64 / TICKS_PER_SECOND),
    })
}

/// The fields of `/proc/<pid>/stat` used here.
#[derive(Debug, PartialEq, Eq)]
struct Stat {
    utime: u64,
    stime: u64,
    starttime: u64,
    vsize: u64,
    rss_pages: u64,
}

/// Parses `/proc/<pid>/stat`: the fields after the command name (which may hold spaces
/// and parentheses, so it is cut at the last `)`).
fn parse_stat(text: &str) -> Option<Stat> {
    let (_, rest) = text.rsplit_once(')')?;
    // rest starts at field 3 (state): field N is at index N - 3.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(Stat {
        utime: field(14)?,
        stime: field(15)?,
        starttime: field(22)?,
        vsize: field(23)?,
        rss_pages: field(24)?,
    })
}

/// A `Name:   123 kB` line of `/proc/<pid>/status`, in KiB.
fn status_kib(status: &str, name: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// The soft limit of `Max open files` in `/proc/<pid>/limits`.
fn max_open_files(limits: &str) -> Option<u64> {
    let rest = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))?;
    let soft = rest.split_whitespace().next()?;
    match soft {
        "unlimited" => Some(u64::MAX),
        n => n.parse().ok(),
    }
}

/// `btime` of `/proc/stat`: the boot time, in seconds since the epoch.
fn boot_time(stat: &str) -> Option<u64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|n| n.trim().parse().ok())
}

/// Encodes one gauge of the collector.
fn gauge<N: EncodeGaugeValue>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    value: N,
) -> Result<(), fmt::Error> {
    let gauge = ConstGauge::new(value);
    gauge.encode(encoder.encode_descriptor(name, help, unit, gauge.metric_type())?)
}

/// The collector, registered once in the metrics registry.
#[derive(Debug)]
pub struct ProcessCollector;

// === impl ProcessCollector ===

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let Some(sample) = read(Path::new("/proc")) else {
            return Ok(());
        };
        let cpu = ConstCounter::new(sample.cpu_seconds);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu",
            "Total user and system CPU time spent in seconds",
            Some(&Unit::Seconds),
            cpu.metric_type(),
        )?)?;
        gauge(
            &mut encoder,
            "process_resident_memory",
            "Resident memory size in bytes",
            Some(&Unit::Bytes),
            sample.resident_bytes,
        )?;
        gauge(
            &mut encoder,
            "process_virtual_memory",
            "Virtual memory size in bytes",
            Some(&Unit::Bytes),
            sample.virtual_bytes,
        )?;
        gauge(
            &mut encoder,
            "process_open_fds",
            "Number of open file descriptors",
            None,
            sample.open_fds,
        )?;
        if let Some(max) = sample.max_fds {
            gauge(
                &mut encoder,
                "process_max_fds",
                "Maximum number of open file descriptors",
                None,
                max,
            )?;
        }
        if let Some(start) = sample.start_time_seconds {
            gauge(
                &mut encoder,
                "process_start_time",
                "Start time of the process since unix epoch in seconds",
                Some(&Unit::Seconds),
                start,
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_files_parse() {
        let stat = "4242 (safe write) (x)) S 1 4242 4242 0 -1 4194560 1500 0 0 0 250 50 0 0 20 0 9 0 12345 104857600 2560 18446744073709551615 1 1 0 0 0 0 0 4096 17475 0 0 0 17 1 0 0 0 0 0";
        assert_eq!(
            parse_stat(stat),
            Some(Stat {
                utime: 250,
                stime: 50,
                starttime: 12345,
                vsize: 104857600,
                rss_pages: 2560,
            })
        );
        assert_eq!(
            status_kib("Name:\tsafewrite\nVmRSS:\t   10240 kB\n", "VmRSS:"),
            Some(10240)
        );
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax open files            1024                 524288               files\n";
        assert_eq!(max_open_files(limits), Some(1024));
        assert_eq!(
            boot_time("cpu  1 2 3\nbtime 1700000000\n"),
            Some(1_700_000_000)
        );
    }

    #[test]
    fn this_process_is_measured() {
        let sample = read(Path::new("/proc")).expect("a Linux /proc");
        assert!(sample.resident_bytes > 1 << 20, "{sample:?}");
        assert!(sample.open_fds >= 3, "{sample:?}");
        assert!(sample.max_fds.unwrap() >= sample.open_fds, "{sample:?}");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let started = sample.start_time_seconds.unwrap();
        assert!(
            started <= now + 1.0 && started > now - 86_400.0,
            "{started} vs {now}"
        );
    }
}
