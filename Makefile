# ascend_ipc build. `make test` sets up everything it needs from a clean clone.
#   make lib        build/libascendcl_emu.so (exports the acl* names only)
#   make test       C tests, then the Python tests
#   make demo       the main job on the emulated default device
#   make test-c SAN=1     C tests under ASan+UBSan (in build-asan/)
#   make valgrind   C tests under valgrind
#   make stress     the load test at full size
#   make fuzz       FUZZ_TIME seconds of fuzzing per target; make fuzz-replay: the corpus

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

CORE_SRCS = $(wildcard csrc/core/*.c csrc/emu/*.c)
LIB_SRCS = $(CORE_SRCS) $(wildcard csrc/api/*.c)
LIB_OBJS = $(patsubst csrc/%.c,$(BUILD)/obj/%.o,$(LIB_SRCS))
HEADERS = $(wildcard csrc/include/acl/*.h csrc/core/*.h csrc/emu/*.h)
LIB = $(BUILD)/libascendcl_emu.so

CTEST_SRCS = $(wildcard tests/c/test_*.c)
CTESTS = $(patsubst tests/c/%.c,$(BUILD)/tests/%,$(CTEST_SRCS))
CBENCH_SRCS = $(wildcard benchmarks/c/bench_*.c)
CBENCHES = $(patsubst benchmarks/c/%.c,$(BUILD)/bench/%,$(CBENCH_SRCS))
EXAMPLE_SRCS = $(wildcard examples/c/*.c)
EXAMPLES = $(patsubst examples/c/%.c,$(BUILD)/examples/%,$(EXAMPLE_SRCS))

RPATH = -Wl,-rpath,'$$ORIGIN/..'

.PHONY: all lib test test-c test-py test-py-asan demo demo-c bench bench-c test-hw valgrind clean venv

all: lib

lib: $(LIB)

$(BUILD)/obj/%.o: csrc/%.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(LIB_CFLAGS) -c $< -o $@

$(LIB): $(LIB_OBJS) csrc/api/libascendcl_emu.map
	$(CC) -shared -o $@ $(LIB_OBJS) -Wl,--version-script=csrc/api/libascendcl_emu.map -Wl,-z,defs $(LDLIBS_ALL)

$(BUILD)/tests/%: tests/c/%.c tests/c/harness.c $(wildcard tests/c/*.h) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $< tests/c/harness.c -L$(BUILD) -lascendcl_emu $(RPATH) $(LDLIBS_ALL)

$(BUILD)/bench/%: benchmarks/c/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $< -L$(BUILD) -lascendcl_emu $(RPATH) $(LDLIBS_ALL)

$(BUILD)/examples/%: examples/c/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $< -L$(BUILD) -lascendcl_emu $(RPATH) $(LDLIBS_ALL)

test-c: $(CTESTS)
	@set -e; for t in $(CTESTS); do echo "== $$t"; $$t; done

valgrind: $(CTESTS)
	@set -e; for t in $(CTESTS); do echo "== valgrind $$t"; \
	  TEST_TIMEOUT=600 ASCEND_IPC_VALGRIND=1 valgrind -q --error-exitcode=1 --leak-check=full \
	    --errors-for-leak-kinds=definite,indirect --trace-children=yes $$t; done

bench-c: $(CBENCHES)
	@for b in $(CBENCHES); do $$b; done

demo-c: $(EXAMPLES)
	$(BUILD)/examples/demo_share

# The Python side: a virtual environment with the package installed in
# editable mode and the test extra (torch pinned in pyproject.toml).
VENV ?= .venv
VPY = $(VENV)/bin/python
PY_SRCS = setup.py pyproject.toml $(wildcard csrc/*/*.c csrc/*/*.h csrc/include/acl/*.h)

$(VENV)/.installed: $(PY_SRCS)
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -q setuptools wheel numpy
	$(VPY) -m pip install -q --no-build-isolation -e '.[test]'
	touch $@

venv: $(VENV)/.installed

test-py: $(VENV)/.installed lib
	$(VPY) -m pytest -q tests/python

# The extension and C core built with ASan+UBSan, under pytest.
ASAN_VENV = .venv-asan
$(ASAN_VENV)/.installed: $(PY_SRCS)
	test -x $(ASAN_VENV)/bin/python || $(PYTHON) -m venv $(ASAN_VENV)
	$(ASAN_VENV)/bin/python -m pip install -q setuptools wheel numpy
	$(ASAN_VENV)/bin/python -m pip install -q --no-build-isolation '.[test]'
	# Last, so no later install replaces the sanitized build with a plain one.
	ASCEND_IPC_SANITIZE=1 $(ASAN_VENV)/bin/python -m pip install -q --no-build-isolation --force-reinstall --no-deps .
	touch $@

test-py-asan: $(ASAN_VENV)/.installed lib
	cd tests && LD_PRELOAD="$$($(CC) -print-file-name=libasan.so) $$($(CC) -print-file-name=libubsan.so)" \
	  ASCEND_IPC_EXPECT_SANITIZED=1 PYTHONMALLOC=malloc ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 \
	  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  ../$(ASAN_VENV)/bin/python -m pytest -q -p no:cacheprovider python

test: test-c test-py

# Checks that need real NPUs and the CANN toolkit (skipped elsewhere).
test-hw: $(VENV)/.installed lib
	ASCEND_IPC_HARDWARE=1 $(VPY) -m pytest -ra tests/python/test_hardware.py

# Figures against the alternatives; writes docs/benchmarks.md and docs/img/.
bench: $(VENV)/.installed bench-c
	$(VPY) benchmarks/bench_share.py

demo: $(VENV)/.installed
	$(VPY) -m ascend_ipc.demo

clean:
	rm -rf build build-asan build-fuzz build-tsan $(VENV)/.installed $(ASAN_VENV)

include tests/reliability.mk
