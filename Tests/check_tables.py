#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""check_tables.py - SocketKit's events and errors agree with their one table.

    Tests/check_tables.py [--library PATH] [--write]

docs/EVENTS_AND_ERRORS.md defines every error code and every event, with their C, Swift
and Python names. This script (run by `make test`) generates the Swift copy of the error
table from it and compares every hand-written copy against it:

- Swift: Sources/SocketKit/Errors/SocketErrorCodes.swift is exactly what the table
  generates (`--write` regenerates it); through the built library, sk_error_name and
  sk_strerror name exactly the table's codes, with its names and messages. The Swift test
  EventTableTests checks the engine's events against the event table.
- C: the header's sk_error_code_t, sk_event_kind_t (and the fields each kind's comment
  names), sk_event_t and the two delegate structs.
- Python, at run time (`import socketkit`; the module is not read as text): the error
  classes, their codes and the code constants of socketkit.errors; the EVENT_* constants
  and the Event record of socketkit._ffi; the delegate-method-to-member maps.
- The C extension, every file of it (bindings/python/socketkit/_speedups*.c and .h): the
  SK_EVENT_* and SK_ERR_* constants it uses exist.
- docs/FEATURES.md names every code (C, Swift, Python) and every delegate member (C,
  Python).

Exits 1 with one line per disagreement.
"""
import argparse
import ctypes
import glob
import importlib
import os
import pkgutil
import re
import sys
import textwrap

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLE = os.path.join(TOP, "docs", "EVENTS_AND_ERRORS.md")
HEADER = os.path.join(TOP, "include", "socketkit.h")
SWIFT_CODES = os.path.join(TOP, "Sources", "SocketKit", "Errors", "SocketErrorCodes.swift")
SPEEDUPS = os.path.join(TOP, "bindings", "python", "socketkit")  # its _speedups*.c and _speedups*.h
FEATURES = os.path.join(TOP, "docs", "FEATURES.md")
DEFAULT_LIBRARY = os.path.join(TOP, ".build", "release", "libsocketkit.so")
NONE = "—"

ERROR_COLUMNS = ["Code", "C name", "Swift", "Python", "Message", "Meaning"]
EVENT_COLUMNS = ["Kind", "C constant", "Socket", "C member", "Swift", "Python", "Fields"]
# sk_event_t fields every record has; the table lists the others.
COMMON_EVENT_FIELDS = {"kind", "userdata", "sock", "udp_sock"}


# ---- The table ------------------------------------------------------------------------

def read_tables(path=TABLE):
    """{"Errors": [row, ...], "Events": [row, ...]}: each row a dict by column name."""
    tables, section, columns = {}, None, None
    with open(path, encoding="utf-8") as source:
        for number, line in enumerate(source, 1):
            line = line.rstrip("\n")
            if line.startswith("## "):
                section, columns = line[3:].strip(), None
                continue
            if not line.startswith("|") or section is None:
                continue
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if columns is None:
                columns = cells
                tables[section] = []
            elif set("".join(cells)) <= set("-: "):
                continue
            elif len(cells) != len(columns):
                raise SystemExit(f"{path}:{number}: {len(cells)} cells where the header has {len(columns)}")
            else:
                row = dict(zip(columns, cells))
                row["line"] = number
                tables[section].append(row)
    return tables


def load_table():
    tables = read_tables()
    errors, events = tables.get("Errors"), tables.get("Events")
    if not errors or not events:
        raise SystemExit(f"{TABLE}: needs an '## Errors' and an '## Events' table")
    for name, rows, wanted in (("Errors", errors, ERROR_COLUMNS), ("Events", events, EVENT_COLUMNS)):
        have = [column for column in rows[0] if column != "line"]
        if have != wanted:
            raise SystemExit(f"{TABLE}: the {name} table's columns are {have}, expected {wanted}")
    for row in errors:
        row["code"] = int(row["Code"])
    for row in events:
        row["kind"] = None if row["Kind"] == NONE else int(row["Kind"])
        row["fields"] = set() if row["Fields"] == NONE else {field.strip() for field in row["Fields"].split(",")}
    return errors, events


class Report:
    def __init__(self):
        self.problems = []

    def same(self, what, expected, actual):
        """Records a difference between two mappings (or sets), entry by entry."""
        if isinstance(expected, dict):
            for key in sorted(set(expected) | set(actual), key=str):
                if key not in actual:
                    self.problems.append(f"{what}: missing {key} (the table has {expected[key]!r})")
                elif key not in expected:
                    self.problems.append(f"{what}: {key} = {actual[key]!r} is not in the table")
                elif expected[key] != actual[key]:
                    self.problems.append(f"{what}: {key} is {actual[key]!r}, the table says {expected[key]!r}")
        else:
            for item in sorted(set(expected) - set(actual), key=str):
                self.problems.append(f"{what}: missing {item}")
            for item in sorted(set(actual) - set(expected), key=str):
                self.problems.append(f"{what}: {item} is not in the table")

    def fail(self, message):
        self.problems.append(message)


# ---- Swift: generated ----------------------------------------------------------------

def swift_string(text):
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def swift_codes(errors):
    """The text of Sources/SocketKit/Errors/SocketErrorCodes.swift."""
    lines = [
        "// SPDX-License-Identifier: MIT",
        "// Generated from docs/EVENTS_AND_ERRORS.md (\"Errors\") by Tests/check_tables.py: edit the",
        "// table and run `python3 Tests/check_tables.py --write`, not this file.",
        "",
        "extension SocketError.Code {",
    ]
    for row in errors:
        if row["Swift"] == NONE:
            continue
        for line in textwrap.wrap(row["Meaning"], width=90):
            lines.append(f"    /// {line}")
        lines.append(f"    public static let {row['Swift']} = SocketError.Code(rawValue: {row['code']})")
    lines += [
        "",
        "    /// One row of the table: the code, its Swift name (none for success), its C name and",
        "    /// its summary (`sk_strerror`).",
        "    typealias TableEntry = (code: SocketError.Code, name: StaticString?, cName: StaticString, summary: StaticString)",
        "",
        "    /// Every code, success first, in the table's order.",
        "    static let table: [TableEntry] = [",
    ]
    for row in errors:
        code, name = ((f"SocketError.Code(rawValue: {row['code']})", "nil") if row["Swift"] == NONE
                      else (f".{row['Swift']}", swift_string(row["Swift"])))
        lines.append(f"        ({code}, {name}, {swift_string(row['C name'])}, {swift_string(row['Message'])}),")
    lines += ["    ]", "}", ""]
    return "\n".join(lines)


def check_swift_codes(errors, report, write):
    expected = swift_codes(errors)
    if write:
        with open(SWIFT_CODES, "w", encoding="utf-8") as output:
            output.write(expected)
        print(f"wrote {os.path.relpath(SWIFT_CODES, TOP)}")
        return
    try:
        actual = open(SWIFT_CODES, encoding="utf-8").read()
    except FileNotFoundError:
        actual = ""
    if actual != expected:
        report.fail(f"{os.path.relpath(SWIFT_CODES, TOP)} is not what the table generates: "
                    "edit docs/EVENTS_AND_ERRORS.md and run `python3 Tests/check_tables.py --write`")


def check_library(errors, library, report):
    """sk_error_name and sk_strerror, as built from the Swift sources."""
    try:
        lib = ctypes.CDLL(library)
    except OSError as error:
        report.fail(f"cannot load {library} ({error}): build it first (make library)")
        return
    for function in (lib.sk_error_name, lib.sk_strerror):
        function.argtypes, function.restype = [ctypes.c_int], ctypes.c_char_p
    names, messages = {}, {}
    for code in range(-1000, 1001):
        name, message = lib.sk_error_name(code).decode(), lib.sk_strerror(code).decode()
        if name != "SK_ERR_UNKNOWN" or message != "unknown error":
            names[code], messages[code] = name, message
    report.same("sk_error_name", {row["code"]: row["C name"] for row in errors}, names)
    report.same("sk_strerror", {row["code"]: row["Message"] for row in errors}, messages)


# ---- C: the header ---------------------------------------------------------------------

def header_block(header, opening, closing):
    start = header.find(opening)
    end = header.find(closing, start)
    if start < 0 or end < 0:
        raise SystemExit(f"{HEADER}: cannot find {opening!r} ... {closing!r}")
    return header[start + len(opening):end]


def enum_entries(block, prefix):
    """[(name, value, comment on the same line)] of an enum's entries."""
    entries = []
    for line in block.splitlines():
        match = re.match(rf"\s*({prefix}\w*)\s*=\s*(-?\d+)\s*,?\s*(?:/\*(.*?)\*/)?", line)
        if match:
            entries.append((match.group(1), int(match.group(2)), match.group(3) or ""))
    return entries


