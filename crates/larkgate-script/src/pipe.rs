//! The pipes between a worker and its parent: the one frame codec both sides speak
//! ([`write_frame`], [`read_frame`]: a 4-byte big-endian length, then JSON, at most
//! [`MAX_FRAME`] bytes), and the parent's ends of the pipes as blocking files, every read and
//! write bounded by the run's deadline.
//!
//! Why blocking I/O: a tool call from a worker is a frame up the pipe and a frame back. Read
//! through the async runtime, each frame also pays an event-loop wake-up, which made the worker
//! add about twice a bare pipe round trip per call; read by a thread blocked on the pipe, it
//! adds about one round trip. Both ends also try for a frame for a short, adaptive while
//! before they sleep ([`Spin`]), which takes most of the remaining scheduler wake-ups out of a
//! call (see the script benchmark).
//!
//! Threat model: the worker runs a hostile script and may stop reading or writing at any time
//! (stopped, looping in native code, or replaced by a forged program in tests). Nothing here may
//! wait past the run's deadline: both descriptors are non-blocking and every wait is a `poll`
//! with the time left. A peer that hangs up makes reads end (EOF) and writes fail (EPIPE).

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec, poll};
use serde::{Deserialize, Serialize};

/// The largest frame either side writes or accepts.
pub const MAX_FRAME: usize = 16 * 1024 * 1024;

/// Why a frame could not be read or written.
#[derive(Debug)]
pub enum FrameError {
    /// The other end is closed (it exited or died).
    Closed,
    /// The run's deadline passed while waiting on the other end.
    Elapsed,
    /// A frame over [`MAX_FRAME`], of this many bytes.
    TooLarge(usize),
    /// Not a frame of the protocol.
    Garbled(String),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::Closed => f.write_str("the other end of the pipe is closed"),
            FrameError::Elapsed => f.write_str("the run's deadline passed"),
            FrameError::TooLarge(length) => write!(
                f,
                "a frame of {length} bytes exceeds the {MAX_FRAME}-byte pipe frame limit"
            ),
            FrameError::Garbled(why) => write!(f, "not a frame of the protocol: {why}"),
        }
    }
}

impl std::error::Error for FrameError {}

impl FrameError {
    fn from_io(error: io::Error) -> Self {
        if error.kind() == io::ErrorKind::TimedOut {
            FrameError::Elapsed
        } else {
            FrameError::Closed
        }
    }
}

/// Writes one frame, in one write (one system call, and the reader never wakes for half a
/// frame). A message over [`MAX_FRAME`] is refused before anything is written, since the
/// other side would refuse it.
pub fn write_frame<T: Serialize>(out: &mut impl Write, message: &T) -> Result<(), FrameError> {
    let mut frame = vec![0u8; 4];
    serde_json::to_writer(&mut frame, message).map_err(|e| FrameError::Garbled(e.to_string()))?;
    let length = frame.len() - 4;
    if length > MAX_FRAME {
        return Err(FrameError::TooLarge(length));
    }
    frame[..4].copy_from_slice(&(length as u32).to_be_bytes());
    out.write_all(&frame).map_err(FrameError::from_io)?;
    out.flush().map_err(FrameError::from_io)
}

/// Reads one frame, refusing one over [`MAX_FRAME`] before reading its body. The worker runs
/// the author's code, so its bytes are untrusted: whatever they are, this returns a frame or a
/// [`FrameError`] (fuzzed by `fuzz/fuzz_targets/worker_frames.rs`).
pub fn read_frame<T: for<'de> Deserialize<'de>>(input: &mut impl Read) -> Result<T, FrameError> {
    let mut length = [0u8; 4];
    input.read_exact(&mut length).map_err(FrameError::from_io)?;
    let length = u32::from_be_bytes(length) as usize;
    if length > MAX_FRAME {
        return Err(FrameError::TooLarge(length));
    }
    let mut body = vec![0; length];
    input.read_exact(&mut body).map_err(FrameError::from_io)?;
    serde_json::from_slice(&body).map_err(|e| FrameError::Garbled(e.to_string()))
}

