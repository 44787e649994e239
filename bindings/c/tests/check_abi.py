#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks that socketkit.h and libsocketkit.so agree exactly.

1. Every sk_* function the library exports is declared in the header, and every function
   the header declares is exported.
2. The library exports nothing but sk_* (plus its version node).
3. With --swift-header (the compiler-generated SocketKit-Swift.h, which lists each
   @_cdecl implementation's real signature): every function's parameters and result have
   the same ABI class on both sides (pointer, 32-bit or 64-bit integer, double, ...), so a
   prototype that drifted from its implementation is caught.
"""
import argparse
import re
import subprocess
import sys

FUNCTION = re.compile(r"^\s*([A-Za-z_][\w\s\*]*?[\s\*])(sk_[a-z0-9_]+)\s*\(([^;{]*)\)\s*[^;{]*;", re.M | re.S)


def exported_symbols(library):
    output = subprocess.run(["nm", "-D", "--defined-only", library], check=True, capture_output=True, text=True).stdout
    symbols = {}
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1].isupper():
            symbols[parts[2].split("@")[0]] = parts[1]
    return symbols


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def declarations(text):
    """name -> (result type, [parameter types]) for every sk_ function declared."""
    found = {}
    for match in FUNCTION.finditer(strip_comments(text)):
        result, name, parameters = match.group(1), match.group(2), match.group(3)
        found[name] = (result.strip(), split_parameters(parameters))
    return found


def split_parameters(text):
    parts, depth, current = [], 0, ""
    for character in text:
        if character == "(":
            depth += 1
        elif character == ")":
            depth -= 1
        if character == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += character
    if current.strip():
        parts.append(current)
    return [part.strip() for part in parts if part.strip() != "void"]


# Function-pointer typedefs of the header (sk_udp_send_filter_fn, ...): pointers.
POINTER_TYPEDEFS = set()


def find_pointer_typedefs(text):
    for match in re.finditer(r"typedef[^;]*?\(\s*\*\s*([A-Za-z_]\w*)\s*\)\s*\(", strip_comments(text)):
        POINTER_TYPEDEFS.add(match.group(1))


def abi_class(declaration):
    text = re.sub(r"\b(const|struct|_Nullable|_Nonnull|SWIFT_NOESCAPE)\b", " ", declaration)
    text = " ".join(text.split())
    if "(" in text or "*" in text or (text.split() and text.split()[0] in POINTER_TYPEDEFS):
        return "pointer"
    words = text.split()
    # Drop a parameter name when present (the last word, if more than one).
    if len(words) > 1 and words[-1] not in ("int", "long", "double", "char", "unsigned", "size_t"):
        words = words[:-1]
    kind = " ".join(words)
    table = {
        "int": "int32", "int32_t": "int32", "unsigned": "int32", "uint32_t": "int32", "socklen_t": "int32",
        "long": "int64", "size_t": "int64", "NSInteger": "int64", "NSUInteger": "int64", "int64_t": "int64",
        "uint16_t": "int16", "double": "double", "void": "void", "uint64_t": "int64", "unsigned long long": "int64",
    }
    return table.get(kind, "?" + kind)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--header", required=True)
    parser.add_argument("--library", required=True)
    parser.add_argument("--swift-header")
    args = parser.parse_args()

    problems = []
    header_text = open(args.header).read()
    find_pointer_typedefs(header_text)
    header = declarations(header_text)
    symbols = exported_symbols(args.library)
    exported = {name for name in symbols if name.startswith("sk_")}
    others = sorted(name for name, kind in symbols.items() if not name.startswith("sk_") and kind != "A")
    for name in sorted(set(header) - exported):
        problems.append(f"declared in the header but not exported: {name}")
    for name in sorted(exported - set(header)):
        problems.append(f"exported but not declared in the header: {name}")
    for name in others:
        problems.append(f"exported symbol outside the C API: {name}")

    compared = 0
    if args.swift_header:
        implemented = declarations(open(args.swift_header).read())
        for name, (result, parameters) in sorted(header.items()):
            if name not in implemented:
                problems.append(f"no @_cdecl implementation found for {name}")
                continue
            swift_result, swift_parameters = implemented[name]
            declared = [abi_class(result)] + [abi_class(parameter) for parameter in parameters]
            actual = [abi_class(swift_result.replace("SWIFT_EXTERN", ""))] + [abi_class(p) for p in swift_parameters]
            if declared != actual:
                problems.append(f"{name}: header says {declared}, implementation is {actual}")
            unknown = [kind for kind in declared + actual if kind.startswith("?")]
            if unknown:
                problems.append(f"{name}: types the check cannot classify: {unknown} (teach abi_class)")
            compared += 1

    for problem in problems:
        print("abi-check: " + problem)
    if problems:
        return 1
    print(f"abi-check: {len(exported)} functions exported, all declared; nothing else exported"
          + (f"; {compared} signatures match their implementations" if compared else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
