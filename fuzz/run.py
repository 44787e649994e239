#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Runs the fuzzers of this folder (built by `make fuzz-build` into .build-fuzz/fuzzers).

    run.py smoke   [--only NAME ...]     each fuzzer over its checked-in corpus, then a fixed
                                         number of mutations from a fixed seed (make test)
    run.py long    --seconds N [--only]  each fuzzer for N seconds, one after the other, from
                                         its corpus into a work corpus (make fuzz); writes a
                                         report
    run.py merge   [--only NAME ...]     minimizes the work corpora of long runs into
                                         fuzz/corpus/<name> (then commit them)
    run.py surface                       checks that capi_fuzzer.c calls every function the
                                         header declares

A fuzzer fails on a crash, a sanitizer report, an oracle of its own ("==FUZZ ORACLE=="), a
hang (-timeout) or a leak at exit. Findings are kept in .build-fuzz/artifacts/<name>/; the
report says how to reproduce one: `.build-fuzz/fuzzers/<name>_fuzzer <artifact>` with the
environment printed here.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BUILD = os.path.join(ROOT, ".build-fuzz")
FUZZERS = ["framing", "capi", "capi_release", "tls", "parse"]
# capi_release: the same harness against the shipping library (its timing, no sanitizer in
# the engine), with the same corpus.
CORPUS = {"capi_release": "capi"}

# Smoke runs: mutations after the corpus, per fuzzer (the corpus is replayed first). Sized
# so that the whole smoke run takes about two minutes on two busy cores.
SMOKE_RUNS = {"framing": 1000, "capi": 150, "capi_release": 150, "tls": 1000, "parse": 300}
# Smoke runs only, fixed scenarios before the first input (capi_fuzzer.c), so that each is
# tried as often in every smoke run, whatever the mutations pick (README.md): the release
# build's C API fuzzer runs 300 release-under-fire rounds (FUZZ_FIRE_ROUNDS, about 10 s:
# 26.3's race); both run 20 rounds of two callbacks that wait for each other
# (FUZZ_CROSSING_ROUNDS, under a second: 27.4's deadlock).
SMOKE_ENV = {"capi": {"FUZZ_CROSSING_ROUNDS": "20"},
             "capi_release": {"FUZZ_FIRE_ROUNDS": "300", "FUZZ_CROSSING_ROUNDS": "20"}}


def environment():
    certificates = os.path.join(BUILD, "certs")
    if not os.path.exists(os.path.join(certificates, "cert.pem")):
        os.makedirs(certificates, exist_ok=True)
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                        "-days", "3650", "-subj", "/CN=localhost", "-addext",
                        "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1", "-keyout",
                        os.path.join(certificates, "key.pem"), "-out", os.path.join(certificates, "cert.pem")],
                       check=True, capture_output=True)
    env = dict(os.environ)
    env.update({
        "FUZZ_CERT_DIR": certificates,
        "FUZZ_STATS": "1",
        # The Swift runtime's own crash handler would fight AddressSanitizer's.
        "SWIFT_BACKTRACE": "enable=no",
        "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1:allocator_may_return_null=1",
        # The C suite's: Swift's weak-reference side tables look leaked at exit.
        "LSAN_OPTIONS": "suppressions=" + os.path.join(ROOT, "bindings", "c", "tests", "lsan.supp"),
        "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
    })
    return env


def binary(name):
    path = os.path.join(BUILD, "fuzzers", name + "_fuzzer")
    if not os.path.exists(path):
        sys.exit(f"{path} is missing: run `make fuzz-build` first")
    return path


def stats(output):
    found = {}
    for key in ("number_of_executed_units", "average_exec_per_sec", "new_units_added", "peak_rss_mb"):
        match = re.search(r"stat::%s:\s+(\d+)" % key, output)
        if match:
            found[key] = int(match.group(1))
    coverage = re.findall(r"cov: (\d+) ft: (\d+)", output)
    if coverage:
        found["coverage"] = int(coverage[-1][0])
    extra = re.findall(r"^\w+ stats: .*$", output, re.M)
    if extra:
        found["fuzzer_stats"] = extra[-1]
    return found


