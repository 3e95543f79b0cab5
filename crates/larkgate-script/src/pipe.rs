//! The parent's ends of a worker's pipes as blocking files, every read and write bounded by
//! the run's deadline.
//!
//! Why blocking I/O: a tool call from a worker is a frame up the pipe and a frame back. Read
//! through the async runtime, each frame also pays an event-loop wake-up, which made the worker
//! add about twice a bare pipe round trip per call; read by a thread blocked on the pipe, it
//! adds about one round trip (see the script benchmark).
//!
//! Threat model: the worker runs a hostile script and may stop reading or writing at any time
//! (stopped, looping in native code, or replaced by a forged program in tests). Nothing here may
//! wait past the run's deadline: both descriptors are non-blocking and every wait is a `poll`
//! with the time left. A peer that hangs up makes reads end (EOF) and writes fail (EPIPE).

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::time::Instant;

use rustix::event::{PollFd, PollFlags, Timespec, poll};

/// One end of a pipe whose reads or writes give up at `deadline` with
/// [`io::ErrorKind::TimedOut`].
pub(crate) struct DeadlinePipe {
    file: File,
    deadline: Instant,
}

impl DeadlinePipe {
    /// Takes over `fd`, making it non-blocking.
    pub(crate) fn new(fd: OwnedFd, deadline: Instant) -> io::Result<Self> {
        rustix::io::ioctl_fionbio(&fd, true)?;
        Ok(DeadlinePipe {
            file: fd.into(),
            deadline,
        })
    }

    /// Runs `op` until it does not report `WouldBlock`, waiting for `ready` in between.
    fn retry<T>(
        &mut self,
        ready: PollFlags,
        mut op: impl FnMut(&mut File) -> io::Result<T>,
    ) -> io::Result<T> {
        loop {
            match op(&mut self.file) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.wait(ready)?,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => return other,
            }
        }
    }

    /// Waits until the pipe is `ready` (or hung up), or the deadline passes.
    fn wait(&self, ready: PollFlags) -> io::Result<()> {
        loop {
            let left = self.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the run's deadline passed",
                ));
            }
            let timeout = Timespec::try_from(left).map_err(io::Error::other)?;
            let mut fds = [PollFd::new(&self.file, ready)];
            match poll(&mut fds, Some(&timeout)) {
                Ok(0) | Err(rustix::io::Errno::INTR) => {}
                Ok(_) => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        }
    }
}

impl Read for DeadlinePipe {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // The parent reads only when it expects an answer that is rarely there yet: wait
        // first rather than try a read that would fail with `WouldBlock`.
        self.wait(PollFlags::IN)?;
        self.retry(PollFlags::IN, |file| file.read(buf))
    }
}

impl Write for DeadlinePipe {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.retry(PollFlags::OUT, |file| file.write(buf))
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn pipe(deadline: Instant) -> (DeadlinePipe, DeadlinePipe) {
        let (reader, writer) = rustix::pipe::pipe().unwrap();
        (
            DeadlinePipe::new(reader, deadline).unwrap(),
            DeadlinePipe::new(writer, deadline).unwrap(),
        )
    }

    #[test]
    fn data_passes_and_a_hang_up_ends_the_read() {
        let (mut reader, mut writer) = pipe(Instant::now() + Duration::from_secs(5));
        writer.write_all(b"frame").unwrap();
        drop(writer);
        let mut text = String::new();
        reader.read_to_string(&mut text).unwrap();
        assert_eq!(text, "frame");
    }

    #[test]
    fn a_silent_peer_cannot_hold_a_read_past_the_deadline() {
        let (mut reader, _writer) = pipe(Instant::now() + Duration::from_millis(50));
        let error = reader.read(&mut [0u8; 4]).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
    }

    #[test]
    fn a_peer_that_stops_reading_cannot_hold_a_write_past_the_deadline() {
        let (_reader, mut writer) = pipe(Instant::now() + Duration::from_millis(50));
        // Far more than a pipe buffer holds.
        let error = writer.write_all(&vec![0u8; 4 << 20]).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
    }

    #[test]
    fn a_write_to_a_closed_pipe_fails_at_once() {
        let (reader, mut writer) = pipe(Instant::now() + Duration::from_secs(5));
        drop(reader);
        let error = writer.write_all(b"x").unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::BrokenPipe);
    }
}
