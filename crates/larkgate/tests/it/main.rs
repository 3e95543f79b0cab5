//! Tests of the `larkgate` command, run as a real process.

mod capabilities;
