# SocketKit: build, test, install.
#
#   make                      build the library (.so, header, pkg-config file), the Python
#                             package (a wheel in .build/dist), and run the demos
#   make test                 every suite: Swift, C (valgrind and sanitizers), header/ABI
#                             checks, the event and error tables, Python (pytest, on every
#                             CPython 3.9-3.13 found), a clean `pip install`, and the
#                             instruction budgets of the hot paths (callgrind)
#   make sanitize             the Swift suite under ThreadSanitizer, then AddressSanitizer
#                             and LeakSanitizer (part of `make test`, through hardening-test)
#   make fuzz FUZZ_SECONDS=N  each fuzzer of fuzz/ for N seconds (report: .build-fuzz/fuzz-report.md)
#   make soak SOAK_MINUTES=N  1,000 connections against the C, Swift and Python echo servers
#                             for N minutes in all (report: .build/soak/soak-report.md)
#   make hardening-test       what `make test` runs of the above: sanitize, the fuzzers' smoke
#                             runs, a two-minute soak, the hostile-peer tests
#   make bench                the benchmarks (SocketKit beside C epoll, libuv, SwiftNIO,
#                             asyncio, uvloop; allocations; idle memory), written to
#                             docs/PERFORMANCE.md (~25 minutes; BENCH_REPS=1 for ~10)
#   make install PREFIX=...   install the library, its soname links, the header and the .pc
#   make uninstall PREFIX=...
#
# Missing Debian packages are installed with apt-get when running as root; otherwise the
# build stops and says which ones to install.

VERSION    := 0.1.0
PREFIX     ?= /usr/local
DESTDIR    ?=
SWIFT      ?= swift
PYTHON     ?= python3

SONAME     := libsocketkit.so.0
LIBFILE    := libsocketkit.so.$(VERSION)
BUILD      := $(CURDIR)/.build
STAGE      := $(BUILD)/stage
# The shipping library: the Swift runtime linked in (loads with no toolchain around), only
# sk_* exported (version script), a soname, never unloaded (-z nodelete: Swift code must not
# be), DWARF 4 so valgrind can read the C shim's debug info.
# -enforce-exclusivity=unchecked: no run-time exclusivity checks in the shipping build (the
# debug builds of `make swift-test` and `make sanitize` keep them, so every test still runs
# checked). Of every trick the engine keeps, this one saves the most instructions on the hot
# paths: bench/README.md, "Speed tricks", has the figures and how they were measured.
# EXTRA_RELEASE_FLAGS: to switch a speed trick off for a measurement (same section), e.g.
#   make c-prefix EXTRA_RELEASE_FLAGS="-Xcc -DSOCKETKIT_NO_DIRECT_SYSCALLS"
EXTRA_RELEASE_FLAGS ?=
RELEASE_FLAGS := -c release -Xswiftc -static-stdlib -Xswiftc -enforce-exclusivity=unchecked -Xcc -gdwarf-4 \
	-Xlinker --version-script=$(CURDIR)/Sources/SocketKit/socketkit.map \
	-Xlinker -soname=$(SONAME) -Xlinker -z -Xlinker nodelete $(EXTRA_RELEASE_FLAGS)

# Debian packages the build and the tests need (command -> package).
REQUIRED_TOOLS := cc:gcc pkg-config:pkg-config valgrind:valgrind python3:python3 strip:binutils openssl:openssl curl:curl socat:socat

.DEFAULT_GOAL := all
.PHONY: all tools library c-prefix demo test swift-test c-test python python-test python-versions-test python-install-test budget-test \
	tables-check \
	install uninstall clean bench bench-tools sanitize

C_PREFIX   := $(BUILD)/c-prefix
VENV       := $(BUILD)/venv
VENV_PY    := $(VENV)/bin/python
# The Python binding's C hot paths (socketkit/_speedups*.c and .h, one extension), built in
# place for the development virtualenv (wheels build it through setup.py).
SPEEDUPS   := bindings/python/socketkit/_speedups$(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))' 2>/dev/null)

all: library python demo

