# SPDX-License-Identifier: MIT
"""Static types: `mypy --strict` passes on the package, its examples and a file of
well-typed uses, and reports exactly the deliberate misuses of tests/typing/misuse.py (a
misspelt method, a str where bytes go, a delegate method with the wrong signature, ...),
each with the error code its ``# expect:`` comment names.

mypy comes from PyPI (requirements-typing.txt, installed by the Makefile in .build/venv;
`make python-test` sets SOCKETKIT_REQUIRE_MYPY so that a missing mypy fails there). The
other interpreters' runs (run-versions.sh) do without it: the check does not depend on
the interpreter that runs the suite, and --python-version 3.9 covers the oldest one."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
PACKAGE_ROOT = HERE.parent  # bindings/python: mypy finds the socketkit package here
CACHE = PACKAGE_ROOT.parents[1] / ".build" / "mypy-cache"
MISUSE = HERE / "typing" / "misuse.py"
WELLFORMED = HERE / "typing" / "wellformed.py"


def mypy(*arguments):
    try:
        import mypy  # noqa: F401
    except ImportError:
        if os.environ.get("SOCKETKIT_REQUIRE_MYPY"):
            pytest.fail("mypy is not installed: pip install -r requirements-typing.txt (the Makefile does)")
        pytest.skip("mypy is not installed in this interpreter's environment; `make python-test` runs these "
                    "static checks (requirements-typing.txt)")
    result = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--show-error-codes",
                             "--cache-dir", str(CACHE), *arguments], cwd=PACKAGE_ROOT, capture_output=True,
                            text=True, timeout=600)
    return result


@pytest.mark.parametrize("target", ["3.9", "current"])
def test_mypy_strict_passes_on_the_package_and_its_examples(target):
    options = ["--python-version", "3.9"] if target == "3.9" else []
    result = mypy(*options, "socketkit", "examples", str(WELLFORMED.relative_to(PACKAGE_ROOT)))
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_reports_every_deliberate_misuse_and_nothing_else():
    expected = set()
    for number, line in enumerate(MISUSE.read_text().splitlines(), 1):
        match = re.search(r"# expect: ([a-z-]+)", line)
        if match:
            expected.add((number, match.group(1)))
    assert len(expected) >= 20
    result = mypy(str(MISUSE.relative_to(PACKAGE_ROOT)))
    assert result.returncode == 1, result.stdout + result.stderr
    reported = set()
    for line in result.stdout.splitlines():
        match = re.match(r"(.+?):(\d+): error: .*\[([a-z-]+)\]$", line)
        if match:
            assert Path(match.group(1)).name == MISUSE.name, f"an error outside the misuse file: {line}"
            reported.add((int(match.group(2)), match.group(3)))
    assert reported == expected, (f"missing: {sorted(expected - reported)}; unexpected: {sorted(reported - expected)}"
                                  f"\n{result.stdout}")
