//! Real I/O faults for tests: builds the `LD_PRELOAD` shim in `shim/io_faults.c` with the
//! system C compiler, starts processes under it, and turns EIO or ENOSPC on and off for files
//! under a folder while they run (see the shim's header for the rules).
//!
//! The store's own tests include this file by path (`#[path]`): the store cannot depend on this
//! crate, which depends on it. So it uses the standard library only.
#![allow(dead_code)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The variable that names the control file; the shim does nothing without it.
pub const CONTROL_ENV: &str = "QUIVER_IO_FAULTS";
const SOURCE: &str = include_str!("../shim/io_faults.c");

/// The built shim and its control file.
#[derive(Debug, Clone)]
pub struct FaultShim {
    library: PathBuf,
    control: PathBuf,
}

impl FaultShim {
    /// Builds the shim into `dir` with `cc`; the reason when it cannot (no compiler, say).
    pub fn build(dir: &Path) -> Result<FaultShim, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let source = dir.join("io_faults.c");
        std::fs::write(&source, SOURCE).map_err(|e| format!("{}: {e}", source.display()))?;
        let library = dir.join("libquiver_io_faults.so");
        let output = Command::new("cc")
            .args(["-shared", "-fPIC", "-O2", "-o"])
            .arg(&library)
            .arg(&source)
            .arg("-ldl")
            .output()
            .map_err(|e| {
                format!("cannot run cc (a C compiler is needed to build the shim): {e}")
            })?;
        if !output.status.success() {
            return Err(format!(
                "cc could not build the shim: {}",
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        Ok(FaultShim {
            library,
            control: dir.join("faults"),
        })
    }

    /// In a process started with `env`: the shim it runs under, if it does.
    pub fn from_env() -> Option<FaultShim> {
        let control = PathBuf::from(std::env::var_os(CONTROL_ENV)?);
        let library = PathBuf::from(std::env::var_os("LD_PRELOAD")?);
        Some(FaultShim { library, control })
    }

    /// The variables that put a process under the shim.
    pub fn env(&self) -> Vec<(&'static str, OsString)> {
        vec![
            ("LD_PRELOAD", self.library.clone().into_os_string()),
            (CONTROL_ENV, self.control.clone().into_os_string()),
        ]
    }

    /// From now on, `ops` (`write`, `fsync`, `allocate`, `rename`, `all`, comma-separated) on
    /// files at or under `under` fail with `errno` (`EIO`, `ENOSPC`), replacing earlier rules.
    pub fn fail(&self, errno: &str, ops: &str, under: &Path) {
        self.fail_all(&[(errno, ops, under)]);
    }

    /// As `fail`, with several rules; the first that matches a call decides.
    pub fn fail_all(&self, rules: &[(&str, &str, &Path)]) {
        let text: String = rules
            .iter()
            .map(|(errno, ops, under)| {
                // The shim sees the paths /proc resolves, which have no symbolic links.
                let under = std::fs::canonicalize(under).unwrap_or_else(|_| under.to_path_buf());
                format!("{errno} {ops} {}\n", under.display())
            })
            .collect();
        // Renamed into place, so the shim never reads half a rule.
        let mut tmp = self.control.clone().into_os_string();
        tmp.push(".tmp");
        std::fs::write(&tmp, text).expect("write the fault rules");
        std::fs::rename(&tmp, &self.control).expect("install the fault rules");
    }

    /// No more faults.
    pub fn clear(&self) {
        match std::fs::remove_file(&self.control) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => panic!("cannot remove {}: {e}", self.control.display()),
        }
    }

    /// For a test of this process's own code: in the parent, builds the shim in `dir`, runs
    /// the test binary again for `test` alone (its full name, `module::name`) under it,
    /// fails if that run fails, and returns None; in that child run, returns the shim, and the
    /// caller goes on with the test's body. None (with a message) where no shim can be built.
    pub fn rerun_under_shim(test: &str, dir: &Path) -> Option<FaultShim> {
        if let Some(shim) = FaultShim::from_env() {
            return Some(shim);
        }
        let shim = match FaultShim::build(dir) {
            Ok(shim) => shim,
            Err(reason) => {
                eprintln!("skipped {test}: {reason}");
                return None;
            }
        };
        let exe = std::env::current_exe().expect("the test binary's path");
        let output = Command::new(exe)
            .args([test, "--exact", "--nocapture", "--test-threads=1"])
            .envs(shim.env())
            .output()
            .expect("run the test binary again");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "{test} failed under the I/O fault shim:\n{stdout}\n{stderr}"
        );
        assert!(
            stdout.contains("1 passed"),
            "{test} did not run under the shim (is the name exact?):\n{stdout}"
        );
        None
    }
}
