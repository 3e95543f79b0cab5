//! Integration tests of the script engine.

mod entry;
mod forged;
mod run;
mod session;
mod tools;
mod worker;

/// Writes an executable test program at `path` without this process ever holding it open for
/// writing.
///
/// The tests run on parallel threads and spawn processes. A process spawned by another thread
/// while this one has the file open for writing inherits that descriptor until its own `exec`,
/// and executing the file in that moment fails with ETXTBSY ("Text file busy"). `install`
/// writes the program in a process of its own, so no descriptor of ours is ever writable on it.
fn write_executable(path: &std::path::Path, text: &str) {
    let source = path.with_extension("source");
    std::fs::write(&source, text).unwrap();
    let status = std::process::Command::new("install")
        .args(["-m", "0755"])
        .arg(&source)
        .arg(path)
        .status()
        .expect("install (coreutils) runs");
    assert!(status.success(), "install wrote {}", path.display());
}
