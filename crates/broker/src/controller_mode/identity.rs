//! The `brokerIdentity` files: the id a controller gave this broker (`cluster#name#id`), and,
//! while it applies for one, the id with its check code (`brokerIdentity-temp`). Written whole
//! and fsynced through the store's writer of small files; read through a bound.

use std::path::{Path, PathBuf};

use super::ControllerError;

pub const IDENTITY_FILE: &str = "brokerIdentity";
pub const IDENTITY_TEMP_FILE: &str = "brokerIdentity-temp";
/// A larger identity file is refused unread: an honest one is a cluster name, a broker name
/// (127 bytes each at most), an id and a check code.
const IDENTITY_FILE_BYTES_MAX: u64 = 1024;

/// What `brokerIdentity` (and, with the check code, `brokerIdentity-temp`) says, as
/// `cluster#name#id[#checkCode]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub cluster: String,
    pub broker_name: String,
    pub broker_id: i64,
    pub check_code: Option<String>,
}

impl Identity {
    pub fn encode(&self) -> String {
        let base = format!("{}#{}#{}", self.cluster, self.broker_name, self.broker_id);
        match &self.check_code {
            Some(code) => format!("{base}#{code}"),
            None => base,
        }
    }

    /// Parses a file's text; `temp` files carry the check code. Every byte is checked.
    pub fn decode(text: &str, temp: bool) -> Result<Identity, String> {
        let parts: Vec<&str> = text.trim_end().split('#').collect();
        let wanted = if temp { 4 } else { 3 };
        if parts.len() != wanted || parts.iter().any(|part| part.is_empty()) {
            return Err(format!("{wanted} non-empty '#'-separated fields expected"));
        }
        let broker_id: i64 = parts[2]
            .parse()
            .map_err(|_| format!("broker id {:?} is not a number", parts[2]))?;
        if broker_id < 1 {
            return Err(format!("broker id {broker_id} is below 1"));
        }
        Ok(Identity {
            cluster: parts[0].to_string(),
            broker_name: parts[1].to_string(),
            broker_id,
            check_code: temp.then(|| parts[3].to_string()),
        })
    }
}

pub(super) fn read_identity(path: &Path, temp: bool) -> Result<Option<Identity>, ControllerError> {
    let problem = |problem: String| ControllerError::Identity {
        path: path.display().to_string(),
        problem,
    };
    let metadata = match std::fs::metadata(path) {
        Ok(metadata) => metadata,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(problem(e.to_string())),
    };
    if metadata.len() > IDENTITY_FILE_BYTES_MAX {
        return Err(problem(format!(
            "larger than {IDENTITY_FILE_BYTES_MAX} bytes"
        )));
    }
    let bytes = std::fs::read(path).map_err(|e| problem(e.to_string()))?;
    let text = String::from_utf8(bytes).map_err(|_| problem("not UTF-8".into()))?;
    Identity::decode(&text, temp).map(Some).map_err(problem)
}

pub(super) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ControllerError> + Send + 'static,
) -> Result<T, ControllerError> {
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result,
        Err(error) => Err(ControllerError::Identity {
            path: "blocking task".into(),
            problem: error.to_string(),
        }),
    }
}

/// Writes an identity file whole, fsynced, through the store's one writer of small files.
pub(super) async fn write_identity(path: PathBuf, text: String) -> Result<(), ControllerError> {
    blocking(move || {
        quiver_store::durable_file::replace_file(&path, text.as_bytes()).map_err(|e| {
            ControllerError::Identity {
                path: path.display().to_string(),
                problem: e.to_string(),
            }
        })
    })
    .await
}

pub(super) fn remove_identity(path: &Path) -> Result<(), ControllerError> {
    match std::fs::remove_file(path) {
        Ok(()) => quiver_store::durable_file::sync_parent_dir(path).map_err(|e| {
            ControllerError::Identity {
                path: path.display().to_string(),
                problem: e.to_string(),
            }
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(ControllerError::Identity {
            path: path.display().to_string(),
            problem: e.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_files_read_as_rocketmq_writes_them() {
        let identity = Identity::decode("DefaultCluster#broker-a#1", false).unwrap();
        assert_eq!(identity.broker_id, 1);
        assert_eq!(identity.encode(), "DefaultCluster#broker-a#1");
        let temp = Identity::decode(
            "DefaultCluster#broker-a#2#127.0.0.1:30921;1764200000000",
            true,
        )
        .unwrap();
        assert_eq!(
            temp.check_code.as_deref(),
            Some("127.0.0.1:30921;1764200000000")
        );
        assert_eq!(
            temp.encode(),
            "DefaultCluster#broker-a#2#127.0.0.1:30921;1764200000000"
        );
    }

    #[test]
    fn hostile_identity_files_are_refused() {
        for text in ["", "a#b", "a#b#x", "a#b#0", "a##1", "a#b#1#", "a#b#-3"] {
            assert!(Identity::decode(text, false).is_err(), "{text:?}");
        }
        assert!(Identity::decode("a#b#1", true).is_err());
    }

    #[test]
    fn an_identity_file_too_large_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(IDENTITY_FILE);
        std::fs::write(&path, vec![b'a'; 2048]).unwrap();
        assert!(read_identity(&path, false).is_err());
        assert!(read_identity(&dir.path().join("missing"), false)
            .unwrap()
            .is_none());
    }
}
