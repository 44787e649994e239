#!/usr/bin/env python3
"""check_readme.py README PROGRAM...: each PROGRAM is one of README's ```swift blocks, word
for word (the README shows what Tests/sample-package builds and runs). Exits 1 otherwise."""
import re
import sys

readme = open(sys.argv[1]).read()
blocks = [block.strip() for block in re.findall(r"^```swift\n(.*?)^```", readme, re.M | re.S)]
problems = 0
for path in sys.argv[2:]:
    program = open(path).read().strip()
    if program not in blocks:
        print("check_readme: %s is not a ```swift block of %s (update one from the other)" % (path, sys.argv[1]))
        problems += 1
sys.exit(1 if problems else 0)
