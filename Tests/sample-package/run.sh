#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# run.sh - the sample package: SocketKit used from a package outside its repository.
#
#   Tests/sample-package/run.sh [SWIFT]        (make sample-test)
#
# Copies this directory to a directory of its own outside the checkout (one per checkout,
# kept between runs so the build is incremental), points its dependency at the checkout,
# builds it in the Swift 6 language mode with warnings as errors (SocketKit's sources
# included), and runs its programs: the README's two Swift examples (which must be the
# README's code blocks, word for word) and the async sample (TCP echo, STARTTLS, UDP), whose
# output is checked. Every run is bounded in time.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
top="$(cd "$here/../.." && pwd)"
swift="${1:-swift}"
work="${TMPDIR:-/tmp}/socketkit-sample-$(printf '%s' "$top" | cksum | cut -d' ' -f1)"

python3 "$here/check_readme.py" "$top/README.md" "$here/Sources/readme-delegate/main.swift" \
    "$here/Sources/readme-async/main.swift"

mkdir -p "$work/package"
rm -rf "$work/package/Sources"
cp -R "$here/Sources" "$work/package/Sources"
sed "s|SOCKETKIT_PATH|$top|" "$here/Package.swift" > "$work/package/Package.swift"
"$swift" build --package-path "$work/package" --scratch-path "$work/build" -Xswiftc -warnings-as-errors

# A certificate for localhost, made here and never kept.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj "/CN=localhost" -addext "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1" \
    -keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null

bin="$("$swift" build --package-path "$work/package" --scratch-path "$work/build" --show-bin-path)"
expect() { # name expected-line...
    local name=$1; shift
    local output
    output="$(timeout 60 "$bin/$name" "${RUN_ARGS[@]}")" || { echo "$output"; echo "sample-test: $name failed"; exit 1; }
    echo "$output"
    for line in "$@"; do
        grep -qxF -- "$line" <<<"$output" || { echo "sample-test: $name did not print: $line"; exit 1; }
    done
}
RUN_ARGS=()
expect readme-delegate "read: hello, delegate"
expect readme-async "read: hello, async"
RUN_ARGS=("$work/cert.pem" "$work/key.pem")
expect async-sample "tcp echo: 100000 bytes back" "starttls: hello -> got hello (plain)" "starttls: STARTTLS -> OK" \
    "starttls: secret -> got secret (secure)" "udp: one -> pong: one" "udp: two -> pong: two" "async-sample: ok"
echo "sample-test: the sample package builds with warnings as errors and its programs ran"