def run_one(name, arguments, env, log_path, timeout):
    command = [binary(name)] + arguments
    began = time.monotonic()
    with open(log_path, "w") as log:
        try:
            result = subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout, cwd=BUILD)
            code = result.returncode
        except subprocess.TimeoutExpired:
            code = "timeout"
    elapsed = time.monotonic() - began
    with open(log_path, errors="replace") as log:
        output = log.read()
    return code, elapsed, output, command


def finding(output):
    for pattern in ("==FUZZ ORACLE==[^\n]*(\n==FUZZ ORACLE==[^\n]*)?", "ERROR: AddressSanitizer[^\n]*",
                    "ERROR: LeakSanitizer[^\n]*", "runtime error:[^\n]*", "Assertion failed[^\n]*",
                    "Fatal error[^\n]*", "ERROR: libFuzzer: [^\n]*"):
        match = re.search(pattern, output)
        if match:
            return match.group(0).strip()
    return None


def smoke(names):
    env = environment()
    failures = []
    total = time.monotonic()
    os.makedirs(os.path.join(BUILD, "logs"), exist_ok=True)
    for name in names:
        artifacts = os.path.join(BUILD, "artifacts", name) + "/"
        os.makedirs(artifacts, exist_ok=True)
        env["FUZZ_ARTIFACT_DIR"] = artifacts
        env.pop("FUZZ_FIRE_ROUNDS", None)
        env.pop("FUZZ_CROSSING_ROUNDS", None)
        env.update(SMOKE_ENV.get(name, {}))
        corpus = os.path.join(HERE, "corpus", CORPUS.get(name, name))
        scratch = tempfile.mkdtemp(prefix=f"fuzz-smoke-{name}-")
        count = len(os.listdir(corpus))
        arguments = ["-seed=1", f"-runs={count + SMOKE_RUNS[name]}", "-timeout=60", "-rss_limit_mb=4096",
                     "-max_len=4096", "-detect_leaks=0", "-print_final_stats=1", f"-artifact_prefix={artifacts}",
                     scratch, corpus]
        log_path = os.path.join(BUILD, "logs", f"smoke-{name}.log")
        code, elapsed, output, command = run_one(name, arguments, env, log_path, timeout=900)
        shutil.rmtree(scratch, ignore_errors=True)
        found = stats(output)
        verdict = "ok" if code == 0 else "FAIL"
        print(f"fuzz smoke {name}: {verdict} in {elapsed:.1f} s, {found.get('number_of_executed_units', '?')} inputs "
              f"({count} from the corpus), coverage {found.get('coverage', '?')}")
        if found.get("fuzzer_stats"):
            print("    " + found["fuzzer_stats"])
        if code != 0:
            failures.append(name)
            print(f"    exit {code}: {finding(output) or 'see ' + log_path}")
            print(f"    log: {log_path}")
            print("    " + " ".join(command))
    print(f"fuzz smoke: {len(names) - len(failures)} of {len(names)} fuzzers clean in {time.monotonic() - total:.0f} s")
    return 1 if failures else 0


