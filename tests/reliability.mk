# The reliability suite's make targets (docs/reliability.md). Included by
# the Makefile (`include tests/reliability.mk`, after its own variables).
#
#   make stress        the load test at full size: 256 exports, 16 importer
#                      processes x 50,000 cycles (the CI run of the same test,
#                      in `make test-c`, is 4 x 400); figures in $(BUILD)/stress.json
#   make fuzz-replay   every fuzz target, built with gcc and ASan+UBSan, over
#                      the committed corpus (tests/fuzz/corpus/<target>), then
#                      FUZZ_RUNS coverage-guided mutations each (fixed seed): CI
#   make tsan          ThreadSanitizer over the tests where threads share IPC
#                      or runtime state (not in CI); in build-tsan/
#   make fuzz          FUZZ_TIME seconds of fuzzing per target: libFuzzer when
#                      clang is installed, else the gcc driver (coverage-guided
#                      through -fsanitize-coverage=trace-pc); new inputs go to
#                      $(FUZZ_OUT)/corpus-<target>, crashes to $(FUZZ_OUT)/

STRESS_IMPORTERS ?= 16
STRESS_CYCLES ?= 50000
STRESS_EXPORTS ?= 256

.PHONY: stress fuzz fuzz-replay fuzz-build

stress: $(BUILD)/tests/test_ipc_stress
	STRESS_IMPORTERS=$(STRESS_IMPORTERS) STRESS_CYCLES=$(STRESS_CYCLES) STRESS_EXPORTS=$(STRESS_EXPORTS) \
	  STRESS_REPORT=$(BUILD)/stress.json TEST_TIMEOUT=3600 $(BUILD)/tests/test_ipc_stress

# ---- fuzzing -------------------------------------------------------------------

FUZZ_OUT ?= build-fuzz
FUZZ_TIME ?= 60
FUZZ_RUNS ?= 20000
FUZZ_SEED ?= 1
FUZZ_TARGETS = key handle proto server fabric
FUZZ_CLANG ?= $(shell command -v clang 2>/dev/null || command -v clang-14 2>/dev/null || command -v clang-15 2>/dev/null || command -v clang-16 2>/dev/null)

