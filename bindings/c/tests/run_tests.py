#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Runs every C test in a process of its own, with a timeout, optionally under valgrind.

    run_tests.py --binary PATH [--valgrind "valgrind ..."] [--timeout SECONDS] [NAME ...]

A test passes when its process exits 0. Under valgrind, --error-exitcode turns memory
errors and definite leaks into a failure. Exits non-zero if any test failed, and also if
no test ran.
"""
import argparse
import os
import subprocess
import tempfile
import sys
import time


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--valgrind", default="")
    parser.add_argument("--timeout", type=float, default=0)
    parser.add_argument("names", nargs="*")
    args = parser.parse_args()

    names = args.names or subprocess.run(
        [args.binary, "--list"], check=True, capture_output=True, text=True).stdout.split()
    if not names:
        print("no tests found", file=sys.stderr)
        return 1
    prefix = args.valgrind.split() if args.valgrind else []
    timeout = args.timeout or (300 if prefix else 60)
    label = "valgrind" if prefix else args.binary.rsplit("/", 1)[-1]
    environment = dict(os.environ)
    # The TLS tests' certificates: made once, by the first test that needs them.
    certificates = tempfile.TemporaryDirectory(prefix="socketkit-c-certs-")
    environment["SK_TEST_CERT_DIR"] = os.path.join(certificates.name, "certs")
    if prefix:
        # Tests that depend on what valgrind virtualizes (descriptor limits) skip themselves.
        environment["SOCKETKIT_TEST_UNDER_VALGRIND"] = "1"
    failures = []
    started = time.monotonic()
    for name in names:
        began = time.monotonic()
        try:
            result = subprocess.run(prefix + [args.binary, name], capture_output=True, text=True, timeout=timeout,
                                    env=environment)
            passed = result.returncode == 0
            output = result.stdout + result.stderr
            status = f"exit {result.returncode}"
        except subprocess.TimeoutExpired as expired:
            passed = False
            output = (expired.stdout or b"").decode(errors="replace") + (expired.stderr or b"").decode(errors="replace")
            status = f"timed out after {timeout:.0f} s"
        elapsed = time.monotonic() - began
        skipped = passed and "SKIP:" in result.stdout
        verdict = "SKIP" if skipped else ("PASS" if passed else "FAIL")
        print(f"{verdict} {name} ({elapsed:.2f} s)" + ("" if passed else f" [{status}]"))
        if skipped:
            print("    " + result.stdout.strip())
        if not passed:
            failures.append(name)
            print("    " + output.strip().replace("\n", "\n    "))
    total = time.monotonic() - started
    print(f"{label}: {len(names) - len(failures)} of {len(names)} C tests passed in {total:.1f} s")
    if failures:
        print("failed: " + " ".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