def struct_fields(block):
    """The member names of a struct, function pointers included."""
    block = re.sub(r"/\*.*?\*/", "", block, flags=re.S)
    names = re.findall(r"\(\s*\*\s*(\w+)\s*\)\s*\(", block)
    block = re.sub(r"[^;]*\(\s*\*\s*\w+\s*\)\s*\([^;]*\)\s*;", "", block)
    names += re.findall(r"(\w+)\s*(?:\[[^\]]*\])?\s*;", block)
    return names


def check_header(errors, events, report):
    header = open(HEADER, encoding="utf-8").read()
    codes = enum_entries(header_block(header, "typedef enum sk_error_code {", "} sk_error_code_t;"), "SK_")
    report.same("socketkit.h sk_error_code_t", {row["C name"]: row["code"] for row in errors},
                {name: value for name, value, _ in codes})

    event_fields = set(struct_fields(header_block(header, "typedef struct sk_event {", "} sk_event_t;")))
    kinds = enum_entries(header_block(header, "typedef enum sk_event_kind {", "} sk_event_kind_t;"), "SK_EVENT_")
    recorded = [row for row in events if row["kind"] is not None]
    report.same("socketkit.h sk_event_kind_t", {row["C constant"]: row["kind"] for row in recorded},
                {name: value for name, value, _ in kinds})
    # The comment beside each kind names the fields its record carries.
    report.same("socketkit.h sk_event_kind_t comments (fields)",
                {row["C constant"]: sorted(row["fields"]) for row in recorded},
                {name: sorted(set(re.findall(r"\w+", comment)) & (event_fields - COMMON_EVENT_FIELDS))
                 for name, _, comment in kinds})
    for row in recorded:
        unknown = row["fields"] - event_fields
        if unknown:
            report.fail(f"{TABLE}:{row['line']}: {row['C constant']} names fields sk_event_t lacks: {sorted(unknown)}")

    for socket, opening, closing in (("TCP", "typedef struct sk_socket_delegate {", "} sk_socket_delegate_t;"),
                                     ("UDP", "typedef struct sk_udp_socket_delegate {", "} sk_udp_socket_delegate_t;")):
        members = [name for name in struct_fields(header_block(header, opening, closing)) if name != "size"]
        report.same(f"socketkit.h {closing[2:-1]} members",
                    {row["C member"] for row in events if row["Socket"] == socket}, set(members))
    return event_fields


