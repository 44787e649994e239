"""Builds the wheel with libsocketkit inside it.

The library comes from, in order: SOCKETKIT_PREBUILT (a path to libsocketkit.so), or a
release build of the repository this package sits in (`swift build` with the shipping
flags, through the top-level Makefile's `library` target). It is copied to
socketkit/_lib/libsocketkit.so.0, and the wheel is tagged for the platform (it holds
native code) rather than "any".
"""
import os
import shutil
import subprocess
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70
    from wheel.bdist_wheel import bdist_wheel

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


class PlatformWheel(bdist_wheel):
    def get_tag(self):
        return "py3", "none", super().get_tag()[2]


setup(distclass=BinaryDistribution, cmdclass={"build_py": BuildWithLibrary, "bdist_wheel": PlatformWheel})
