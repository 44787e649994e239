"""Builds the wheel with libsocketkit inside it.

The library comes from, in order: SOCKETKIT_PREBUILT (a path to libsocketkit.so), or a
release build of the repository this package sits in (`swift build` with the shipping
flags, through the top-level Makefile's `library` target). It is copied to
socketkit/_lib/libsocketkit.so.0, and the wheel is tagged for the platform (it holds
native code) rather than "any".

The C hot paths (socketkit/_speedups*.c, against the repository's include/socketkit.h)
are built when a C compiler and Python's headers are there (python3-dev); without them
the wheel still works, through ctypes only (socketkit.SPEEDUPS is then False).
"""
import os
import shutil
import subprocess
from pathlib import Path

from setuptools import Distribution, Extension, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
REPOSITORY = HERE.parent.parent


def built_library() -> Path:
    prebuilt = os.environ.get("SOCKETKIT_PREBUILT")
    if prebuilt:
        return Path(prebuilt)
    if not (REPOSITORY / "Package.swift").exists():
        raise SystemExit("socketkit: set SOCKETKIT_PREBUILT to a libsocketkit.so (no SocketKit checkout found)")
    subprocess.run(["make", "-C", str(REPOSITORY), "library"], check=True)
    return REPOSITORY / ".build" / "stage" / "lib" / "libsocketkit.so.0"


class BuildWithLibrary(build_py):
    def run(self):
        super().run()
        target = Path(self.build_lib) / "socketkit" / "_lib"
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built_library().resolve(), target / "libsocketkit.so.0")


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


# The extension's files are all named socketkit/_speedups*.c and _speedups*.h: the Makefile,
# Tests/check_tables.py and tests/test_speedups.py find them by that name.
SPEEDUPS_SOURCES = ["socketkit/_speedups.c", "socketkit/_speedups_dispatch.c"]


def speedups():
    """The optional extension (a failed build leaves the ctypes paths)."""
    header_directory = os.environ.get("SOCKETKIT_INCLUDE") or str(REPOSITORY / "include")
    if not (Path(header_directory) / "socketkit.h").exists():
        return []
    # SOCKETKIT_REQUIRE_SPEEDUPS=1: a failed build fails the install instead.
    return [Extension("socketkit._speedups", SPEEDUPS_SOURCES, include_dirs=[header_directory],
                      depends=["socketkit/_speedups.h", str(Path(header_directory) / "socketkit.h")],
                      extra_compile_args=["-O2"], optional=not os.environ.get("SOCKETKIT_REQUIRE_SPEEDUPS"))]


# The wheel holds a CPython extension: setuptools tags it for this interpreter and platform.
setup(distclass=BinaryDistribution, cmdclass={"build_py": BuildWithLibrary}, ext_modules=speedups())