tools:
	@command -v $(SWIFT) >/dev/null 2>&1 || { echo "error: the Swift toolchain ($(SWIFT)) is not on PATH; install Swift 6 from swift.org"; exit 1; }
	@missing=""; for pair in $(REQUIRED_TOOLS); do \
		command -v $${pair%%:*} >/dev/null 2>&1 || missing="$$missing $${pair##*:}"; \
	done; \
	$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || missing="$$missing python3-venv"; \
	[ -f /usr/include/openssl/ssl.h ] || missing="$$missing libssl-dev"; \
	$(PYTHON) -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
		2>/dev/null || missing="$$missing python3-dev"; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing:$$missing"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null || exit 1; \
		else \
			echo "error: missing Debian packages:$$missing  (sudo apt-get install$$missing)"; exit 1; \
		fi; \
	fi

# The release build and the staged tree: $(STAGE)/{lib,include,lib/pkgconfig}.
library: tools
	$(SWIFT) build $(RELEASE_FLAGS)
	@rm -rf $(STAGE)
	@install -d $(STAGE)/lib/pkgconfig $(STAGE)/include
	@install -m 755 .build/release/libsocketkit.so $(STAGE)/lib/$(LIBFILE)
	@strip --strip-debug $(STAGE)/lib/$(LIBFILE)
	@ln -sf $(LIBFILE) $(STAGE)/lib/$(SONAME)
	@ln -sf $(SONAME) $(STAGE)/lib/libsocketkit.so
	@install -m 644 include/socketkit.h $(STAGE)/include/socketkit.h
	@sed 's/@VERSION@/$(VERSION)/' pkgconfig/socketkit.pc.in > $(STAGE)/lib/pkgconfig/socketkit.pc
	@echo "built $(STAGE)/lib/$(LIBFILE) ($$(du -h $(STAGE)/lib/$(LIBFILE) | cut -f1))"

# An installed copy in a temporary prefix: the C examples and tests build against it
# through pkg-config, as a user's program would.
c-prefix: library
	@rm -rf $(C_PREFIX)
	@$(MAKE) --no-print-directory install PREFIX=$(C_PREFIX) > /dev/null

# A development virtualenv with the package installed in editable mode (it loads the
# library of this checkout) and the test tools. PyPI provides pytest.
$(VENV)/.ready: bindings/python/pyproject.toml bindings/python/setup.py
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(VENV_PY) -m pip install -q --upgrade pip
	$(VENV_PY) -m pip install -q pytest pytest-timeout
	$(VENV_PY) -m pip install -q -e bindings/python
	@touch $@

$(SPEEDUPS): $(wildcard bindings/python/socketkit/_speedups*.[ch]) include/socketkit.h $(VENV)/.ready
	@rm -f $@
	@cd bindings/python && $(VENV_PY) setup.py -q build_ext --inplace --force > $(BUILD)/speedups.log 2>&1 || true
	@test -f $@ || { cat $(BUILD)/speedups.log; echo "error: the extension socketkit._speedups did not build (above)"; exit 1; }
	@echo "built $@"

# The Python package as a wheel with the library inside.
python: library $(VENV)/.ready $(SPEEDUPS)
	@rm -rf $(BUILD)/dist
	SOCKETKIT_PREBUILT=$(STAGE)/lib/$(LIBFILE) $(VENV_PY) -m pip wheel -q --no-deps -w $(BUILD)/dist bindings/python
	@echo "built $$(ls $(BUILD)/dist/*.whl)"

# The demos: Swift, C (the echo server example and two clients), Python (asyncio).
demo: c-prefix $(VENV)/.ready $(SPEEDUPS)
	.build/release/socketkit-demo
	@$(MAKE) --no-print-directory -C bindings/c demo SOCKETKIT_PREFIX=$(C_PREFIX)
	$(VENV_PY) bindings/python/examples/echo_demo.py

test: library tables-check swift-test c-test python-test python-versions-test python-install-test budget-test \
	hardening-test
	@echo "make test: every suite passed"

# Every copy of the event and error tables (Swift, the header, the Python binding, the C
# extension, docs/FEATURES.md) agrees with docs/EVENTS_AND_ERRORS.md; the Swift copy of the
# error table is generated from it (Tests/check_tables.py --write).
tables-check: library $(VENV)/.ready
	$(VENV_PY) Tests/check_tables.py --library $(STAGE)/lib/$(LIBFILE)

swift-test: tools
	$(SWIFT) build --build-tests
	$(SWIFT) test --skip-build