# ---- Python, at run time ---------------------------------------------------------------

def check_python(errors, events, header_event_fields, report):
    try:
        socketkit = importlib.import_module("socketkit")
        errors_module = importlib.import_module("socketkit.errors")
        ffi = importlib.import_module("socketkit._ffi")
    except Exception as error:  # noqa: BLE001 - any import failure is the finding
        report.fail(f"cannot import socketkit ({error!r}): run this with the development virtualenv's python")
        return

    # Error codes: the constants of socketkit.errors, the class each code raises, and every
    # exported class that claims a code.
    constants = {name: value for name, value in vars(errors_module).items()
                 if re.fullmatch(r"[A-Z][A-Z0-9_]*", name) and isinstance(value, int) and not isinstance(value, bool)}
    report.same("socketkit.errors constants",
                {re.sub(r"^SK_(ERR_)?", "", row["C name"]): row["code"] for row in errors}, constants)
    raised = {}
    for row in errors:
        if row["code"] == 0:
            continue
        cls = type(errors_module.error_from_code(row["code"], 0, "message"))
        raised[row["code"]] = cls.__name__
        if getattr(socketkit, cls.__name__, None) is not cls:
            report.fail(f"socketkit: {cls.__name__} (code {row['code']}) is not exported by the package")
        if cls.code != row["code"]:
            report.fail(f"socketkit.{cls.__name__}.code is {cls.code}, the table says {row['code']}")
    report.same("socketkit.errors.error_from_code classes",
                {row["code"]: row["Python"] for row in errors if row["code"] != 0}, raised)
    codes = {row["code"] for row in errors}
    for name, value in vars(socketkit).items():
        if isinstance(value, type) and issubclass(value, socketkit.Error) and value.code not in codes:
            report.fail(f"socketkit.{name}.code = {value.code} is not in the table")

    # Events: the kind constants, the record's fields, the delegate method maps.
    kinds = {name: value for name, value in vars(ffi).items() if name.startswith("EVENT_") and isinstance(value, int)}
    report.same("socketkit._ffi EVENT_* constants",
                {row["C constant"][3:]: row["kind"] for row in events if row["kind"] is not None}, kinds)
    report.same("socketkit._ffi.Event fields", header_event_fields, {name for name, *_ in ffi.Event._fields_})
    methods = {}
    for module in delegate_modules(socketkit):
        for value in vars(module).values():
            if not (isinstance(value, dict) and value and all(isinstance(key, str) for key in value)):
                continue
            # A map's values are the C member, or a tuple that begins with it (the member and
            # what the binding wires to it).
            members = {key: item[0] if isinstance(item, tuple) and item else item for key, item in value.items()}
            if (all(isinstance(member, str) for member in members.values())
                    and all(re.fullmatch(r"(udp_)?socket_\w+", key) for key in members)
                    and all(re.fullmatch(r"did_\w+|should_\w+|new_\w+", member) for member in members.values())):
                for method, member in members.items():
                    methods[method] = ("UDP" if method.startswith("udp_") else "TCP", member)
    if not methods:
        report.fail("socketkit: found no delegate method -> member map (a dict such as "
                    "{'socket_did_read': 'did_read'} or {'socket_did_read': ('did_read', ...)}); Tests/check_tables.py must learn where it went")
    else:
        report.same("socketkit delegate methods", {row["Python"]: (row["Socket"], row["C member"]) for row in events},
                    methods)