/// How long the parent keeps trying for a worker's next frame before it sleeps in `poll`. A
/// script's next call usually follows its last answer within microseconds; a reader that went
/// to sleep pays the scheduler's wake-up on top, which on small machines is as much as the
/// pipe round trip itself.
pub(crate) const SPIN: Duration = Duration::from_micros(50);

/// How long the worker keeps trying for a tool call's answer before it sleeps: longer than
/// [`SPIN`], because an answer takes a whole trip through the pipeline (tens of microseconds).
pub(crate) const WORKER_SPIN: Duration = Duration::from_micros(200);

/// A reader's spin budget, adapted to how frames have been arriving. When a spin ends
/// empty-handed the reader sleeps; when it wakes, [`Spin::woke`] asks whether a longer spin
/// would have caught the frame (it came within twice the maximum): then the budget is the
/// maximum again; otherwise it halves. So a loaded machine or a slow tool soon stops the
/// spinning (it would only take CPU from whoever produces the frame), and it comes back as soon
/// as frames arrive quickly again.
#[derive(Debug)]
pub(crate) struct Spin {
    max: Duration,
    current: Duration,
    /// When the last spin that caught nothing began.
    missed: Option<Instant>,
}

impl Spin {
    /// A budget of at most `max`.
    pub(crate) fn new(max: Duration) -> Self {
        Spin {
            max,
            current: max,
            missed: None,
        }
    }

    /// Tries a non-blocking `read` of `file` until it returns something other than
    /// `WouldBlock` or the budget has passed (`None`: nothing yet; wait, then call
    /// [`Spin::woke`]).
    pub(crate) fn read(&mut self, file: &mut File, buf: &mut [u8]) -> Option<io::Result<usize>> {
        let started = Instant::now();
        let until = started + self.current;
        loop {
            match file.read(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if Instant::now() >= until {
                        self.missed = Some(started);
                        return None;
                    }
                    // Give the core to whoever is producing the frame, if they are waiting
                    // for one; on an idle core this returns at once.
                    std::thread::yield_now();
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => return Some(other),
            }
        }
    }

    /// After a missed spin, the wait is over: adapt the budget to how long the frame took.
    pub(crate) fn woke(&mut self) {
        if let Some(started) = self.missed.take() {
            self.adapt(started.elapsed());
        }
    }

    /// The budget after a frame that took `waited` from the start of a missed spin: back to
    /// the most when a longer spin would have caught it, else half.
    fn adapt(&mut self, waited: Duration) {
        self.current = if waited <= self.max * 2 {
            self.max
        } else {
            self.current / 2
        };
    }
}

/// The worker's end of its input pipe: reads spin (up to [`WORKER_SPIN`]), then sleep in
/// `poll` with no deadline (the parent kills a worker that outlives its run).
pub(crate) struct SpinReader {
    file: File,
    spin: Spin,
}

impl SpinReader {
    /// Takes over `fd`, making it non-blocking.
    pub(crate) fn new(fd: OwnedFd) -> io::Result<Self> {
        rustix::io::ioctl_fionbio(&fd, true)?;
        Ok(SpinReader {
            file: fd.into(),
            spin: Spin::new(WORKER_SPIN),
        })
    }
}

impl Read for SpinReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if let Some(result) = self.spin.read(&mut self.file, buf) {
                return result;
            }
            let mut fds = [PollFd::new(&self.file, PollFlags::IN)];
            match poll(&mut fds, None) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
            self.spin.woke();
            // Woken: the frame is there (or the pipe hung up); read it.
            match self.file.read(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => return other,
            }
        }
    }
}

/// One end of a pipe whose reads or writes give up at `deadline` with
/// [`io::ErrorKind::TimedOut`].
pub(crate) struct DeadlinePipe {
    file: File,
    deadline: Instant,
    spin: Spin,
}

