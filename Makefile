# ascend_ipc build. `make test` sets up everything it needs from a clean clone.
#   make lib        build/libascendcl_emu.so (exports the acl* names only)
#   make test       C tests, then the Python tests
#   make demo       the main job on the emulated default device
#   make test-c SAN=1     C tests under ASan+UBSan (in build-asan/)
#   make valgrind   C tests under valgrind
#   make stress     the load test at full size
#   make fuzz       FUZZ_TIME seconds of fuzzing per target; make fuzz-replay: the corpus
#   make test-matrix  the Python tests on every other Python pyproject.toml claims (3.10, 3.12,
#                   3.13; 3.11 is make test's), each in .venv-<version> without torch
#   make wheel      dist/: the sdist and manylinux2014 wheels for 3.10-3.13; make wheel-check tests them (docs/install.md);
#                   make wheel-check-matrix also runs the test suite in the venvs of the other Pythons' wheels

CC ?= cc
PYTHON ?= python3
SAN ?= 0

ifeq ($(SAN),1)
BUILD ?= build-asan
SANFLAGS = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
OPT = -O1
else
BUILD ?= build
SANFLAGS =
OPT = -O2
endif

WARN = -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wno-unused-parameter
CFLAGS_ALL = -std=gnu11 $(OPT) -g $(WARN) -fPIC -pthread -Icsrc/include -Icsrc $(SANFLAGS) $(CFLAGS)
LIB_CFLAGS = $(CFLAGS_ALL) -fvisibility=hidden -DACL_BUILDING_LIBRARY
LDLIBS_ALL = -pthread -lm $(SANFLAGS) $(LDFLAGS)

