#!/bin/sh
# SPDX-License-Identifier: MIT
# run.sh - `make cmake-test`: find_package(SocketKit) from a CMake project, against an
# installed SocketKit (its package config in PREFIX/lib/cmake/SocketKit).
#
#   Tests/cmake/run.sh PREFIX BUILD_DIRECTORY
#
# Configures the project in Tests/cmake asking for the installed version exactly, builds it,
# runs it (a C++ loopback echo through SocketKit::socketkit); then checks that a version the
# package does not satisfy is refused at configure time.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
prefix=$(cd "$1" && pwd)
build=$2
version=$(sed -n 's/^set(PACKAGE_VERSION "\(.*\)")$/\1/p' "$prefix/lib/cmake/SocketKit/SocketKitConfigVersion.cmake")

rm -rf "$build"
cmake -S "$here" -B "$build/ok" -DCMAKE_PREFIX_PATH="$prefix" -DSOCKETKIT_WANT="$version" > "$build.log" 2>&1 \
    || { cat "$build.log"; echo "cmake-test: configuring with find_package(SocketKit $version) failed"; exit 1; }
grep "SocketKit $version from $prefix/lib/cmake/SocketKit" "$build.log"
cmake --build "$build/ok" > "$build.log" 2>&1 || { cat "$build.log"; echo "cmake-test: the build failed"; exit 1; }
"$build/ok/loopback_echo"

# A later major version than the installed one is refused.
if cmake -S "$here" -B "$build/newer" -DCMAKE_PREFIX_PATH="$prefix" -DSOCKETKIT_WANT=99.0 > "$build.log" 2>&1; then
    cat "$build.log"; echo "cmake-test: find_package(SocketKit 99.0) accepted SocketKit $version"; exit 1
fi
grep -q "SocketKitConfig.cmake, version: $version" "$build.log" \
    || { cat "$build.log"; echo "cmake-test: find_package(SocketKit 99.0) failed for another reason"; exit 1; }
echo "cmake-test: find_package(SocketKit $version) and SocketKit::socketkit work; 99.0 is refused"