# Each target links the library's sources as a static library built with the
# target's instrumentation (no target includes a .c file).
FUZZ_DEPS = $(wildcard tests/fuzz/*.h) tests/c/raw_socket.h
FUZZ_CFLAGS = -std=gnu11 -O1 -g -fno-omit-frame-pointer -pthread -Icsrc/include -Icsrc -Itests/fuzz \
  -fsanitize=address,undefined -fno-sanitize-recover=undefined $(CFLAGS)
FUZZ_COVERAGE_gcc = -fsanitize-coverage=trace-pc
FUZZ_COVERAGE_clang = -fsanitize=fuzzer-no-link
FUZZ_CC_gcc = $(CC) $(WARN)
FUZZ_CC_clang = $(FUZZ_CLANG) $(filter-out -Werror,$(WARN))

$(FUZZ_OUT)/gcc/obj/%.o: csrc/%.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC_gcc) $(FUZZ_CFLAGS) $(FUZZ_COVERAGE_gcc) -c $< -o $@
$(FUZZ_OUT)/clang/obj/%.o: csrc/%.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC_clang) $(FUZZ_CFLAGS) $(FUZZ_COVERAGE_clang) -c $< -o $@
$(FUZZ_OUT)/gcc/libaipc_internal.a: $(patsubst csrc/%.c,$(FUZZ_OUT)/gcc/obj/%.o,$(LIB_SRCS))
	rm -f $@
	$(AR) rcs $@ $^
$(FUZZ_OUT)/clang/libaipc_internal.a: $(patsubst csrc/%.c,$(FUZZ_OUT)/clang/obj/%.o,$(LIB_SRCS))
	rm -f $@
	$(AR) rcs $@ $^

# gcc: the standalone driver (tests/fuzz/driver.c, not instrumented).
$(FUZZ_OUT)/gcc/driver.o: tests/fuzz/driver.c
	@mkdir -p $(dir $@)
	$(CC) $(FUZZ_CFLAGS) $(WARN) -c $< -o $@

$(FUZZ_OUT)/gcc/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_OUT)/gcc/driver.o $(FUZZ_OUT)/gcc/libaipc_internal.a $(FUZZ_DEPS)
	$(FUZZ_CC_gcc) $(FUZZ_CFLAGS) $(FUZZ_COVERAGE_gcc) -o $@ $< $(FUZZ_OUT)/gcc/driver.o $(FUZZ_OUT)/gcc/libaipc_internal.a

# clang: libFuzzer.
$(FUZZ_OUT)/clang/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_OUT)/clang/libaipc_internal.a $(FUZZ_DEPS)
	$(FUZZ_CC_clang) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_OUT)/clang/libaipc_internal.a

FUZZ_KIND = $(if $(FUZZ_CLANG),clang,gcc)

fuzz-build: $(addprefix $(FUZZ_OUT)/gcc/fuzz_,$(FUZZ_TARGETS))

fuzz-replay: fuzz-build
	@set -e; for t in $(FUZZ_TARGETS); do \
	  echo "== fuzz_$$t: corpus replay + $(FUZZ_RUNS) mutations (gcc driver, ASan+UBSan)"; \
	  mkdir -p $(FUZZ_OUT)/ci-corpus-$$t; \
	  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	    $(FUZZ_OUT)/gcc/fuzz_$$t $(FUZZ_OUT)/ci-corpus-$$t tests/fuzz/corpus/$$t \
	    -runs=$(FUZZ_RUNS) -seed=$(FUZZ_SEED) -max_len=4096 -timeout=20 -artifact_prefix=$(FUZZ_OUT)/; \
	done

fuzz: $(addprefix $(FUZZ_OUT)/$(FUZZ_KIND)/fuzz_,$(FUZZ_TARGETS))
	@set -e; for t in $(FUZZ_TARGETS); do \
	  echo "== fuzz_$$t: $(FUZZ_TIME) s ($(FUZZ_KIND))"; \
	  mkdir -p $(FUZZ_OUT)/corpus-$$t; \
	  if ! ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	    $(FUZZ_OUT)/$(FUZZ_KIND)/fuzz_$$t $(FUZZ_OUT)/corpus-$$t tests/fuzz/corpus/$$t \
	    -max_total_time=$(FUZZ_TIME) -max_len=4096 -timeout=20 -artifact_prefix=$(FUZZ_OUT)/ \
	    -print_final_stats=1 > $(FUZZ_OUT)/fuzz_$$t.log 2>&1; then \
	    tail -60 $(FUZZ_OUT)/fuzz_$$t.log; echo "fuzz_$$t FAILED: the input is in $(FUZZ_OUT)/"; exit 1; fi; \
	  grep -E "^(==driver==|Done|stat::number_of_executed_units|stat::new_units_added|#[0-9]+ *DONE)" $(FUZZ_OUT)/fuzz_$$t.log || true; \
	done

# ---- ThreadSanitizer over the tests where threads share state ----------------
# Not in CI (timing-bound tests slow down under TSan); run it after changing the
# importer's connection sharing, the exporter's locking, or the runtime's threads
# (stream workers, callbacks, contexts, models, kernels).
#
# Left out everywhere: tests that fork while runtime threads run and start
# threads in the child (TSan cannot follow that: "starting new threads after
# multi-threaded fork is not supported"), and tests whose checks are timing-bound.

TSAN_TESTS_scale = many_threads_export_import_close_at_once threads_importing_one_key_each_get_a_mapping
TSAN_TESTS_resilience = threads_sharing_a_connection_through_stops_and_timeouts \
  stopped_exporter_every_call_bounded_by_the_timeout timed_out_import_leaves_no_reference_behind \
  stopped_exporter_stalls_only_its_own_imports
# The server thread refusing and serving connections while the test's thread allocates, exports,
# whitelists and forks. Races only: an export takes the memory lock, then (starting the server) the
# identity lock, and fork's prepare takes them the other way round; both under the exporter's lock,
# so no deadlock, but TSan's lock-order check cannot see that.
TSAN_TESTS_creds_internal = same_user_flood_capped_exporter_keeps_working privilege_drop_refused_on_the_same_connection
# Stream workers publishing records and notifies while other threads wait, query and destroy;
# events recorded, waited for, reset, timed and synchronized with timeouts across streams (the
# tests of IPC events between processes fork while stream workers run: left out).
TSAN_TESTS_events = create_flags_follow_cann handles_are_checked status_before_and_after_a_record \
  stream_wait_holds_back_later_work a_wait_keeps_the_record_it_saw stream_wait_rules \
  failed_work_fails_the_event synchronize_with_timeout elapsed_time destroy_with_work_pending_is_safe \
  ipc_handle_rules forged_and_stale_handles_are_refused
TSAN_TESTS_notify = one_record_releases_one_wait wait_queued_before_the_record_holds_the_stream
# Threads mapping, sharing, copying and unmapping physical memory at once.
TSAN_TESTS_vmm = threads_map_share_and_copy_at_once mapped_memory_on_streams

# The runtime's threaded parts, each binary whole but for what is named here
# (so a new test is covered without being listed): callbacks and host functions
# on runtime threads, stream state callbacks, abort/stop and failure modes,
# value wait/write, contexts current per thread, the last error per thread,
# kernels with cancel, model capture and replay, host memory, allocators,
# streams, devices and allocations used from many threads.
TSAN_SKIP_callback = fork_child_starts_clean fork_while_a_callback_waits process_waits_its_timeout
TSAN_SKIP_stream_config = value_wait_on_a_word_another_process_writes a_forked_child_starts_clean
TSAN_SKIP_context = fork_child_starts_on_default_contexts
TSAN_SKIP_kernel =
TSAN_SKIP_model = fork_and_finalize_leave_nothing_behind
TSAN_SKIP_hostmem =
TSAN_SKIP_runtime = fork_child_starts_clean fork_while_other_threads_use_the_runtime d2d_bandwidth
TSAN_WHOLE = callback stream_config context kernel model hostmem runtime

TSAN_ENV = TSAN_OPTIONS=halt_on_error=1:report_signal_unsafe=0
# The tests of build-tsan/tests/test_$(1) but those in TSAN_SKIP_$(1).
tsan_tests_of = $$(build-tsan/tests/test_$(1) -l | grep -vxF -e '' $(addprefix -e ,$(TSAN_SKIP_$(1))))
define tsan_run
$(TSAN_ENV) build-tsan/tests/test_$(1) $(call tsan_tests_of,$(1))

endef

.PHONY: tsan
tsan:
	$(MAKE) BUILD=build-tsan OPT=-O1 CFLAGS="-fsanitize=thread" LDFLAGS="-fsanitize=thread" \
	  build-tsan/tests/test_ipc_scale build-tsan/tests/test_ipc_resilience build-tsan/tests/test_ipc_creds_internal \
	  build-tsan/tests/test_events build-tsan/tests/test_notify build-tsan/tests/test_vmm \
	  $(addprefix build-tsan/tests/test_,$(TSAN_WHOLE)) build-tsan/tests/test_kernels.so # test_kernel dlopens it
	$(TSAN_ENV) build-tsan/tests/test_ipc_scale $(TSAN_TESTS_scale)
	$(TSAN_ENV) build-tsan/tests/test_ipc_resilience $(TSAN_TESTS_resilience)
	$(TSAN_ENV):detect_deadlocks=0 build-tsan/tests/test_ipc_creds_internal $(TSAN_TESTS_creds_internal)
	$(TSAN_ENV) build-tsan/tests/test_events $(TSAN_TESTS_events)
	$(TSAN_ENV) build-tsan/tests/test_notify $(TSAN_TESTS_notify)
	$(TSAN_ENV) build-tsan/tests/test_vmm $(TSAN_TESTS_vmm)
	$(foreach t,$(TSAN_WHOLE),$(call tsan_run,$(t)))
