//! A `quiver` process under test.

use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};

const READY_TIMEOUT: Duration = Duration::from_secs(30);
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// The addresses a started process printed in its `ready` line.
#[derive(Debug, Clone, Copy)]
pub struct Started {
    pub namesrv: Option<SocketAddr>,
    pub broker: Option<SocketAddr>,
    pub controller: Option<SocketAddr>,
    /// Where the broker serves gRPC clients.
    pub grpc: Option<SocketAddr>,
}

pub struct QuiverProcess {
    child: Option<Child>,
    pub started: Started,
    pub log_path: PathBuf,
}

impl QuiverProcess {
    /// `quiver up` with free ports and its data in `data_dir`.
    pub fn up(binary: &Path, data_dir: &Path) -> anyhow::Result<QuiverProcess> {
        Self::up_with_config(binary, data_dir, None, data_dir)
    }

    /// `quiver up -c config` with free ports, data in `data_dir` and the log in `log_dir`.
    pub fn up_with_config(
        binary: &Path,
        data_dir: &Path,
        config: Option<&Path>,
        log_dir: &Path,
    ) -> anyhow::Result<QuiverProcess> {
        let data = data_dir.to_str().context("data dir is not UTF-8")?;
        let mut args = vec![
            "up",
            "--data",
            data,
            "--namesrv-port",
            "0",
            "--broker-port",
            "0",
        ];
        if let Some(config) = config {
            args.extend(["-c", config.to_str().context("config path is not UTF-8")?]);
        }
        Self::start(binary, &args, log_dir)
    }

    /// Runs `binary args...`, with its log in `log_dir/quiver.log`, and waits for the `ready`
    /// line it prints once it listens.
    pub fn start(binary: &Path, args: &[&str], log_dir: &Path) -> anyhow::Result<QuiverProcess> {
        Self::start_with_env(binary, args, log_dir, &[])
    }

    /// `start` with more environment variables (`FaultShim::env`, say).
    pub fn start_with_env(
        binary: &Path,
        args: &[&str],
        log_dir: &Path,
        env: &[(&str, OsString)],
    ) -> anyhow::Result<QuiverProcess> {
        std::fs::create_dir_all(log_dir)?;
        let log_path = log_dir.join("quiver.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)?;
        let mut child = Command::new(binary)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .env("QUIVER_LOG", "info")
            .envs(env.iter().map(|(key, value)| (key, value)))
            .spawn()
            .with_context(|| format!("cannot start {}", binary.display()))?;
        let stdout = child.stdout.take().context("no stdout")?;
        let (lines, received) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if lines.send(line).is_err() {
                    return;
                }
            }
        });
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match received.recv_timeout(left) {
                Ok(line) if line.starts_with("ready") => {
                    let started = parse_ready(&line)?;
                    return Ok(QuiverProcess {
                        child: Some(child),
                        started,
                        log_path,
                    });
                }
                Ok(_) => continue,
                Err(_) => {
                    let _ = child.kill();
                    let status = child.wait().ok();
                    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                    bail!("quiver {args:?} did not become ready (exit: {status:?}); log:\n{log}");
                }
            }
        }
    }

    /// The process's resident memory (VmRSS) in bytes, from /proc.
    pub fn rss_bytes(&self) -> anyhow::Result<u64> {
        let child = self.child.as_ref().context("the process has ended")?;
        let status = std::fs::read_to_string(format!("/proc/{}/status", child.id()))?;
        let line = status
            .lines()
            .find(|line| line.starts_with("VmRSS:"))
            .context("no VmRSS line")?;
        let kib: u64 = line
            .split_whitespace()
            .nth(1)
            .context("no VmRSS value")?
            .parse()?;
        Ok(kib * 1024)
    }

    pub fn broker(&self) -> SocketAddr {
        self.started.broker.expect("this process runs no broker")
    }

    /// The broker's gRPC port.
    pub fn grpc(&self) -> SocketAddr {
        self.started
            .grpc
            .expect("this process serves no gRPC clients")
    }

    pub fn controller(&self) -> SocketAddr {
        self.started
            .controller
            .expect("this process runs no controller")
    }

    pub fn namesrv(&self) -> SocketAddr {
        self.started
            .namesrv
            .expect("this process runs no name server")
    }

    /// SIGKILL: the process gets no chance to flush or clean up, as in a crash.
    pub fn kill9(&mut self) -> anyhow::Result<()> {
        let mut child = self.child.take().context("already stopped")?;
        child.kill()?;
        child.wait()?;
        Ok(())
    }

    /// SIGSTOP: the process keeps its sockets open and answers nothing, as a stalled host.
    pub fn pause(&self) -> anyhow::Result<()> {
        let child = self.child.as_ref().context("the process has ended")?;
        signal(child.id(), libc::SIGSTOP)
    }

    /// SIGCONT after `pause`.
    pub fn resume(&self) -> anyhow::Result<()> {
        let child = self.child.as_ref().context("the process has ended")?;
        signal(child.id(), libc::SIGCONT)
    }

    /// SIGTERM, then waits for a clean exit.
    pub fn terminate(&mut self) -> anyhow::Result<ExitStatus> {
        let mut child = self.child.take().context("already stopped")?;
        terminate_pid(child.id())?;
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            if let Some(status) = child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                bail!("quiver did not stop within {STOP_TIMEOUT:?} of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }
}

/// Sends SIGTERM to `pid`, a child the caller spawned and has not reaped yet.
pub fn terminate_pid(pid: u32) -> anyhow::Result<()> {
    signal(pid, libc::SIGTERM)
}

/// Sends SIGINT to `pid`, as Ctrl-C would: a child the caller spawned and has not reaped yet.
pub fn interrupt_pid(pid: u32) -> anyhow::Result<()> {
    signal(pid, libc::SIGINT)
}

/// kill(2) of `pid`, a child the caller spawned and has not reaped yet.
fn signal(pid: u32, signal: libc::c_int) -> anyhow::Result<()> {
    let pid = libc::pid_t::try_from(pid).context("pid out of range")?;
    // SAFETY: kill(2) with a pid the caller spawned and still owns (not yet reaped), and a
    // valid signal.
    let rc = unsafe { libc::kill(pid, signal) };
    if rc != 0 {
        bail!("kill({signal}) failed: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

impl Drop for QuiverProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn parse_ready(line: &str) -> anyhow::Result<Started> {
    let mut started = Started {
        namesrv: None,
        broker: None,
        controller: None,
        grpc: None,
    };
    for word in line.split_whitespace().skip(1) {
        let (key, value) = word
            .split_once('=')
            .ok_or_else(|| anyhow!("bad ready line {line:?}"))?;
        let addr: SocketAddr = value
            .parse()
            .with_context(|| format!("bad address in {line:?}"))?;
        match key {
            "namesrv" => started.namesrv = Some(addr),
            "broker" => started.broker = Some(addr),
            "controller" => started.controller = Some(addr),
            "grpc" => started.grpc = Some(addr),
            _ => {}
        }
    }
    Ok(started)
}