def long_run(names, seconds):
    env = environment()
    rows = []
    any_finding = False
    os.makedirs(os.path.join(BUILD, "logs"), exist_ok=True)
    for name in names:
        work = os.path.join(BUILD, "work", name)
        os.makedirs(work, exist_ok=True)
        artifacts = os.path.join(BUILD, "artifacts", name) + "/"
        os.makedirs(artifacts, exist_ok=True)
        env["FUZZ_ARTIFACT_DIR"] = artifacts
        before = set(os.listdir(artifacts))
        arguments = [f"-max_total_time={seconds}", "-timeout=60", "-rss_limit_mb=4096", "-max_len=4096",
                     "-detect_leaks=0", "-print_final_stats=1", f"-artifact_prefix={artifacts}", work,
                     os.path.join(HERE, "corpus", CORPUS.get(name, name))]
        log_path = os.path.join(BUILD, "logs", f"long-{name}.log")
        print(f"fuzz {name}: {seconds} s ...", flush=True)
        code, elapsed, output, command = run_one(name, arguments, env, log_path, timeout=seconds + 600)
        found = stats(output)
        new_artifacts = sorted(set(os.listdir(artifacts)) - before)
        result = "clean" if code == 0 else (finding(output) or f"exit {code}")
        any_finding = any_finding or code != 0
        rows.append((name, elapsed, found, result, new_artifacts, log_path))
        print(f"fuzz {name}: {result}; {found.get('number_of_executed_units', '?')} inputs in {elapsed:.0f} s, "
              f"coverage {found.get('coverage', '?')}")
    report = os.path.join(BUILD, "fuzz-report.md")
    with open(report, "w") as file:
        file.write(f"# Fuzz report ({time.strftime('%Y-%m-%d %H:%M')}, {seconds} s per fuzzer)\n\n")
        file.write("| fuzzer | duration | inputs | inputs/s | coverage (edges) | new corpus units | peak RSS | result |\n")
        file.write("|---|---|---|---|---|---|---|---|\n")
        for name, elapsed, found, result, artifacts, log_path in rows:
            file.write(f"| {name} | {elapsed:.0f} s | {found.get('number_of_executed_units', '?')} | "
                       f"{found.get('average_exec_per_sec', '?')} | {found.get('coverage', '?')} | "
                       f"{found.get('new_units_added', '?')} | {found.get('peak_rss_mb', '?')} MB | {result} |\n")
        file.write("\n")
        for name, elapsed, found, result, artifacts, log_path in rows:
            if found.get("fuzzer_stats"):
                file.write(f"- {name}: {found['fuzzer_stats']}\n")
            for artifact in artifacts:
                file.write(f"- {name} finding: `.build-fuzz/artifacts/{name}/{artifact}` (log: {log_path}); reproduce with "
                           f"`fuzz/run.py reproduce {name} .build-fuzz/artifacts/{name}/{artifact}`\n")
    print(open(report).read())
    print(f"report: {report}")
    return 1 if any_finding else 0


def merge(names):
    env = environment()
    for name in names:
        work = os.path.join(BUILD, "work", name)
        if not os.path.isdir(work):
            print(f"{name}: no work corpus (run `make fuzz` first)")
            continue
        corpus = os.path.join(HERE, "corpus", CORPUS.get(name, name))
        before = len(os.listdir(corpus))
        code, elapsed, output, command = run_one(name, ["-merge=1", "-timeout=60", "-detect_leaks=0", corpus, work], env,
                                                 os.path.join(BUILD, "logs", f"merge-{name}.log"), timeout=3600)
        print(f"{name}: corpus {before} -> {len(os.listdir(corpus))} files (exit {code}, {elapsed:.0f} s)")


def reproduce(name, artifact):
    env = environment()
    os.execve(binary(name), [binary(name), os.path.abspath(artifact)], env)


def surface():
    header = open(os.path.join(ROOT, "include", "socketkit.h")).read()
    declared = set(re.findall(r"^[a-z_ ]+\**\s*\(?\*?(sk_[a-z0-9_]+)\(", header, re.M))
    source = open(os.path.join(HERE, "capi_fuzzer.c")).read()
    missing = sorted(name for name in declared if not re.search(r"\b%s\(" % name, source))
    if missing:
        print("capi_fuzzer.c does not call: " + " ".join(missing))
        return 1
    print(f"capi_fuzzer.c calls all {len(declared)} functions the header declares")
    return 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["smoke", "long", "merge", "surface", "reproduce"])
    parser.add_argument("rest", nargs="*")
    parser.add_argument("--seconds", type=int, default=600)
    parser.add_argument("--only", nargs="*", default=None)
    args = parser.parse_args()
    names = args.only or FUZZERS
    if args.command == "smoke":
        status = surface()
        return smoke(names) or status
    if args.command == "long":
        return long_run(names, args.seconds)
    if args.command == "merge":
        return merge(names)
    if args.command == "reproduce":
        return reproduce(args.rest[0], args.rest[1])
    return surface()


if __name__ == "__main__":
    sys.exit(main())