# The layers, top down: api (the exported names) -> core (provider table,
# error table, containers) -> emu (the emulated runtime) -> emu/ipc (its IPC
# layer) -> os (the platform calls). csrc/cann and csrc/python are built by
# setup.py into the extension only.
CORE_SRCS = $(wildcard csrc/core/*.c csrc/os/*.c csrc/emu/*.c csrc/emu/ipc/*.c)
LIB_SRCS = $(CORE_SRCS) $(wildcard csrc/api/*.c)
LIB_OBJS = $(patsubst csrc/%.c,$(BUILD)/obj/%.o,$(LIB_SRCS))
HEADERS = $(wildcard csrc/include/acl/*.h csrc/include/ascend_ipc/*.h csrc/core/*.h csrc/os/*.h csrc/emu/*.h csrc/emu/ipc/*.h)
LIB = $(BUILD)/libascendcl_emu.so
# The same objects as a static library, for white-box tests (tests/c/*_internal.c):
# linked in, the internal aipc__* names are theirs to call.
INTERNAL_LIB = $(BUILD)/libaipc_internal.a

CTEST_SRCS = $(wildcard tests/c/test_*.c)
CTESTS = $(patsubst tests/c/%.c,$(BUILD)/tests/%,$(CTEST_SRCS))
CBENCH_SRCS = $(wildcard benchmarks/c/bench_*.c)
CBENCHES = $(patsubst benchmarks/c/%.c,$(BUILD)/bench/%,$(CBENCH_SRCS))
EXAMPLE_SRCS = $(wildcard examples/c/*.c)
EXAMPLES = $(patsubst examples/c/%.c,$(BUILD)/examples/%,$(EXAMPLE_SRCS))

RPATH = -Wl,-rpath,'$$ORIGIN/..'

.PHONY: all lib test test-c check-layers c-programs test-py test-py-asan test-matrix demo demo-c bench bench-c bench-targets test-hw valgrind clean venv \
  wheel wheel-check wheel-check-matrix

all: lib

lib: $(LIB)

$(BUILD)/obj/%.o: csrc/%.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(LIB_CFLAGS) -c $< -o $@

$(LIB): $(LIB_OBJS) csrc/api/libascendcl_emu.map
	$(CC) -shared -o $@ $(LIB_OBJS) -Wl,--version-script=csrc/api/libascendcl_emu.map -Wl,-z,defs $(LDLIBS_ALL) -ldl

$(INTERNAL_LIB): $(LIB_OBJS)
	rm -f $@
	$(AR) rcs $@ $(LIB_OBJS)

# Every C program: what it is made of, then one link rule for all of them.
# White-box tests link the static library, the rest the shared one.
PROGRAMS = $(CTESTS) $(CBENCHES) $(EXAMPLES)
$(CTESTS): $(BUILD)/tests/%: tests/c/%.c tests/c/harness.c $(wildcard tests/c/*.h)
$(CBENCHES): $(BUILD)/bench/%: benchmarks/c/%.c benchmarks/c/bench_util.h
$(EXAMPLES): $(BUILD)/examples/%: examples/c/%.c
$(PROGRAMS): $(LIB) $(INTERNAL_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $(filter %.c,$^) \
	  $(if $(filter %_internal,$@),$(INTERNAL_LIB),-L$(BUILD) -lascendcl_emu $(RPATH)) $(LDLIBS_ALL)

# test_kernel's device binary: host kernels on the emulator's ABI (ascend_ipc/kernel.h).
$(BUILD)/tests/test_kernels.so: tests/c/kernels/test_kernels.c csrc/include/ascend_ipc/kernel.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -shared -o $@ $< $(LDLIBS_ALL)
$(BUILD)/tests/test_kernel: $(BUILD)/tests/test_kernels.so

# Each C test binary runs as a target of its own, CTEST_JOBS at a time (its
# tests already run each in a process of their own), output kept per binary.
CTEST_JOBS ?= 2
CTEST_RUNS = $(patsubst $(BUILD)/tests/%,run-c-%,$(CTESTS))
VALGRIND_RUNS = $(patsubst $(BUILD)/tests/%,valgrind-c-%,$(CTESTS))

test-c: $(CTESTS) check-layers
	@$(MAKE) --no-print-directory -j$(CTEST_JOBS) -O $(CTEST_RUNS)

run-c-%: $(BUILD)/tests/%
	@echo "== $<"; $<

valgrind: $(CTESTS)
	@$(MAKE) --no-print-directory -j$(CTEST_JOBS) -O $(VALGRIND_RUNS)

valgrind-c-%: $(BUILD)/tests/%
	@echo "== valgrind $<"; TEST_TIMEOUT=600 ASCEND_IPC_VALGRIND=1 valgrind -q --error-exitcode=1 --leak-check=full \
	  --errors-for-leak-kinds=definite,indirect --trace-children=yes $<

# Every C program of this build, and nothing run: what CI builds before its
# stages start side by side.
c-programs: $(CTESTS) $(CBENCHES) $(EXAMPLES)

# The library's files call each other one way (tests/layers/check_layers.py).
check-layers: $(LIB)
	$(PYTHON) tests/layers/check_layers.py $(BUILD)


bench-c: $(CBENCHES)
	@for b in $(CBENCHES); do $$b; done

demo-c: $(EXAMPLES)
	$(BUILD)/examples/demo_share

# The Python side. The dev venv: the package (editable) with its test extra
# (torch pinned in pyproject.toml) and `ray` (tests/python/test_ray.py).
VENV ?= .venv
VPY = $(VENV)/bin/python
ASAN_VENV = .venv-asan
PY_SRCS = setup.py pyproject.toml $(wildcard csrc/*/*.c csrc/*/*.h csrc/*/*/*.c csrc/*/*/*.h csrc/include/acl/*.h)
VENV_EXTRAS = test,ray

$(VENV)/.installed: $(PY_SRCS)
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -q setuptools wheel numpy
	$(VPY) -m pip install -q --no-build-isolation -e '.[$(VENV_EXTRAS)]'
	touch $@

# The ASan venv holds the package alone, built with ASan+UBSan; everything
# else (torch, numpy, pytest...) it finds in the dev venv through a .pth line,
# so torch is installed once. That line adds the dev venv's folder without
# running its .pth files, so the dev venv's editable package stays out.
# Ray is there too but not under ASan: the Ray test skips in this venv.
ASAN_SITE = $(ASAN_VENV)/lib/python$(PYVER)/site-packages
PYVER = $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
$(ASAN_VENV)/.installed: $(VENV)/.installed $(PY_SRCS)
	test -x $(ASAN_VENV)/bin/python || $(PYTHON) -m venv --without-pip $(ASAN_VENV)
	$(VPY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' > $(ASAN_SITE)/ascend-ipc-dev-venv.pth
	ASCEND_IPC_SANITIZE=1 $(VPY) -m pip --python $(ASAN_VENV)/bin/python install -q --no-build-isolation --no-deps --force-reinstall .
	touch $@

venv: $(VENV)/.installed

test-py: $(VENV)/.installed lib
	$(VPY) -m pytest -q --durations=30 tests/python

# The extension and C core built with ASan+UBSan, under pytest: the tests that
# run C code (not those marked python_only, which read signatures and stubs), but
# not the whole example programs (whole_program: make test runs them).
# ASAN_SHARD=I-J/N runs a part of it (tests whose id hashes into I..J of N): CI's lanes share it.
ASAN_SHARD ?=
test-py-asan: $(ASAN_VENV)/.installed lib
	cd tests && LD_PRELOAD="$$($(CC) -print-file-name=libasan.so) $$($(CC) -print-file-name=libubsan.so)" \
	  ASCEND_IPC_EXPECT_SANITIZED=1 PYTHONMALLOC=malloc ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 \
	  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  ../$(ASAN_VENV)/bin/python -m pytest -q -p no:cacheprovider --durations=30 -m 'not python_only and not whole_program' \
	  $(if $(ASAN_SHARD),--shard $(ASAN_SHARD)) python

test: test-c test-py

# The suite on the other supported Pythons (found in pyenv or on PATH; one missing is
# reported and skipped). Installed, not editable, and run from tests/ so that the
# package imported is the installed one; tests that need torch or matplotlib skip.
MATRIX_PYTHONS ?= 3.10 3.12 3.13
test-matrix: lib
	@set -e; for v in $(MATRIX_PYTHONS); do \
	  py=$$(ls -d $$HOME/.pyenv/versions/$$v.*/bin/python 2>/dev/null | tail -1); \
	  [ -n "$$py" ] || py=$$(command -v python$$v || true); \
	  if [ -z "$$py" ]; then echo "== Python $$v: not installed here, skipped"; continue; fi; \
	  echo "== Python $$v ($$py)"; \
	  test -x .venv-$$v/bin/python || $$py -m venv .venv-$$v; \
	  .venv-$$v/bin/python -m pip install -q setuptools wheel numpy pytest hypothesis; \
	  .venv-$$v/bin/python -m pip install -q --no-build-isolation --force-reinstall --no-deps .; \
	  (cd tests && ../.venv-$$v/bin/python -m pytest -q -p no:cacheprovider python); \
	done

