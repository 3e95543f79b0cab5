//! Arbitrary bytes from a script worker through the parent's frame decoder.
//!
//! The worker runs the author's code, so whatever it writes is untrusted. Decoding must never
//! panic nor read past the declared length; a frame it accepts encodes back to one that decodes
//! to the same message.

#![no_main]

use larkgate_script::parent::read_frame;
use larkgate_script::worker::{FromWorker, write_frame};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut input = data;
    let Ok(message) = read_frame::<FromWorker>(&mut input) else {
        return;
    };
    let declared = u32::from_be_bytes(data[..4].try_into().unwrap()) as usize;
    assert_eq!(
        input.len(),
        data.len() - 4 - declared,
        "read past its frame"
    );
    let mut again = Vec::new();
    write_frame(&mut again, &message).unwrap();
    let back = read_frame::<FromWorker>(&mut again.as_slice()).unwrap();
    assert_eq!(
        serde_json::to_value(&back).unwrap(),
        serde_json::to_value(&message).unwrap()
    );
});
