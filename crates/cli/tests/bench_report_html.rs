//! The HTML reports open in a real browser: headless Chromium (Debian's `chromium` package,
//! which scripts/test.sh installs) loads the reports of sweep, compare, produce and soak from disk, every
//! chart lays out and draws its lines, and the console stays silent. The screenshots are kept
//! under the test's target folder (`bench-report/`) for a person to look at.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// Chromium starts in about a second; a loaded CI machine may take many times that.
const BROWSER_DEADLINE: Duration = Duration::from_secs(120);

fn chromium() -> PathBuf {
    if let Some(path) = std::env::var_os("QUIVER_CHROMIUM") {
        return PathBuf::from(path);
    }
    for name in ["chromium", "chromium-browser"] {
        let found = std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join(name))
                .find(|path| path.is_file())
        });
        if let Some(path) = found {
            return path;
        }
    }
    panic!(
        "chromium is needed to check the HTML reports: apt-get install -y chromium \
         (scripts/test.sh installs it when run as root), or set QUIVER_CHROMIUM"
    );
}

/// Runs headless Chromium on `page` with `mode` (`--dump-dom` or `--screenshot=...`), within
/// the deadline.
fn browse(page: &Path, mode: &str, profile: &Path) -> Output {
    let child = Command::new(chromium())
        .args([
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            "--disable-dev-shm-usage",
            "--enable-logging=stderr",
            "--v=0",
            "--window-size=1400,3000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(mode)
        .arg(format!("file://{}", page.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start chromium");
    let id = child.id();
    let (done, wait) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(child.wait_with_output());
    });
    match wait.recv_timeout(BROWSER_DEADLINE) {
        Ok(output) => output.expect("chromium ran"),
        Err(_) => {
            // The child is ours and still running: stop it before failing.
            let _ = Command::new("kill").args(["-9", &id.to_string()]).status();
            panic!("chromium did not finish {mode} within {BROWSER_DEADLINE:?}");
        }
    }
}

/// Opens `page` in the browser, checks that all of its charts rendered with no console
/// message, and keeps a screenshot as `name.png` in `out`; returns the chart count.
fn check_report(page: &Path, name: &str, out: &Path, profile: &Path) -> usize {
    let html = std::fs::read_to_string(page).expect("report written");
    assert!(
        !html.contains("src=\"http"),
        "{name}: the report fetches nothing"
    );
    let charts = html.matches("<svg class=\"chart\"").count();

    let dumped = browse(page, "--dump-dom", profile);
    let dom = String::from_utf8_lossy(&dumped.stdout);
    let log = String::from_utf8_lossy(&dumped.stderr);
    assert!(dumped.status.success(), "{name}: chromium failed: {log}");
    let rendered = format!("data-charts-rendered=\"{charts}\"");
    assert!(
        dom.contains(&rendered),
        "{name}: expected {rendered} in the DOM after load; console: {}",
        console(&log)
    );
    assert_eq!(console(&log), "", "{name}: the console must stay silent");

    let screenshot = out.join(format!("{name}.png"));
    let _ = std::fs::remove_file(&screenshot);
    let shot = browse(
        page,
        &format!("--screenshot={}", screenshot.display()),
        profile,
    );
    assert!(
        shot.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&shot.stderr)
    );
    let png = std::fs::read(&screenshot).expect("screenshot written");
    assert!(png.starts_with(b"\x89PNG"), "{name}: not a PNG");
    std::fs::copy(page, out.join(format!("{name}.html"))).expect("keep the report");
    charts
}

/// The page's console messages from Chromium's log (`INFO:CONSOLE(...)`), one per line.
fn console(log: &str) -> String {
    log.lines()
        .filter(|line| line.contains(":CONSOLE"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn every_report_renders_every_chart_in_chromium() {
    let browser = chromium();
    assert!(browser.exists(), "{}", browser.display());
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bench-report");
    std::fs::create_dir_all(&out).expect("output folder");
    let dir = tempfile::tempdir().expect("temp dir");
    let profile = dir.path().join("chromium-profile");
    let quiver = common::up(dir.path());
    let namesrv = quiver.namesrv().to_string();

    let json = dir.path().join("sweep.json");
    let html = dir.path().join("sweep.html");
    let sweep = Command::new(common::binary())
        .args([
            "bench", "sweep", "-n", &namesrv, "-w", "1,2", "-s", "64,256",
        ])
        .args(["--queues", "2", "--warmup", "0.2", "--duration", "0.5"])
        .args([
            "--consumers",
            "1",
            "--report-interval",
            "0.1",
            "-t",
            "HtmlSweep",
        ])
        .arg("--json")
        .arg(&json)
        .arg("--html")
        .arg(&html)
        .output()
        .expect("run sweep");
    assert!(
        sweep.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&sweep.stdout),
        String::from_utf8_lossy(&sweep.stderr)
    );
    // Throughput, MB/s and p99 against senders; a percentile chart per size; TPS, p99,
    // consume rate and lag over time.
    let charts = check_report(&html, "sweep", &out, &profile);
    assert_eq!(charts, 3 + 2 + 4, "every chart the report should have");

    let compared = dir.path().join("compare.html");
    let compare = Command::new(common::binary())
        .args(["bench", "compare"])
        .arg(&json)
        .arg(&json)
        .arg("--html")
        .arg(&compared)
        .output()
        .expect("run compare");
    assert!(
        compare.status.success(),
        "{}",
        String::from_utf8_lossy(&compare.stderr)
    );
    assert_eq!(check_report(&compared, "compare", &out, &profile), 2);

    // produce's and soak's reports.
    let produced = dir.path().join("produce.html");
    let produce = Command::new(common::binary())
        .args([
            "bench",
            "produce",
            "-n",
            &namesrv,
            "-t",
            "HtmlProduce",
            "--queues",
            "2",
        ])
        .args([
            "-w",
            "2",
            "--messages",
            "600",
            "--report-interval",
            "0.1",
            "--html",
        ])
        .arg(&produced)
        .output()
        .expect("run produce");
    assert!(
        produce.status.success(),
        "{}",
        String::from_utf8_lossy(&produce.stderr)
    );
    assert_eq!(check_report(&produced, "produce", &out, &profile), 3);
    let soaked = dir.path().join("soak.html");
    let soak = Command::new(common::binary())
        .args([
            "bench", "soak", "-n", &namesrv, "-t", "HtmlSoak", "--queues", "2",
        ])
        .args([
            "-w",
            "2",
            "--rate",
            "500",
            "--duration",
            "1",
            "--report-interval",
            "0.25",
        ])
        .arg("--html")
        .arg(&soaked)
        .output()
        .expect("run soak");
    assert!(
        soak.status.success(),
        "{}",
        String::from_utf8_lossy(&soak.stderr)
    );
    assert_eq!(check_report(&soaked, "soak", &out, &profile), 3);

    // The check itself can fail: the same report with every line and marker taken out.
    let broken = dir.path().join("broken.html");
    let text = std::fs::read_to_string(&html).expect("report");
    let text = text
        .replace("<polyline", "<desc")
        .replace("<circle", "<desc");
    std::fs::write(&broken, text).expect("write");
    let output = browse(&broken, "--dump-dom", &profile);
    let dom = String::from_utf8_lossy(&output.stdout);
    assert!(dom.contains("data-charts-rendered=\"0\""), "{dom}");
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(
        console(&log).contains("chart drew nothing: Throughput against senders"),
        "{log}"
    );
}
