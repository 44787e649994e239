# SPDX-License-Identifier: MIT
"""processes.py - a program started for a test, its standard output read line by line with
a deadline: what the example tests of the C suite (bindings/c/tests/run_examples.py) and of
the Python one (bindings/python/tests/test_examples.py) share."""
import os
import selectors
import signal
import subprocess
import time

DEADLINE = 30.0


class Process:
    """A started program. Every wait has a deadline; kill() ends it whatever happened."""

    def __init__(self, command, environment=None, stdin=False):
        self.command = command
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.process.stdout, selectors.EVENT_READ)
        self.buffer = b""
        self.lines = []
        self.errors = ""

    def line(self, timeout=DEADLINE):
        """The next line of standard output (without its newline); AssertionError at the
        deadline or at the end of the output."""
        limit = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = limit - time.monotonic()
            if left <= 0 or not self.selector.select(left):
                raise AssertionError(f"{self.command[-1]}: no line within {timeout} s (so far: {self.lines})")
            chunk = os.read(self.process.stdout.fileno(), 65536)
            if not chunk:
                raise AssertionError(f"{self.command[-1]}: output ended (so far: {self.lines}); "
                                     f"stderr: {self.process.stderr.read().decode(errors='replace')}")
            self.buffer += chunk
        text, self.buffer = self.buffer.split(b"\n", 1)
        self.lines.append(text.decode(errors="replace"))
        return self.lines[-1]

    def write(self, text):
        self.process.stdin.write(text.encode())
        self.process.stdin.flush()

    def finish(self, timeout=DEADLINE):
        """Closes its input and waits for its end; its exit status (self.lines gets the rest
        of its output, self.errors its standard error)."""
        if self.process.stdin:
            self.process.stdin.close()
            self.process.stdin = None  # communicate() would flush it
        try:
            rest, errors = self.process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.command[-1]} did not end within {timeout} s")
        self.lines += (self.buffer + rest).decode(errors="replace").splitlines()
        self.errors = errors.decode(errors="replace")
        return self.process.returncode

    def stop(self):
        """SIGTERM, then finish(); its exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.finish()

    def kill(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
