//! Integration tests of the script engine.

mod entry;
mod forged;
mod run;
mod session;
mod tools;
mod worker;