impl DeadlinePipe {
    /// Takes over `fd`, making it non-blocking.
    pub(crate) fn new(fd: OwnedFd, deadline: Instant) -> io::Result<Self> {
        rustix::io::ioctl_fionbio(&fd, true)?;
        Ok(DeadlinePipe {
            file: fd.into(),
            deadline,
            spin: Spin::new(SPIN),
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
        // The parent reads when it expects the worker's next frame: usually within the spin.
        if let Some(result) = self.spin.read(&mut self.file, buf) {
            return result;
        }
        let waited = self.wait(PollFlags::IN);
        self.spin.woke();
        waited?;
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

    #[test]
    fn a_frame_reads_back_as_written_and_nothing_over_the_limit_is_written() {
        let mut out = Vec::new();
        write_frame(&mut out, &serde_json::json!({"call": "kv_get", "n": 1})).unwrap();
        assert_eq!(&out[..4], &((out.len() - 4) as u32).to_be_bytes());
        let back: serde_json::Value = read_frame(&mut out.as_slice()).unwrap();
        assert_eq!(back, serde_json::json!({"call": "kv_get", "n": 1}));

        let mut out = Vec::new();
        let huge = "x".repeat(MAX_FRAME);
        match write_frame(&mut out, &huge) {
            Err(FrameError::TooLarge(length)) => assert_eq!(length, MAX_FRAME + 2),
            other => panic!("{other:?}"),
        }
        assert!(
            out.is_empty(),
            "a frame the reader would refuse was written"
        );
    }

    #[test]
    fn hostile_frames_are_refused_before_their_body_is_read() {
        let cases: [(&[u8], &str); 4] = [
            // A declared length over the limit, and no body: refused without waiting for one.
            (&((MAX_FRAME + 1) as u32).to_be_bytes(), "TooLarge"),
            (&[0, 0, 0, 5, b'{', b'"'], "Closed"),
            (&[0, 0, 0, 3, b'n', b'o', b'!'], "Garbled"),
            (&[0, 0], "Closed"),
        ];
        for (bytes, expected) in cases {
            let error = read_frame::<serde_json::Value>(&mut &bytes[..]).unwrap_err();
            assert!(
                format!("{error:?}").starts_with(expected),
                "{bytes:?}: {error:?}"
            );
        }
        let message = FrameError::TooLarge(MAX_FRAME + 1).to_string();
        assert!(message.contains("pipe frame limit"), "{message}");
    }

    fn pipe(deadline: Instant) -> (DeadlinePipe, DeadlinePipe) {
        let (reader, writer) = rustix::pipe::pipe().unwrap();
        (
            DeadlinePipe::new(reader, deadline).unwrap(),
            DeadlinePipe::new(writer, deadline).unwrap(),
        )
    }

    #[test]
    fn the_spin_budget_shrinks_while_frames_are_slow_and_comes_back_when_they_are_quick() {
        let (reader, writer) = rustix::pipe::pipe().unwrap();
        rustix::io::ioctl_fionbio(&reader, true).unwrap();
        let (mut reader, mut writer): (File, File) = (reader.into(), writer.into());
        let max = Duration::from_micros(2048);
        let mut spin = Spin::new(max);
        let mut buf = [0u8; 4];
        // Slow frames: each wait is far longer than the budget, which halves each time. (The
        // waits are given, not slept: how long a loaded machine takes must not decide.)
        for expected in [1024, 512, 256] {
            assert!(spin.read(&mut reader, &mut buf).is_none());
            assert!(spin.missed.take().is_some(), "a missed spin is noted");
            spin.adapt(Duration::from_millis(20));
            assert_eq!(spin.current, Duration::from_micros(expected));
        }
        // A frame that came just after a missed spin: a longer spin would have caught it.
        assert!(spin.read(&mut reader, &mut buf).is_none());
        assert!(spin.missed.take().is_some());
        spin.adapt(Duration::from_micros(100));
        assert_eq!(spin.current, max);
        // `woke` without a missed spin changes nothing.
        spin.woke();
        assert_eq!(spin.current, max);
        // A frame that is there is read within the spin, and the budget stays.
        writer.write_all(b"x").unwrap();
        assert_eq!(spin.read(&mut reader, &mut buf).unwrap().unwrap(), 1);
        assert_eq!(spin.current, max);
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
