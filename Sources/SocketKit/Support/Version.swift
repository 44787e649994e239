// SPDX-License-Identifier: MIT
import SocketKitC

/// SocketKit's version, as the C header's `SK_VERSION_*` macros, `sk_version()` and Python's
/// `socketkit.__version__` give it: one number, written once, in `include/socketkit.h`'s
/// version block (the Makefile, the pkg-config and CMake files and the Python package read it
/// from there). `CHANGELOG.md` says what each part's change promises.
public enum SocketKitVersion {
    public static let major = Int(SK_VERSION_MAJOR)
    public static let minor = Int(SK_VERSION_MINOR)
    public static let patch = Int(SK_VERSION_PATCH)
    /// `major * 10000 + minor * 100 + patch`, the C API's `SK_VERSION_NUMBER`.
    public static let number = major * 10000 + minor * 100 + patch
    /// "MAJOR.MINOR.PATCH".
    public static let string = "\(major).\(minor).\(patch)"
}