c-test: c-prefix
	@$(MAKE) --no-print-directory -C bindings/c test SOCKETKIT_PREFIX=$(C_PREFIX) \
		SWIFT_HEADER=$(BUILD)/release/SocketKit.build/include/SocketKit-Swift.h

# Twice: with the C hot paths (which must have loaded), then with ctypes only.
python-test: library $(VENV)/.ready $(SPEEDUPS)
	cd bindings/python && SOCKETKIT_EXPECT_SPEEDUPS=1 $(VENV_PY) -m pytest -q -p no:cacheprovider tests
	cd bindings/python && SOCKETKIT_NO_SPEEDUPS=1 $(VENV_PY) -m pytest -q -p no:cacheprovider tests

# The same suite on every other CPython from 3.9 to 3.13 that is installed (pyenv keeps
# them on these machines); absent versions are skipped with a message.
python-versions-test: library
	bindings/python/run-versions.sh $(PYTHON) $(STAGE)/lib/$(LIBFILE)

# What a user does: `pip install ./bindings/python` into a new virtualenv (the library is
# built and bundled in the wheel), then `import socketkit` works with nothing else set.
python-install-test: library
	rm -rf $(BUILD)/venv-install
	$(PYTHON) -m venv $(BUILD)/venv-install
	$(BUILD)/venv-install/bin/python -m pip install -q --upgrade pip
	SOCKETKIT_REQUIRE_SPEEDUPS=1 $(BUILD)/venv-install/bin/python -m pip install -q ./bindings/python
	cd / && env -u LD_LIBRARY_PATH -u SOCKETKIT_LIBRARY $(BUILD)/venv-install/bin/python -c \
		'import socketkit, socketkit._ffi as f; assert "site-packages" in f.lib._name, f.lib._name; assert socketkit.SPEEDUPS, "the C hot paths did not build"; print("python-install-test: socketkit", socketkit.LIBRARY_VERSION, "loads from", f.lib._name, "with its C hot paths")'

# The hot paths' instruction budgets: the C API's TCP ping-pong and UDP echo and the Python
# binding's TCP echo, counted under callgrind (deterministic, unlike wall time on a shared
# machine) against bench/budgets.conf. See bench/budgets.py.
budget-test: c-prefix $(VENV)/.ready $(SPEEDUPS)
	@$(MAKE) --no-print-directory -C bindings/c examples SOCKETKIT_PREFIX=$(C_PREFIX)
	$(PYTHON) bench/budgets.py

sanitize: tools
	$(SWIFT) test --sanitize=thread --scratch-path $(CURDIR)/.build-tsan
	LSAN_OPTIONS=suppressions=$(CURDIR)/Tests/lsan.supp $(SWIFT) test --sanitize=address --scratch-path $(CURDIR)/.build-asan
	@echo "make sanitize: clean under ThreadSanitizer and AddressSanitizer/LeakSanitizer"

# Benchmarks (never part of `make test`: they are measurements, not timed tests).
BENCH_PACKAGES := libuv1-dev libssl-dev openssl util-linux
BENCH_REPS     ?= 3
bench-tools: tools
	@missing=""; for package in $(BENCH_PACKAGES); do \
		dpkg -s $$package >/dev/null 2>&1 || missing="$$missing $$package"; \
	done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing:$$missing"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null || exit 1; \
		else \
			echo "error: missing Debian packages:$$missing  (sudo apt-get install$$missing)"; exit 1; \
		fi; \
	fi

$(VENV)/.bench-ready: $(VENV)/.ready
	$(VENV_PY) -m pip install -q uvloop
	@touch $@

bench: bench-tools c-prefix $(VENV)/.bench-ready $(SPEEDUPS)
	@$(MAKE) --no-print-directory -C bindings/c examples SOCKETKIT_PREFIX=$(C_PREFIX)
	@$(MAKE) --no-print-directory -C bench all SWIFT=$(SWIFT)
	bench/bench.sh -r $(BENCH_REPS)

