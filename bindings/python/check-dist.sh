#!/bin/sh
# SPDX-License-Identifier: MIT
# check-dist.sh - the Python distributions of `make python` as a user gets them
# (`make python-dist-test`):
#
#   bindings/python/check-dist.sh PYTHON DIST AUDITWHEEL
#
# 1. The manylinux wheel in DIST holds the library and, bundled by auditwheel, OpenSSL.
# 2. It installs (no index, no build) into a new virtualenv of PYTHON, where
#    dist_smoke.py imports it and runs a loopback echo, plain and TLS, with `env -i`: nothing
#    of this checkout or this shell is reachable.
# 3. On another CPython (the newest of 3.9-3.13 found that is not PYTHON's), the sdist is
#    built into a wheel (pip unpacks it away from this checkout: libsocketkit is built from
#    the Swift sources the sdist carries), repaired by auditwheel, installed into a new
#    virtualenv of that CPython and checked the same way. With no other CPython installed,
#    step 3 uses PYTHON and says so.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
python=$1
dist=$(cd "$2" && pwd)
auditwheel=$3
work=$top/.build/dist-test
rm -rf "$work"
mkdir -p "$work"
certs=$work/certs
sh "$top/Tests/certs/make-test-certs.sh" "$certs"

wheel=$(ls "$dist"/socketkit-*-manylinux_*.whl)
sdist=$(ls "$dist"/socketkit-*.tar.gz)

# $1: a wheel; checks what it bundles.
check_wheel() {
    contents=$("$python" -m zipfile -l "$1")
    for expected in socketkit/_lib/libsocketkit.so. socketkit.libs/libssl- socketkit.libs/libcrypto- socketkit/_speedups.cpython-; do
        echo "$contents" | grep -q "$expected" || { echo "check-dist: $1 lacks $expected*"; echo "$contents"; exit 1; }
    done
}

# $1: interpreter, $2: wheel, $3: name; a new virtualenv, the wheel alone, the smoke test.
install_and_run() {
    venv=$work/venv-$3
    "$1" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --no-index --no-deps "$2"
    # -I: isolated, so the script's own directory (bindings/python, with the package of this
    # checkout) is not on sys.path.
    (cd / && env -i PATH=/usr/bin:/bin HOME="$work" "$venv/bin/python" -I "$top/bindings/python/dist_smoke.py" "$certs")
}

check_wheel "$wheel"
echo "check-dist: $(basename "$wheel") in a new virtualenv ($("$python" --version))"
install_and_run "$python" "$wheel" default

default=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
other=""
for version in 3.13 3.12 3.10 3.9 3.11; do
    [ "$version" = "$default" ] && continue
    if command -v pyenv > /dev/null 2>&1; then
        for candidate in "$(pyenv root)"/versions/"$version".*/bin/python"$version"; do
            [ -x "$candidate" ] && other=$candidate
        done
    fi
    [ -n "$other" ] || other=$(command -v "python$version" || true)
    [ -n "$other" ] && break
done
if [ -z "$other" ]; then
    echo "check-dist: no CPython but $default is installed: the sdist is built with it"
    other=$python
fi

echo "check-dist: $(basename "$sdist") built into a wheel by $("$other" --version) (libsocketkit from its Swift sources)"
"$other" -m venv "$work/venv-build"
echo "check-dist: installing from PyPI into $work/venv-build: pip (the sdist's build requirements follow, isolated)"
"$work/venv-build/bin/python" -m pip install -q --upgrade pip
env -u SOCKETKIT_PREBUILT -u SOCKETKIT_INCLUDE SOCKETKIT_REQUIRE_SPEEDUPS=1 \
    "$work/venv-build/bin/python" -m pip wheel -v --no-deps -w "$work/raw" "$sdist" > "$work/build.log" 2>&1 \
    || { tail -40 "$work/build.log"; echo "check-dist: building the sdist failed (all of it in $work/build.log)"; exit 1; }
grep -q "Build of product 'socketkit' complete" "$work/build.log" \
    || { echo "check-dist: the sdist's wheel did not build libsocketkit from source ($work/build.log)"; exit 1; }
PATH=$(dirname "$auditwheel"):$PATH "$auditwheel" repair --wheel-dir "$work/repaired" "$work"/raw/*.whl > "$work/auditwheel.log" 2>&1 \
    || { cat "$work/auditwheel.log"; exit 1; }
other_wheel=$(ls "$work"/repaired/socketkit-*-manylinux_*.whl)
check_wheel "$other_wheel"
echo "check-dist: $(basename "$other_wheel") in a new virtualenv"
install_and_run "$other" "$other_wheel" other
echo "check-dist: the wheel and the sdist install and run on CPython $default and $("$other" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
