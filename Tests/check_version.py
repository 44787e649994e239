#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""check_version.py - every face of SocketKit shows the version of the header's version block.

    Tests/check_version.py --stage .build/stage --python .build/venv/bin/python [--dist .build/dist]

The version is written once, in include/socketkit.h (SK_VERSION_MAJOR, _MINOR, _PATCH, with
SK_VERSION_NUMBER and SK_VERSION_STRING spelled out for C and ctypes, and SK_VERSION_ABI, the
soname's number). Checked here: that block agrees with itself; the staged library's file
name, soname, symbol version and sk_version() / sk_version_number(); the version script;
the pkg-config and CMake files; the Python package (socketkit.__version__, the library it
loads, the soname it looks for); the wheels and sdist built, when --dist is given; and
CHANGELOG.md, which must have a section for the version. The Swift face (SocketKitVersion)
is checked by the Swift suite (VersionTests.swift), against the same macros.
"""
import argparse
import ctypes
import json
import os
import re
import subprocess
import sys
from pathlib import Path

TOP = Path(__file__).resolve().parent.parent


def header_block():
    text = (TOP / "include" / "socketkit.h").read_text()
    found = dict(re.findall(r'^#define SK_VERSION_(\w+) "?([0-9.]+)"?\s*$', text, re.MULTILINE))
    block = {name: int(found[name]) for name in ("MAJOR", "MINOR", "PATCH", "NUMBER", "ABI")}
    block["STRING"] = found["STRING"]
    return block


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stage", required=True, help="the staged install (.build/stage)")
    parser.add_argument("--python", required=True, help="a Python with this checkout's socketkit installed")
    parser.add_argument("--dist", help="the directory of the built wheels and sdist")
    arguments = parser.parse_args()
    stage = Path(arguments.stage)

    block = header_block()
    version, abi = block["STRING"], block["ABI"]
    failures = []

    def expect(what, found, wanted):
        if found != wanted:
            failures.append(f"{what}: {found!r}, expected {wanted!r}")

    expect("SK_VERSION_STRING", version, "{MAJOR}.{MINOR}.{PATCH}".format(**block))
    expect("SK_VERSION_NUMBER", block["NUMBER"], block["MAJOR"] * 10000 + block["MINOR"] * 100 + block["PATCH"])

    soname = f"libsocketkit.so.{abi}"
    library = stage / "lib" / f"libsocketkit.so.{version}"
    if not library.exists():
        failures.append(f"{library} does not exist: the staged library is not named for version {version}")
    else:
        dynamic = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True, check=True).stdout
        expect("the library's soname", re.search(r"Library soname: \[(.*?)\]", dynamic).group(1), soname)
        symbols = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True,
                                 check=True).stdout
        nodes = set(re.findall(r"@@(\w+)", symbols))
        expect("the library's symbol version", nodes, {f"SOCKETKIT_{abi}"})
        loaded = ctypes.CDLL(str(library))
        loaded.sk_version.restype = ctypes.c_char_p
        loaded.sk_version_number.restype = ctypes.c_uint
        expect("sk_version()", loaded.sk_version().decode(), version)
        expect("sk_version_number()", loaded.sk_version_number(), block["NUMBER"])
    expect("(stage)/lib/" + soname, os.path.realpath(stage / "lib" / soname), str(library.resolve()))

    script = re.sub(r"/\*.*?\*/", "", (TOP / "Sources" / "SocketKit" / "socketkit.map").read_text(), flags=re.DOTALL)
    expect("the version script's node", re.match(r"\s*(\w+)\s*\{", script).group(1), f"SOCKETKIT_{abi}")

    pc = (stage / "lib" / "pkgconfig" / "socketkit.pc").read_text()
    expect("socketkit.pc Version", re.search(r"^Version: (.*)$", pc, re.MULTILINE).group(1), version)
    cmake = stage / "lib" / "cmake" / "SocketKit" / "SocketKitConfigVersion.cmake"
    if cmake.exists():
        found = re.search(r'set\(PACKAGE_VERSION "(.*?)"\)', cmake.read_text())
        expect("SocketKitConfigVersion.cmake PACKAGE_VERSION", found and found.group(1), version)
    else:
        failures.append(f"{cmake} does not exist")

    probe = ("import json, socketkit, socketkit._version as v, socketkit._ffi as f; "
             "print(json.dumps([socketkit.__version__, socketkit.LIBRARY_VERSION, v.VERSION_NUMBER, v.SONAME, "
             "f.EXPECTED_VERSION_NUMBER]))")
    result = subprocess.run([os.path.abspath(arguments.python), "-c", probe], capture_output=True, text=True, cwd="/")
    if result.returncode != 0:
        failures.append(f"the Python package does not import: {result.stderr.strip()}")
    else:
        python_version, library_version, number, python_soname, expected = json.loads(result.stdout)
        expect("socketkit.__version__", python_version, version)
        expect("socketkit.LIBRARY_VERSION", library_version, version)
        expect("socketkit._version.VERSION_NUMBER", number, block["NUMBER"])
        expect("socketkit._ffi.EXPECTED_VERSION_NUMBER", expected, block["NUMBER"])
        expect("socketkit._version.SONAME", python_soname, soname)

    if arguments.dist:
        built = sorted(path.name for path in Path(arguments.dist).iterdir() if path.suffix in (".whl", ".gz"))
        if not built:
            failures.append(f"{arguments.dist} holds no wheel or sdist")
        for name in built:
            if not name.startswith(f"socketkit-{version}-") and name != f"socketkit-{version}.tar.gz":
                failures.append(f"{arguments.dist}/{name} is not named for version {version}")

    changelog = (TOP / "CHANGELOG.md").read_text() if (TOP / "CHANGELOG.md").exists() else ""
    # A released version's section ("## [0.2.0] - DATE"), or the Unreleased one naming it
    # ("## [Unreleased] - 0.2.0").
    if not re.search(r"^## (\[Unreleased\] - )?\[?" + re.escape(version) + r"\]?( |$)", changelog, re.MULTILINE):
        failures.append(f"CHANGELOG.md has no section for {version} ('## [{version}] - DATE' "
                        f"or '## [Unreleased] - {version}')")

    if failures:
        print("version check failed:\n  " + "\n  ".join(failures))
        return 1
    print(f"version check: {version} (ABI {abi}, {soname}) in the header, the library, the version script, "
          f"pkg-config, CMake, Python" + (", the wheels and sdist" if arguments.dist else "") + " and CHANGELOG.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
