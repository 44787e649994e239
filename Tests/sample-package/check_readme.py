#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""check_readme.py README PROGRAM...: each PROGRAM is one of README's ```swift blocks, word
for word, its SPDX line aside (the README shows what Tests/sample-package builds and runs).
Exits 1 otherwise."""
import re
import sys

readme = open(sys.argv[1]).read()
blocks = [block.strip() for block in re.findall(r"^```swift\n(.*?)^```", readme, re.M | re.S)]
problems = 0
for path in sys.argv[2:]:
    program = open(path).read()
    # The licence line every source file starts with is not shown in the README.
    program = re.sub(r"\A// SPDX-License-Identifier: [^\n]*\n", "", program).strip()
    if program not in blocks:
        print("check_readme: %s is not a ```swift block of %s (update one from the other)" % (path, sys.argv[1]))
        problems += 1
sys.exit(1 if problems else 0)
