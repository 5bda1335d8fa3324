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
#   make wheel      dist/: the sdist and manylinux2014 wheels for 3.10-3.13; make wheel-check tests them (docs/install.md)

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
LDLIBS_ALL = -pthread $(SANFLAGS) $(LDFLAGS)

# The layers, top down: api (the exported names) -> core (provider table,
# error table, containers) -> emu (the emulated runtime) -> emu/ipc (its IPC
# layer) -> os (the platform calls). csrc/cann and csrc/python are built by
# setup.py into the extension only.
CORE_SRCS = $(wildcard csrc/core/*.c csrc/os/*.c csrc/emu/*.c csrc/emu/ipc/*.c)
LIB_SRCS = $(CORE_SRCS) $(wildcard csrc/api/*.c)
LIB_OBJS = $(patsubst csrc/%.c,$(BUILD)/obj/%.o,$(LIB_SRCS))
HEADERS = $(wildcard csrc/include/acl/*.h csrc/core/*.h csrc/os/*.h csrc/emu/*.h csrc/emu/ipc/*.h)
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

.PHONY: all lib test test-c check-layers test-py test-py-asan test-matrix demo demo-c bench bench-c test-hw valgrind clean venv \
  wheel wheel-check

all: lib

lib: $(LIB)

$(BUILD)/obj/%.o: csrc/%.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(LIB_CFLAGS) -c $< -o $@

$(LIB): $(LIB_OBJS) csrc/api/libascendcl_emu.map
	$(CC) -shared -o $@ $(LIB_OBJS) -Wl,--version-script=csrc/api/libascendcl_emu.map -Wl,-z,defs $(LDLIBS_ALL)

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

test-c: $(CTESTS) check-layers
	@set -e; for t in $(CTESTS); do echo "== $$t"; $$t; done

# The library's files call each other one way (tests/layers/check_layers.py).
check-layers: $(LIB)
	$(PYTHON) tests/layers/check_layers.py $(BUILD)

valgrind: $(CTESTS)
	@set -e; for t in $(CTESTS); do echo "== valgrind $$t"; \
	  TEST_TIMEOUT=600 ASCEND_IPC_VALGRIND=1 valgrind -q --error-exitcode=1 --leak-check=full \
	    --errors-for-leak-kinds=definite,indirect --trace-children=yes $$t; done

bench-c: $(CBENCHES)
	@for b in $(CBENCHES); do $$b; done

demo-c: $(EXAMPLES)
	$(BUILD)/examples/demo_share

# The Python side: virtual environments with the package and its test extra
# (torch pinned in pyproject.toml). One rule makes each:
#   $(1) its folder; $(2) pip's way in for the package (-e: editable);
#   $(3) the environment of a last reinstall of the package alone (a
#        sanitized build that no later install may replace), or empty;
#   $(4) the extras. The dev venv adds `ray` (tests/python/test_ray.py); the
#        ASan one does not: Ray's own native workers under an LD_PRELOADed
#        ASan are not worth the trouble, and the Ray test skips there.
VENV ?= .venv
VPY = $(VENV)/bin/python
ASAN_VENV = .venv-asan
PY_SRCS = setup.py pyproject.toml $(wildcard csrc/*/*.c csrc/*/*.h csrc/*/*/*.c csrc/*/*/*.h csrc/include/acl/*.h)

define VENV_RULE
$(1)/.installed: $$(PY_SRCS)
	test -x $(1)/bin/python || $$(PYTHON) -m venv $(1)
	$(1)/bin/python -m pip install -q setuptools wheel numpy
	$(1)/bin/python -m pip install -q --no-build-isolation $(2) '.[$(4)]'
	$(if $(3),$(3) $(1)/bin/python -m pip install -q --no-build-isolation --force-reinstall --no-deps .)
	touch $$@
endef
VENV_EXTRAS = test,ray
$(eval $(call VENV_RULE,$(VENV),-e,,$(VENV_EXTRAS)))
$(eval $(call VENV_RULE,$(ASAN_VENV),,ASCEND_IPC_SANITIZE=1,test))

venv: $(VENV)/.installed

test-py: $(VENV)/.installed lib
	$(VPY) -m pytest -q tests/python

# The extension and C core built with ASan+UBSan, under pytest.
test-py-asan: $(ASAN_VENV)/.installed lib
	cd tests && LD_PRELOAD="$$($(CC) -print-file-name=libasan.so) $$($(CC) -print-file-name=libubsan.so)" \
	  ASCEND_IPC_EXPECT_SANITIZED=1 PYTHONMALLOC=malloc ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 \
	  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  ../$(ASAN_VENV)/bin/python -m pytest -q -p no:cacheprovider python

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

# Checks that need real NPUs and the CANN toolkit (skipped elsewhere).
test-hw: $(VENV)/.installed lib
	ASCEND_IPC_HARDWARE=1 $(VPY) -m pytest -ra tests/python/test_hardware.py

# Figures against the alternatives; writes docs/benchmarks.md and docs/img/.
bench: $(VENV)/.installed bench-c
	$(VPY) benchmarks/bench_share.py
	$(VPY) benchmarks/bench_workflows.py

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
