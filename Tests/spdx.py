#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""spdx.py - every source file of SocketKit starts with its licence's SPDX identifier.

    Tests/spdx.py            check (make spdx-check, part of make test): list the source
                             files without "SPDX-License-Identifier: MIT" near their top,
                             exit 1 if there is one
    Tests/spdx.py --write    add the line where it is missing, in each file's own comment
                             syntax, after a first line that must stay first (#!, Swift's
                             swift-tools-version)

Source files: the code and build files the repository tracks or is about to (git's cached
and untracked, not ignored, files; outside git, every file under the top but build trees):
Swift, C and C++, Python, shell, Makefiles, CMake and pkg-config templates, the linker
version script, pyproject.toml and MANIFEST.in. Not documentation, licences, data files
(suppressions, budgets, server lists) nor .ci/ (the CI entry point). A generated file
carries the line because its generator writes it (Tests/check_tables.py).
"""
import argparse
import os
import subprocess
import sys

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IDENTIFIER = "SPDX-License-Identifier: MIT"
# How far down the identifier may be: after a line that must be first, and a blank one.
WITHIN_LINES = 3

# File name suffixes (or whole names) and the comment that carries the identifier.
COMMENTS = {
    ".swift": "// {}",
    ".cpp": "// {}",
    ".c": "/* {} */",
    ".h": "/* {} */",
    ".map": "/* {} */",
    ".py": "# {}",
    ".sh": "# {}",
    ".cmake.in": "# {}",
    ".pc.in": "# {}",
    "Makefile": "# {}",
    "CMakeLists.txt": "# {}",
    "pyproject.toml": "# {}",
    "MANIFEST.in": "# {}",
}
SKIPPED_DIRECTORIES = {".git", ".ci", "__pycache__", "build", "dist"}


def comment_for(path):
    name = os.path.basename(path)
    if name in COMMENTS:
        return COMMENTS[name]
    for suffix in sorted((key for key in COMMENTS if key.startswith(".")), key=len, reverse=True):
        if name.endswith(suffix):
            return COMMENTS[suffix]
    return None


def candidate_files():
    """Relative paths of the files git tracks or would track; every file outside git."""
    try:
        listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=TOP,
                                capture_output=True, check=True).stdout.decode().split("\0")
        return sorted(path for path in listed if path and os.path.isfile(os.path.join(TOP, path)))
    except (OSError, subprocess.CalledProcessError):
        found = []
        for directory, subdirectories, files in os.walk(TOP):
            subdirectories[:] = [name for name in subdirectories
                                 if name not in SKIPPED_DIRECTORIES and not name.startswith((".build", ".venv"))]
            found += [os.path.relpath(os.path.join(directory, name), TOP) for name in files]
        return sorted(found)


def source_files():
    return [path for path in candidate_files()
            if not path.startswith((".ci/", ".")) and comment_for(path) is not None]


def has_identifier(text):
    return any(IDENTIFIER in line for line in text.splitlines()[:WITHIN_LINES])


def with_identifier(text, comment):
    """`text` with the identifier's line added after a first line that must stay first."""
    line = comment.format(IDENTIFIER) + "\n"
    first, _, rest = text.partition("\n")
    if first.startswith("#!") or first.startswith("// swift-tools-version"):
        return first + "\n" + line + rest
    return line + text


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="add the identifier where it is missing")
    parser.add_argument("files", nargs="*", help="these files (relative to the top) instead of every source file")
    arguments = parser.parse_args()
    files = arguments.files or source_files()
    missing = []
    for path in files:
        comment = comment_for(path)
        if comment is None:
            continue
        full = os.path.join(TOP, path)
        with open(full, encoding="utf-8") as file:
            text = file.read()
        if has_identifier(text):
            continue
        if arguments.write:
            with open(full, "w", encoding="utf-8") as file:
                file.write(with_identifier(text, comment))
            print(f"added: {path}")
        else:
            missing.append(path)
    if missing:
        print(f"spdx: {len(missing)} source files lack '{IDENTIFIER}' in their first {WITHIN_LINES} lines "
              "(Tests/spdx.py --write adds it):\n  " + "\n  ".join(missing))
        return 1
    if not arguments.write:
        print(f"spdx: {len(files)} source files carry '{IDENTIFIER}'")
    return 0


if __name__ == "__main__":
    sys.exit(main())