install: library
	install -d $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include
	install -m 755 $(STAGE)/lib/$(LIBFILE) $(DESTDIR)$(PREFIX)/lib/$(LIBFILE)
	ln -sf $(LIBFILE) $(DESTDIR)$(PREFIX)/lib/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(PREFIX)/lib/libsocketkit.so
	install -m 644 $(STAGE)/include/socketkit.h $(DESTDIR)$(PREFIX)/include/socketkit.h
	install -m 644 $(STAGE)/lib/pkgconfig/socketkit.pc $(DESTDIR)$(PREFIX)/lib/pkgconfig/socketkit.pc
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ] && grep -qsx "$(PREFIX)/lib" /etc/ld.so.conf /etc/ld.so.conf.d/*.conf; then ldconfig; fi

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/lib/$(LIBFILE) $(DESTDIR)$(PREFIX)/lib/$(SONAME) $(DESTDIR)$(PREFIX)/lib/libsocketkit.so
	rm -f $(DESTDIR)$(PREFIX)/include/socketkit.h $(DESTDIR)$(PREFIX)/lib/pkgconfig/socketkit.pc

clean:
	rm -rf .build .build-tsan .build-asan
	@$(MAKE) --no-print-directory -C bindings/c clean

# ---- Hardening (issue 34): sanitizers, fuzzers, soak, hostile peers ------------------------
# Kept apart from the targets above; `make test` runs hardening-test last. fuzz/README.md says
# what each fuzzer checks and how to reproduce a finding.

.PHONY: hardening-test fuzz-library fuzz-build fuzz-smoke fuzz soak soak-smoke hostile-test hardening-clean

FUZZ_BUILD   := $(CURDIR)/.build-fuzz
FUZZ_SECONDS ?= 600
SOAK_MINUTES ?= 10
# libFuzzer comes with the Swift toolchain's clang (-fsanitize=fuzzer).
FUZZ_CLANG   ?= $(dir $(realpath $(shell command -v $(SWIFT))))clang
# The library the fuzzers load: a debug build (assertions on) with AddressSanitizer and
# SanitizerCoverage in the engine, so libFuzzer sees the engine's edges and ASan its memory,
# and glibc's wrappers instead of direct system calls, so fuzz/interpose.c sees every
# close, write and send.
FUZZ_COVERAGE := edge,inline-8bit-counters,pc-table,trace-cmp
FUZZ_SWIFT_FLAGS := -c debug --product socketkit --scratch-path $(FUZZ_BUILD) \
	-Xswiftc -sanitize=address -Xswiftc -sanitize-coverage=$(FUZZ_COVERAGE) \
	-Xcc -fsanitize=address,undefined -Xcc -fno-sanitize-recover=undefined -Xcc -fsanitize-coverage=$(FUZZ_COVERAGE) -Xcc -DSOCKETKIT_NO_DIRECT_SYSCALLS

hardening-test: sanitize fuzz-smoke soak-smoke hostile-test
	@echo "make hardening-test: sanitizers, fuzz smoke runs, soak and hostile peers passed"

fuzz-library: tools
	$(SWIFT) build $(FUZZ_SWIFT_FLAGS)

fuzz-build: fuzz-library library
	@$(MAKE) --no-print-directory -C fuzz all release CLANG=$(FUZZ_CLANG) LIBDIR=$(FUZZ_BUILD)/debug OUT=$(FUZZ_BUILD)/fuzzers \
		RELEASE_LIBDIR=$(STAGE)/lib

# Each fuzzer over its checked-in corpus, then a fixed number of mutations from a fixed seed.
fuzz-smoke: fuzz-build
	$(PYTHON) fuzz/run.py smoke

fuzz: fuzz-build
	$(PYTHON) fuzz/run.py long --seconds $(FUZZ_SECONDS)

# The servers under load: the C example (c-prefix builds it), the Swift bench server (the
# release build), the Python one (the development virtualenv).
soak: c-prefix $(VENV)/.ready $(SPEEDUPS)
	@$(MAKE) --no-print-directory -C bindings/c examples SOCKETKIT_PREFIX=$(C_PREFIX)
	$(PYTHON) bench/soak.py --minutes $(SOAK_MINUTES)

soak-smoke:
	@$(MAKE) --no-print-directory soak SOAK_MINUTES=2

hostile-test: c-prefix $(VENV)/.ready $(SPEEDUPS)
	@$(MAKE) --no-print-directory -C bindings/c examples SOCKETKIT_PREFIX=$(C_PREFIX)
	$(VENV_PY) -m pytest -q -p no:cacheprovider Tests/hostile

clean: hardening-clean
hardening-clean:
	rm -rf $(FUZZ_BUILD)
