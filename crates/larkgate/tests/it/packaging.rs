//! What the release tarball installs: the systemd unit is one systemd accepts, hardened as the
//! README says, and it starts larkgate as the tarball lays it out; the example configuration
//! is valid.

use std::collections::BTreeMap;
use std::path::Path;

use crate::{ok, root};

/// The unit's directives, by section, each with its values in order.
fn directives(unit: &str) -> BTreeMap<(String, String), Vec<String>> {
    let mut section = String::new();
    let mut found: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for line in unit.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_owned();
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("not KEY=VALUE: {line}"));
        found
            .entry((section.clone(), key.to_owned()))
            .or_default()
            .push(value.to_owned());
    }
    found
}

/// Every directive the unit may use, by section: a misspelt one (which systemd only warns of,
/// and ignores) fails here where `systemd-analyze` is missing.
const KNOWN: &[(&str, &[&str])] = &[
    ("Unit", &["Description", "After", "Wants"]),
    (
        "Service",
        &[
            "Type",
            "ExecStart",
            "ExecReload",
            "Environment",
            "EnvironmentFile",
            "DynamicUser",
            "StateDirectory",
            "StateDirectoryMode",
            "ConfigurationDirectory",
            "UMask",
            "Restart",
            "RestartSec",
            "TimeoutStopSec",
            "KillMode",
            "LimitNOFILE",
            "ProtectSystem",
            "ProtectHome",
            "PrivateTmp",
            "PrivateDevices",
            "NoNewPrivileges",
            "ProtectKernelTunables",
            "ProtectKernelModules",
            "ProtectKernelLogs",
            "ProtectControlGroups",
            "ProtectClock",
            "ProtectHostname",
            "RestrictAddressFamilies",
            "RestrictNamespaces",
            "RestrictRealtime",
            "RestrictSUIDSGID",
            "LockPersonality",
            "SystemCallArchitectures",
            "CapabilityBoundingSet",
            "AmbientCapabilities",
        ],
    ),
    ("Install", &["WantedBy"]),
];

#[test]
fn the_systemd_unit_is_hardened_reloads_on_sighup_and_starts_larkgate_as_installed() {
    let unit = std::fs::read_to_string(root().join("packaging/larkgate.service")).unwrap();
    let found = directives(&unit);
    for (section, key) in found.keys() {
        let known = KNOWN
            .iter()
            .find(|(s, _)| s == section)
            .is_some_and(|(_, keys)| keys.contains(&key.as_str()));
        assert!(
            known,
            "[{section}] {key} is not a directive this unit is known to use"
        );
    }
    let value = |section: &str, key: &str| -> String {
        found
            .get(&(section.to_owned(), key.to_owned()))
            .unwrap_or_else(|| panic!("[{section}] has no {key}"))
            .join(" ")
    };
    for (key, expected) in [
        ("DynamicUser", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("NoNewPrivileges", "yes"),
        ("StateDirectory", "larkgate"),
        ("ExecReload", "/bin/kill -HUP $MAINPID"),
        ("CapabilityBoundingSet", ""),
    ] {
        assert_eq!(value("Service", key), expected, "{key}");
    }
    // It starts larkgate on its state directory, with the configuration the tarball installs.
    let start = value("Service", "ExecStart");
    let args: Vec<&str> = start.split_whitespace().collect();
    assert_eq!(
        args,
        [
            "/usr/local/bin/larkgate",
            "--data-dir",
            "/var/lib/larkgate",
            "serve"
        ]
    );
    assert!(
        value("Service", "Environment").contains("LARKGATE_CONFIG=/etc/larkgate/larkgate.toml")
    );

    // The same arguments and the tarball's configuration, where this machine can run them: the
    // configuration is valid, and the command line is one larkgate takes.
    let dir = tempfile::tempdir().unwrap();
    let config = root().join("packaging/larkgate.toml");
    let checked = std::process::Command::new(env!("CARGO_BIN_EXE_larkgate"))
        .current_dir(dir.path())
        .env("LARKGATE_CONFIG", &config)
        .args([
            "--data-dir",
            dir.path().join("state").to_str().unwrap(),
            "check",
        ])
        .output()
        .unwrap();
    assert!(
        checked.status.success(),
        "{}",
        String::from_utf8_lossy(&checked.stderr)
    );
    let help = ok(
        dir.path(),
        &["--data-dir", "/var/lib/larkgate", "serve", "--help"],
    );
    assert!(help.contains("--listen"), "{help}");

    // systemd's own check, where it is installed, of the unit with this build's binary.
    if which("systemd-analyze") {
        let copy = dir.path().join("larkgate.service");
        std::fs::write(
            &copy,
            unit.replace("/usr/local/bin/larkgate", env!("CARGO_BIN_EXE_larkgate")),
        )
        .unwrap();
        let verified = std::process::Command::new("systemd-analyze")
            .args(["verify", copy.to_str().unwrap()])
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&verified.stderr).into_owned();
        assert!(
            verified.status.success() && said.trim().is_empty(),
            "{said}"
        );
    }
}

/// Whether `program` is on the PATH.
fn which(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|dir| Path::new(&dir).join(program).is_file())
    })
}
