#!/bin/sh
# SPDX-License-Identifier: MIT
# run-versions.sh - the Python suite on every CPython from 3.9 to 3.13 found on the machine
# (pyenv's versions, or python3.X on PATH), each in its own virtualenv under .build, with the
# binding's C extension (which must build and load) and then with ctypes only. A version
# that is not installed is skipped with a message; `make python-test` covers the default
# interpreter, named by $1, which is skipped here.
#
#   bindings/python/run-versions.sh PYTHON LIBRARY
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
default=$("$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
library=$2
ran=""
for version in 3.9 3.10 3.11 3.12 3.13; do
    [ "$version" = "$default" ] && continue
    interpreter=""
    if command -v pyenv > /dev/null 2>&1; then
        for candidate in "$(pyenv root)"/versions/"$version".*/bin/python"$version"; do
            [ -x "$candidate" ] && interpreter=$candidate
        done
    fi
    [ -n "$interpreter" ] || interpreter=$(command -v "python$version" || true)
    if [ -z "$interpreter" ]; then
        echo "python-versions-test: CPython $version is not installed here: skipped"
        continue
    fi
    venv=$top/.build/venv-$version
    if [ ! -f "$venv/.ready" ]; then
        rm -rf "$venv"
        "$interpreter" -m venv "$venv"
        "$venv/bin/python" -m pip install -q --upgrade pip
        "$venv/bin/python" -m pip install -q --upgrade pytest pytest-timeout setuptools wheel
        touch "$venv/.ready"
    fi
    # Editable, as the default virtualenv: the package of this checkout, its C extension
    # built in place for this interpreter (the file name carries the version), the library
    # given.
    rm -f "$top"/bindings/python/socketkit/_speedups.cpython-"$(echo "$version" | tr -d .)"-*.so
    SOCKETKIT_PREBUILT=$library SOCKETKIT_REQUIRE_SPEEDUPS=1 \
        "$venv/bin/python" -m pip install -q --no-build-isolation -e "$top/bindings/python"
    echo "python-versions-test: CPython $version ($interpreter)"
    (cd "$top/bindings/python" && SOCKETKIT_EXPECT_SPEEDUPS=1 "$venv/bin/python" -m pytest -q -p no:cacheprovider tests)
    (cd "$top/bindings/python" && SOCKETKIT_NO_SPEEDUPS=1 "$venv/bin/python" -m pytest -q -p no:cacheprovider tests)
    ran="$ran $version"
done
echo "python-versions-test: passed on CPython$ran (and $default in python-test)"
