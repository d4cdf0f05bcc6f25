//! Records a read hands out where they are, in the CommitLog's page cache, for the writer of
//! a connection to send with `sendfile(2)` instead of copying them through a buffer (what
//! RocketMQ does with `transferMsgByHeap=false`).

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::Arc;

/// Records read by `sendfile` would cost more in checks than a copy saves below this average
/// size: each record's header is read on its own to check it, one small `pread` per record,
/// where a copied run is read with one call.
pub const SEND_FROM_FILE_RECORD_BYTES_MIN: u64 = 16 * 1024;

/// Bytes of a CommitLog segment, checked against their ConsumeQueue entries, for a connection
/// to send from the file. It holds the segment open: a segment retention removes meanwhile is
/// still sent whole.
#[derive(Clone, Debug)]
pub struct FileSlice {
    /// Where the slice goes in the read's body: before `bytes[at..]`.
    pub at: usize,
    file: Arc<File>,
    offset: u64,
    len: u64,
}

impl FileSlice {
    pub(crate) fn new(at: usize, file: Arc<File>, offset: u64, len: u64) -> FileSlice {
        FileSlice {
            at,
            file,
            offset,
            len,
        }
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Sends what follows the slice's first `sent` bytes to `socket`, as much as it takes now,
    /// and returns how much that was. With a non-blocking socket, `WouldBlock` means try again
    /// once it is writable. A file that ends before the slice does (cut short under the
    /// reader) is an `UnexpectedEof`: the frame the slice belongs to cannot be finished.
    pub fn send(&self, socket: BorrowedFd<'_>, sent: u64) -> io::Result<usize> {
        let left = self.len.saturating_sub(sent);
        if left == 0 {
            return Ok(0);
        }
        let mut offset = libc::off_t::try_from(self.offset + sent)
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // Linux sends at most 0x7ffff000 bytes per call.
        let count = left.min(0x7fff_f000) as usize;
        // SAFETY: both descriptors are open for the whole call (`socket` is borrowed, the file
        // is held by `self.file`), `offset` is a live local the kernel writes back to, and
        // sendfile touches no other memory of ours.
        let sent_now = unsafe {
            libc::sendfile(
                socket.as_raw_fd(),
                self.file.as_raw_fd(),
                &mut offset,
                count,
            )
        };
        match sent_now {
            -1 => Err(io::Error::last_os_error()),
            0 => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the CommitLog segment ends before the records a pull is sending",
            )),
            n => Ok(n as usize),
        }
    }

    /// The slice's bytes, read with `pread`: for tests and for callers that need them in
    /// memory after all.
    pub fn read(&self) -> io::Result<Vec<u8>> {
        use std::os::unix::fs::FileExt;
        let mut bytes = vec![0; self.len as usize];
        self.file.read_exact_at(&mut bytes, self.offset)?;
        Ok(bytes)
    }
}

/// A read's whole body: `bytes` with each slice of `files` read in at its place.
pub fn assemble(bytes: &[u8], files: &[FileSlice]) -> io::Result<Vec<u8>> {
    let total = bytes.len() + files.iter().map(|f| f.len as usize).sum::<usize>();
    let mut body = Vec::with_capacity(total);
    let mut copied = 0;
    for slice in files {
        body.extend_from_slice(&bytes[copied..slice.at]);
        copied = slice.at;
        body.extend_from_slice(&slice.read()?);
    }
    body.extend_from_slice(&bytes[copied..]);
    Ok(body)
}
