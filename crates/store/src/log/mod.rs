//! The CommitLog.

pub mod commitlog;
pub mod damaged;
pub mod prealloc;