def delegate_modules(package):
    modules = [package]
    for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
        if info.name.endswith("._speedups"):
            continue
        try:
            modules.append(importlib.import_module(info.name))
        except ImportError:
            pass
    return modules


# ---- Text files ------------------------------------------------------------------------

def check_speedups(errors, events, report):
    paths = sorted(glob.glob(os.path.join(SPEEDUPS, "_speedups*.[ch]")))
    if not any(path.endswith(os.sep + "_speedups.c") for path in paths):
        report.fail(f"{os.path.relpath(SPEEDUPS, TOP)}: no _speedups.c; Tests/check_tables.py must learn where it went")
    known = {row["C constant"] for row in events} | {row["C name"] for row in errors}
    for path in paths:
        source = open(path, encoding="utf-8").read()
        for name in sorted(set(re.findall(r"\bSK_(?:EVENT|ERR)_\w+", source)) - known):
            report.fail(f"{os.path.relpath(path, TOP)} uses {name}, which is not in the table")


def check_features(errors, events, report):
    text = open(FEATURES, encoding="utf-8").read()
    for row in errors:
        patterns = {row["C name"]: rf"(?<!\w){row['C name']}(?!\w)"}
        if row["code"] != 0:
            patterns[f".{row['Swift']}"] = rf"\.{row['Swift']}(?!\w)"
            patterns[row["Python"]] = rf"(?<!\w){row['Python']}(?!\w)"
        for name, pattern in patterns.items():
            if not re.search(pattern, text):
                report.fail(f"docs/FEATURES.md does not name {name} (error {row['code']})")
    for row in events:
        for name in (row["C member"], row["Python"]):
            if not re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text):
                report.fail(f"docs/FEATURES.md does not name {name} ({row['Socket']} delegate)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--library", default=DEFAULT_LIBRARY, help="libsocketkit.so to ask (default: %(default)s)")
    parser.add_argument("--write", action="store_true", help="regenerate the Swift error table and stop")
    options = parser.parse_args()
    errors, events = load_table()
    report = Report()
    check_swift_codes(errors, report, options.write)
    if options.write:
        return 0
    check_library(errors, options.library, report)
    header_event_fields = check_header(errors, events, report)
    check_python(errors, events, header_event_fields, report)
    check_speedups(errors, events, report)
    check_features(errors, events, report)
    for problem in report.problems:
        print(f"check_tables: {problem}", file=sys.stderr)
    if report.problems:
        print(f"check_tables: {len(report.problems)} disagreement(s) with docs/EVENTS_AND_ERRORS.md", file=sys.stderr)
        return 1
    print(f"check_tables: {len(errors)} error codes and {len(events)} delegate members agree in Swift, C, "
          "Python, the C extension and docs/FEATURES.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
