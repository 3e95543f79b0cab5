//! The edge in this process: the router `larkgate serve` serves ([`larkgate_edge::routes::assemble`])
//! on a real socket on `127.0.0.1:0`, in front of a real platform on a temporary SQLite store,
//! its principals and tokens seeded through the store. Clients reach it over real HTTP.
//! What needs a process of its own (signals, the first start's banner, the command line) is
//! tested against the binary, in `crates/larkgate/tests/it`.

mod addresses;
mod answers;
mod harness;
mod replicas;
mod sdk;
mod sessions;
mod throttle;
