//! Budgets are checked before containers are allocated: a 10^7-element source against
//! `max_nodes = 1000` fails with a peak allocation far below what the source would need.
//!
//! A counting global allocator tracks, per thread, the bytes currently allocated and their
//! peak, so tests running in parallel on other threads do not disturb the measurement.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use larkgate_binding::{
    Error, LimitExceeded, Limits, Plan, Value, from_json, from_json_slice, from_starlark,
    to_starlark,
};
use schemars::JsonSchema;
use serde::Serialize;
use starlark::values::Heap;
use starlark::values::list::AllocList;

struct Counting;

thread_local! {
    static CURRENT: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn record(delta: isize) {
    // `try_with`: the thread's counters may already be gone while it shuts down.
    let _ = CURRENT.try_with(|current| {
        let now = current.get() + delta;
        current.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

// SAFETY: every method forwards to `System` unchanged and only updates thread-local counters,
// which never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        record(layout.size() as isize);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        record(-(layout.size() as isize));
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        record(layout.size() as isize);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        record(new_size as isize - layout.size() as isize);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f` and returns its result with the peak number of bytes it had allocated at once.
fn peak_of<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let base = CURRENT.with(Cell::get);
    PEAK.with(|p| p.set(base));
    let result = f();
    let peak = PEAK.with(Cell::get) - base;
    (result, peak.max(0) as usize)
}

const TEN_MILLION: usize = 10_000_000;
const ONE_MIB: usize = 1024 * 1024;

fn small() -> Limits {
    Limits::new(64, 1_000, ONE_MIB).unwrap()
}

fn assert_node_limit(result: Result<impl std::fmt::Debug, Error>) {
    match result {
        Err(Error::ValueLimit {
            limit: LimitExceeded::Nodes { max: 1_000 },
            ..
        }) => {}
        other => panic!("expected the node limit, got {other:?}"),
    }
}

#[test]
fn a_huge_parsed_json_array_fails_before_its_copy_exists() {
    let source = serde_json::Value::Array(vec![serde_json::Value::Null; TEN_MILLION]);
    let (result, peak) = peak_of(|| from_json(&source, small()));
    assert_node_limit(result);
    assert!(peak < ONE_MIB, "peak allocation {peak} bytes");
}

#[test]
fn a_huge_json_text_fails_while_it_is_parsed() {
    let mut text = String::with_capacity(2 * TEN_MILLION + 2);
    text.push('[');
    for i in 0..TEN_MILLION {
        text.push_str(if i == 0 { "0" } else { ",0" });
    }
    text.push(']');
    let (result, peak) = peak_of(|| from_json_slice(text.as_bytes(), small()));
    assert_node_limit(result);
    assert!(peak < ONE_MIB, "peak allocation {peak} bytes");
}

#[test]
fn a_huge_starlark_list_fails_before_its_copy_exists() {
    Heap::temp(|heap| {
        let list = heap.alloc(AllocList(vec![
            starlark::values::Value::new_none();
            TEN_MILLION
        ]));
        let (result, peak) = peak_of(|| from_starlark(list, small()));
        assert_node_limit(result);
        assert!(peak < ONE_MIB, "peak allocation {peak} bytes");
    });
}

#[test]
fn a_huge_value_fails_before_any_starlark_list_is_built() {
    let value = Value::List(vec![Value::Null; TEN_MILLION]);
    Heap::temp(|heap| {
        let (result, peak) = peak_of(|| to_starlark(&value, heap, small()).map(|_| ()));
        assert_node_limit(result);
        assert!(peak < ONE_MIB, "peak allocation {peak} bytes");
    });
}

#[test]
fn a_huge_handler_output_fails_before_its_list_is_allocated() {
    #[derive(Serialize, JsonSchema)]
    struct Out {
        flags: Vec<bool>,
    }
    let plan = Plan::<crate::plan::Empty, Out>::compile().unwrap();
    let output = Out {
        flags: vec![false; TEN_MILLION],
    };
    let (result, peak) = peak_of(|| plan.convert_output(&output, small()));
    assert_node_limit(result);
    assert!(peak < ONE_MIB, "peak allocation {peak} bytes");
}

#[test]
fn the_counter_sees_allocations() {
    // Guards the other tests in this module against a counter that measures nothing.
    let (v, peak) = peak_of(|| vec![0u8; 4 * ONE_MIB]);
    assert_eq!(v.len(), 4 * ONE_MIB);
    assert!(peak >= 4 * ONE_MIB, "peak {peak}");
}
