//! What can be wrong with a frame's bytes: the frame's own prefix or either header encoding.
//! Its own module because the frame and the header codecs both return it, and the frame calls
//! the header codecs.

/// Why a frame could not be decoded or encoded. After a decode error the stream is unusable.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("frame of {frame_bytes} bytes exceeds the limit of {limit_bytes}")]
    TooLarge {
        frame_bytes: usize,
        limit_bytes: usize,
    },
    #[error("frame length {0} is too small to hold a header")]
    TooSmall(i64),
    #[error("header length {header_bytes} does not fit in frame of {frame_bytes} bytes")]
    HeaderOverrun {
        header_bytes: usize,
        frame_bytes: usize,
    },
    #[error("unknown serialize type {0}")]
    UnknownEncoding(u8),
    #[error("bad JSON header: {0}")]
    BadJsonHeader(String),
    #[error("bad binary header: {0}")]
    BadBinaryHeader(String),
}
