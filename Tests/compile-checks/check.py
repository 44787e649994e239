#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""check.py - what Swift 6 must refuse (and accept) in code that uses SocketKit.

    Tests/compile-checks/check.py [--build-dir .build/debug] [--swiftc swiftc] [-k NAME]

Type-checks small programs against the SocketKit module of a debug build (`swift build`),
in the Swift 6 language mode with warnings as errors, and compares the diagnostics with
what each expects. Run by `make test` (the `compile-checks` target).

- cases/*.swift: each file says what the compiler must say, in `// expect-error: TEXT` or
  `// expect-warning: TEXT` lines (TEXT must appear in one diagnostic of that kind), or
  `// expect-clean` (no diagnostic at all). Data races in delegates and around the async API
  that must not compile; the shapes that must.
- Near misses, generated from the sources for every requirement of SocketDelegate,
  UdpSocketDelegate, MainActorSocketDelegate and MainActorUdpSocketDelegate: a conformance
  declared in an extension that implements the requirement under its exact name compiles
  clean; one whose method misses it by a label or by a parameter's type is warned about
  ("nearly matches defaulted requirement"), which is what the protocols' documentation
  promises a user who declares conformances that way.
- The main-actor protocols have the requirements of their nonisolated twins (the
  delegate's loop-thread hook `newEventLoop(forConnectionFrom:on:)` aside).

Exits 1 with one line per disagreement.
"""
import argparse
import concurrent.futures
import os
import re
import subprocess
import sys
import tempfile

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cases")
SOURCES = os.path.join(TOP, "Sources", "SocketKit")

# protocol -> (file, how a conforming type is declared, and what it is)
PROTOCOLS = {
    "SocketDelegate": ("TCP/SocketDelegate.swift", "final class Conformer: Sendable {}"),
    "UdpSocketDelegate": ("UDP/UdpSocketDelegate.swift", "final class Conformer: Sendable {}"),
    "MainActorSocketDelegate": ("TCP/MainActorSocketDelegate.swift", "@MainActor final class Conformer {}"),
    "MainActorUdpSocketDelegate": ("UDP/MainActorUdpSocketDelegate.swift", "@MainActor final class Conformer {}"),
}
TWINS = {"MainActorSocketDelegate": "SocketDelegate", "MainActorUdpSocketDelegate": "UdpSocketDelegate"}
LOOP_THREAD_ONLY = {"newEventLoop(forConnectionFrom:on:)"}


def requirements(protocol):
    """The `func` requirements of `protocol`, each as one line of source."""
    path = os.path.join(SOURCES, PROTOCOLS[protocol][0])
    text = open(path).read()
    start = re.search(r"^public protocol %s\b[^{]*\{" % protocol, text, re.M)
    if not start:
        sys.exit("check.py: no protocol %s in %s" % (protocol, path))
    body = text[start.end():text.index("\n}", start.end())]
    body = "\n".join(line for line in body.splitlines() if not line.strip().startswith("//"))
    found = []
    for match in re.finditer(r"\bfunc\s", body):
        end, depth, index = None, 0, match.start()
        while index < len(body):
            char = body[index]
            if char == "(":
                depth += 1
            elif char == ")":
                depth -= 1
                if depth == 0:
                    end = index + 1
                    break
            index += 1
        tail = re.match(r"\s*(->\s*[^\n]+)?", body[end:]).group(1) or ""
        found.append(" ".join((body[match.start():end] + " " + tail).split()))
    return found


def split_parameters(declaration):
    """name, [(label, name, type)], result of a one-line `func` declaration."""
    name = declaration[len("func "):declaration.index("(")]
    inner = declaration[declaration.index("(") + 1:declaration.rindex(")")]
    parameters, depth, current = [], 0, ""
    for char in inner:
        if char in "(<[":
            depth += 1
        elif char in ")>]":
            depth -= 1
        if char == "," and depth == 0:
            parameters.append(current)
            current = ""
        else:
            current += char
    parameters.append(current)
    parsed = []
    for parameter in parameters:
        names, kind = parameter.split(":", 1)
        words = names.split()
        label, local = (words[0], words[1]) if len(words) == 2 else (words[0], words[0])
        parsed.append((label, local, kind.strip()))
    result = declaration[declaration.rindex(")") + 1:].strip()
    return name, parsed, result


def selector(declaration):
    name, parameters, _ = split_parameters(declaration)
    return "%s(%s)" % (name, "".join(label + ":" for label, _, _ in parameters))


def render(name, parameters, result):
    text = ", ".join("%s %s: %s" % (label, local, kind) if label != local else "%s: %s" % (local, kind)
                     for label, local, kind in parameters)
    body = "0" if "Double" in result else ""
    return "func %s(%s) %s { %s }" % (name, text, result, body)


def near_misses(declaration):
    """(what, source) for methods that miss `declaration` by one label, or by one type."""
    name, parameters, result = split_parameters(declaration)
    misses = []
    labelled = [index for index, (label, _, _) in enumerate(parameters) if label != "_"]
    if labelled:
        index = labelled[-1]
        label, local, kind = parameters[index]
        changed = list(parameters)
        changed[index] = (label + "s", local, kind)
        misses.append(("label %s -> %ss" % (label, label), render(name, changed, result)))
    index = len(parameters) - 1
    label, local, kind = parameters[index]
    other = {"Int": "Int32", "Double": "Float", "String": "Substring", "UInt16": "Int"}.get(kind)
    if other is None:
        other = kind[:-1] if kind.endswith("?") else "(%s)?" % kind
    changed = list(parameters)
    changed[index] = (label, local, other)
    misses.append(("type %s -> %s" % (kind, other), render(name, changed, result)))
    return misses


def printed(requirement):
    """The requirement's name as the compiler prints it (no labels when all are `_`)."""
    name, parameters, _ = split_parameters(requirement)
    return name if all(label == "_" for label, _, _ in parameters) else selector(requirement)


def generated_cases():
    """One program per protocol, with one conforming class per check: (name, source, {line:
    (what, expectation)}). Each class's conformance is declared in an extension that holds
    one method: the exact one (no diagnostic) or a near miss (a warning on its line)."""
    cases = []
    for protocol, (_, conformer) in PROTOCOLS.items():
        lines = ["import SocketKit"]
        expected = {}
        for requirement in requirements(protocol):
            name, parameters, result = split_parameters(requirement)
            if selector(requirement) in LOOP_THREAD_ONLY and protocol in TWINS:
                continue
            variants = [("exact", render(name, parameters, result), None)]
            variants += [(what, source, "nearly matches defaulted requirement '%s'" % printed(requirement))
                         for what, source in near_misses(requirement)]
            for what, source, message in variants:
                type_name = "Conformer%d" % len(expected)
                lines.append(conformer.replace("Conformer", type_name))
                lines.append("extension %s: %s {" % (type_name, protocol))
                lines.append("    " + source)
                expected[len(lines)] = ("%s.%s %s" % (protocol, selector(requirement), what), message)
                lines.append("}")
        cases.append((protocol + " near misses", "\n".join(lines) + "\n", expected))
    return cases


def twin_mismatches():
    problems = []
    for protocol, twin in TWINS.items():
        mine = {selector(r): split_parameters(r) for r in requirements(protocol)}
        theirs = {selector(r): split_parameters(r) for r in requirements(twin) if selector(r) not in LOOP_THREAD_ONLY}
        for missing in sorted(set(theirs) - set(mine)):
            problems.append("%s lacks %s's requirement %s" % (protocol, twin, missing))
        for extra in sorted(set(mine) - set(theirs)):
            problems.append("%s has %s, which %s does not" % (protocol, extra, twin))
        for common in sorted(set(mine) & set(theirs)):
            if [k for _, _, k in mine[common][1]] != [k for _, _, k in theirs[common][1]] or mine[common][2] != theirs[common][2]:
                problems.append("%s.%s differs from %s's in its types" % (protocol, common, twin))
    return problems


def file_cases(only):
    cases = []
    for entry in sorted(os.listdir(CASES)):
        if not entry.endswith(".swift") or (only and only not in entry):
            continue
        source = open(os.path.join(CASES, entry)).read()
        expectations = []
        for kind, text in re.findall(r"^// expect-(error|warning|clean):?[ \t]*(.*)$", source, re.M):
            expectations.append((kind, text.strip()))
        if not expectations:
            sys.exit("check.py: %s says nothing about what to expect" % entry)
        cases.append((entry, source, expectations))
    return cases


def diagnostics(swiftc, build_dir, source):
    """[(line, kind, message)] of what swiftc says about `source`."""
    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "main.swift")
        with open(path, "w") as out:
            out.write(source)
        command = [swiftc, "-typecheck", "-swift-version", "6", "-warnings-as-errors",
                   "-I", os.path.join(build_dir, "Modules"),
                   "-Xcc", "-fmodule-map-file=" + os.path.join(build_dir, "SocketKitC.build", "module.modulemap"),
                   path]
        run = subprocess.run(command, capture_output=True, text=True)
    found = []
    for line in (run.stdout + run.stderr).splitlines():
        match = re.match(r"^%s:(\d+):\d+: (error|warning): (.*)$" % re.escape(path), line)
        if match:
            found.append((int(match.group(1)), match.group(2), match.group(3)))
    if run.returncode != 0 and not found:
        found.append((0, "error", "swiftc failed without a diagnostic: " + (run.stderr.strip() or "?")))
    return found


def describe(found):
    return "; ".join("%d: %s: %s" % f for f in found) or "nothing"


def judge_file(found, expectations):
    """What is wrong with a case file's diagnostics, or None. With -warnings-as-errors a
    warning shows as an error; an expected warning matches either."""
    if expectations == [("clean", "")]:
        return None if not found else "expected no diagnostic, got: " + describe(found)
    for kind, text in expectations:
        if not any(text in message and (got == kind or kind == "warning") for _, got, message in found):
            return "expected %s containing %r, got: %s" % (kind, text, describe(found))
    return None


def judge_lines(found, expected):
    """[problem] of a generated program: each line's diagnostics against what it expects."""
    problems = []
    for line, (what, message) in expected.items():
        here = [f for f in found if f[0] == line]
        if message is None and here:
            problems.append("%s: expected no diagnostic, got: %s" % (what, describe(here)))
        elif message is not None and not any(message in text for _, _, text in here):
            problems.append("%s: expected a warning containing %r, got: %s" % (what, message, describe(here)))
    elsewhere = [f for f in found if f[0] not in expected]
    if elsewhere:
        problems.append("unexpected diagnostics: " + describe(elsewhere))
    return problems


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build-dir", default=os.path.join(TOP, ".build", "debug"))
    parser.add_argument("--swiftc", default="swiftc")
    parser.add_argument("-k", dest="only", default=None, help="only cases whose name contains this")
    arguments = parser.parse_args()
    if not os.path.isdir(os.path.join(arguments.build_dir, "Modules")):
        sys.exit("check.py: no %s/Modules: run `swift build` first" % arguments.build_dir)

    problems = twin_mismatches()
    files = file_cases(arguments.only)
    generated = [case for case in generated_cases() if not arguments.only or arguments.only in case[0]]

    def check(case):
        name, source, expected = case
        found = diagnostics(arguments.swiftc, arguments.build_dir, source)
        if isinstance(expected, dict):
            return ["%s: %s" % (name, problem) for problem in judge_lines(found, expected)]
        problem = judge_file(found, expected)
        return ["%s: %s" % (name, problem)] if problem else []

    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for found in pool.map(check, files + generated):
            problems += found
    count = len(files) + sum(len(case[2]) for case in generated)
    for problem in problems:
        print("compile-checks: " + problem)
    print("compile-checks: %d checks, %d problems" % (count, len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
