# SPDX-License-Identifier: MIT
"""Finding and loading libsocketkit.

Tried in this order:

1. ``SOCKETKIT_LIBRARY``: the full path of a libsocketkit.so;
2. the copy bundled in this package (``socketkit/_lib/libsocketkit.so.ABI``: wheels);
3. a development checkout: ``.build/release/libsocketkit.so`` in the first parent directory
   holding ``Package.swift`` (editable installs);
4. the libdir pkg-config reports for ``socketkit`` (``make install``);
5. the system loader (``libsocketkit.so.ABI`` through ld.so.conf or ``LD_LIBRARY_PATH``).

When none works, ImportError says what was tried and why each failed.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path
from typing import List, Optional, Tuple

from ._version import SONAME as _SONAME


def _candidates() -> List[Tuple[str, Optional[str]]]:
    """(description, path or None when the step found nothing to try)."""
    found: List[Tuple[str, Optional[str]]] = []
    explicit = os.environ.get("SOCKETKIT_LIBRARY")
    found.append(("SOCKETKIT_LIBRARY", explicit or None))

    bundled = Path(__file__).resolve().parent / "_lib" / _SONAME
    found.append(("bundled copy", str(bundled) if bundled.exists() else None))

    checkout = None
    for parent in Path(__file__).resolve().parents:
        if (parent / "Package.swift").exists():
            candidate = parent / ".build" / "release" / "libsocketkit.so"
            checkout = str(candidate) if candidate.exists() else None
            break
    found.append(("development checkout", checkout))

    libdir = None
    if shutil.which("pkg-config"):
        try:
            result = subprocess.run(
                ["pkg-config", "--variable=libdir", "socketkit"], capture_output=True, text=True, timeout=10
            )
            if result.returncode == 0 and result.stdout.strip():
                candidate = Path(result.stdout.strip()) / _SONAME
                libdir = str(candidate) if candidate.exists() else None
        except (OSError, subprocess.SubprocessError):
            libdir = None
    found.append(("pkg-config libdir", libdir))

    found.append(("system loader", _SONAME))
    return found


def load_library(expected_version: int) -> ctypes.CDLL:
    """Loads the first library that exists and matches this binding's major and minor version."""
    tried = []
    for description, path in _candidates():
        if path is None:
            tried.append(f"{description}: not found")
            continue
        try:
            library = ctypes.CDLL(path)
        except OSError as error:
            tried.append(f"{description} ({path}): {error}")
            continue
        try:
            library.sk_version_number.restype = ctypes.c_uint
            version = library.sk_version_number()
        except AttributeError:
            tried.append(f"{description} ({path}): not a SocketKit library")
            continue
        if version // 100 != expected_version // 100:
            tried.append(
                f"{description} ({path}): version {version} does not match this binding ({expected_version})"
            )
            continue
        return library
    raise ImportError("cannot load libsocketkit; tried:\n  " + "\n  ".join(tried))
