#!/usr/bin/env python3
"""Prints what scripts/test ran: one line per crate and the total, `N passed, N failed`.

Usage:
  test-summary.py nextest JUNIT_XML [CONFORMANCE_RESULTS]
  test-summary.py cargo CARGO_TEST_OUTPUT [CONFORMANCE_RESULTS]

`nextest` reads the JUnit report cargo-nextest wrote (.config/nextest.toml names it); `cargo`
reads what `cargo test --message-format=json-render-diagnostics` wrote, stdout and stderr
together: the compiler's JSON messages say which crate each test binary belongs to, and each
binary's own `test result:` line says how its tests went. CONFORMANCE_RESULTS has one line per
conformance scenario, `passed NAME` or `failed NAME`.

Exits 0 when nothing failed and at least one test ran, 1 otherwise: a test binary that did
not report (it crashed, or did not build) counts as a failure of its crate.
"""

import json
import re
import sys
import xml.etree.ElementTree as ElementTree
from collections import defaultdict


def crate_of_package_id(package_id):
    """`path+file:///…/crates/larkgate-store#0.1.0` or `…#larkgate-store@0.1.0` → the name."""
    location, _, version = package_id.partition("#")
    if "@" in version:
        return version.split("@", 1)[0]
    return location.rstrip("/").rsplit("/", 1)[-1]


def from_nextest(path):
    counts = defaultdict(lambda: [0, 0])
    failures = []
    for suite in ElementTree.parse(path).getroot().iter("testsuite"):
        # A binary id: `larkgate-store`, `larkgate-store::it`, `larkgate::bin/larkgate`.
        crate = suite.get("name").split("::", 1)[0]
        for case in suite.iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                counts[crate][1] += 1
                failures.append(f"{suite.get('name')} {case.get('name')}")
            elif case.find("skipped") is None:
                counts[crate][0] += 1
    return counts, failures


RUNNING = re.compile(r"^\s*Running (?:unittests )?\S+ \((.+)\)$")
DOCTESTS = re.compile(r"^\s*Doc-tests (\S+)$")
RESULT = re.compile(r"^test result: (\w+)\. (\d+) passed; (\d+) failed;")
FAILED = re.compile(r"^test (\S+) \.\.\. FAILED$")


def from_cargo(path):
    crate_of_executable = {}
    counts = defaultdict(lambda: [0, 0])
    failures = []
    running = None  # the binary whose output is being read, until its `test result:` line

    def start(binary):
        nonlocal running
        if running is not None:
            counts[running][1] += 1
            failures.append(f"{running}: a test binary that ended without a result")
        running = binary

    with open(path, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            line = line.rstrip("\n")
            if line.startswith('{"reason"'):
                message = json.loads(line)
                if message.get("reason") == "compiler-artifact" and message.get("executable"):
                    crate_of_executable[message["executable"]] = crate_of_package_id(
                        message["package_id"]
                    )
                elif message.get("reason") == "build-finished" and not message["success"]:
                    counts["the build"][1] += 1
                    failures.append("the build (its errors are above)")
            elif match := RUNNING.match(line):
                executable = match.group(1)
                start(next(
                    (crate for built, crate in crate_of_executable.items()
                     if built.endswith(executable) or executable.endswith(built)),
                    executable,
                ))
            elif match := DOCTESTS.match(line):
                start(match.group(1).replace("_", "-"))
            elif (match := FAILED.match(line)) and running:
                failures.append(f"{running} {match.group(1)}")
            elif (match := RESULT.match(line)) and running:
                counts[running][0] += int(match.group(2))
                counts[running][1] += int(match.group(3))
                running = None
    start(None)
    return counts, failures


def main():
    if len(sys.argv) not in (3, 4) or sys.argv[1] not in ("nextest", "cargo"):
        sys.exit(__doc__)
    reader = from_nextest if sys.argv[1] == "nextest" else from_cargo
    try:
        counts, failures = reader(sys.argv[2])
    except (OSError, ElementTree.ParseError) as error:
        print(f"scripts/test: no test results to summarise ({error})")
        sys.exit(1)
    if len(sys.argv) == 4:
        with open(sys.argv[3], encoding="utf-8") as scenarios:
            for line in scenarios:
                outcome, _, name = line.strip().partition(" ")
                if outcome == "passed":
                    counts["conformance scenarios"][0] += 1
                elif outcome == "failed":
                    counts["conformance scenarios"][1] += 1
                    failures.append(f"conformance scenario {name}")
    width = max((len(crate) for crate in counts), default=0)
    print("== summary")
    for crate in sorted(counts, key=lambda c: (c == "conformance scenarios", c)):
        passed, failed = counts[crate]
        print(f"{crate:<{width}}  {passed} passed, {failed} failed")
    passed = sum(c[0] for c in counts.values())
    failed = sum(c[1] for c in counts.values())
    print(f"{'total':<{width}}  {passed} passed, {failed} failed")
    for failure in failures:
        print(f"failed: {failure}")
    sys.exit(0 if failed == 0 and passed > 0 else 1)


if __name__ == "__main__":
    main()