# What gets published (docs/install.md): the sdist, then for each Python one wheel
# built from it by zig cc against glibc 2.17 and tagged manylinux2014 by auditwheel.
# The tools, pinned in packaging/requirements-wheel.txt, live in .venv-tools.
# wheel-check checks what dist/ holds: each wheel's tag, each wheel and the sdist
# installed in a fresh venv and run through packaging/smoke.py.
TOOLS_VENV = .venv-tools
WHEEL_PYTHONS ?= 3.10 3.11 3.12 3.13
WHEEL_ENV = TOOLS=$(TOOLS_VENV) PYTHONS="$(WHEEL_PYTHONS)" PYTHON=$(PYTHON)

$(TOOLS_VENV)/.installed: packaging/requirements-wheel.txt
	test -x $(TOOLS_VENV)/bin/python || $(PYTHON) -m venv $(TOOLS_VENV)
	$(TOOLS_VENV)/bin/python -m pip install -q -r packaging/requirements-wheel.txt
	touch $@

wheel: $(TOOLS_VENV)/.installed
	$(WHEEL_ENV) packaging/build_wheels.sh build

wheel-check: $(TOOLS_VENV)/.installed
	$(WHEEL_ENV) packaging/build_wheels.sh check

# The same, and in the venv of each wheel of MATRIX_PYTHONS the whole test
# suite, against the wheel users get: CI's version matrix (test-matrix builds
# from the sources instead, for a developer's quick look).
wheel-check-matrix: $(TOOLS_VENV)/.installed lib
	$(WHEEL_ENV) SUITE_PYTHONS="$(MATRIX_PYTHONS)" packaging/build_wheels.sh check

# Checks that need real NPUs and the CANN toolkit (skipped elsewhere).
test-hw: $(VENV)/.installed lib
	ASCEND_IPC_HARDWARE=1 $(VPY) -m pytest -ra tests/python/test_hardware.py

# Figures against the alternatives; writes docs/benchmarks.md and docs/img/.
# bench-targets: the five speed targets, each beside its baseline of the same run,
# BENCH_RUNS runs of them (the spread: min-max).
BENCH_RUNS ?= 3
bench: $(VENV)/.installed bench-c
	$(VPY) benchmarks/bench_share.py
	$(VPY) benchmarks/bench_workflows.py
	$(VPY) benchmarks/bench_targets.py --runs $(BENCH_RUNS)

bench-targets: $(VENV)/.installed
	$(VPY) benchmarks/bench_targets.py --runs $(BENCH_RUNS)

demo: $(VENV)/.installed
	$(VPY) -m ascend_ipc.demo

# Everything the targets above create: build trees, virtual environments, the
# extension an editable install builds in place, setuptools' metadata, and
# what pytest and hypothesis leave behind.
clean:
	rm -rf build build-asan build-tsan $(FUZZ_OUT) $(VENV) $(ASAN_VENV) .venv-3.* ascend_ipc.egg-info
	rm -rf dist build-wheel $(TOOLS_VENV)
	rm -f ascend_ipc/_C*.so
	rm -rf .pytest_cache .hypothesis tests/.pytest_cache tests/.hypothesis
	find ascend_ipc tests benchmarks examples -name __pycache__ -prune -exec rm -rf {} +

include tests/reliability.mk
