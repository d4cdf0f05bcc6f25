//! `quiver bench` run as a user runs it, for the bench's end-to-end tests.

use std::process::{Command, Output};

/// Runs `quiver bench ARGS` to the end.
pub fn bench(args: &[&str]) -> Output {
    Command::new(super::binary())
        .arg("bench")
        .args(args)
        .output()
        .expect("run quiver bench")
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The run failed with exit code 2 and `message` in its standard error.
#[track_caller]
pub fn assert_fails(output: &Output, message: &str) {
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "stderr: {stderr}");
    assert!(
        stderr.contains(message),
        "expected {message:?} in: {stderr}"
    );
}
