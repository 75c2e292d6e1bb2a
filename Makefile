# hwt — build, test and demo. `make help` lists the targets.
# LUA picks the interpreter and its headers: lua5.1 lua5.2 lua5.3 lua5.4 luajit.
LUA        ?= lua5.4
LUA_PC     ?= $(LUA)
# The interpreters `make test-all-luas` runs the plain half of the suite on
# (the full `make test` runs on lua5.4).
OTHER_LUAS := lua5.1 lua5.2 lua5.3 luajit
BUSTED      = $(shell command -v busted 2>/dev/null || echo /usr/bin/busted)
CC         ?= cc
CFLAGS     ?= -O2 -g
WARNINGS   := -std=c11 -Wall -Wextra -Wpedantic -Werror
LUA_CFLAGS  = $(shell pkg-config --cflags $(LUA_PC) 2>/dev/null)
LUA_LIBS    = $(shell pkg-config --libs $(LUA_PC) 2>/dev/null)
SANITIZE   := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
# The Lua module exports luaopen_hwt_core and hwt_preload only (src/hwt.h).
MODULE_FLAGS := -fPIC -fvisibility=hidden

# The layers' sources: the engine's (the wheel and the engine: no Lua), then
# the binding's (src/lhwt*.c).
BINDING_SRC := $(sort $(wildcard src/lhwt*.c))
# hwt.redis (src/redis/), the Redis client over libhiredis, is a module of
# its own: no part of hwt.core, and the only one that links a library.
REDIS_SRC   := $(sort $(wildcard src/redis/*.c))
REDIS_HDR   := $(wildcard src/redis/*.h) src/compat.h
REDIS_LIBS  := -lhiredis
ENGINE_SRC  := $(filter-out $(BINDING_SRC),$(sort $(wildcard src/*.c)))
CORE_SRC    := $(ENGINE_SRC) $(BINDING_SRC)
CORE_HDR    := $(wildcard src/*.h)
BUILD      := build
# Per interpreter, so that switching LUA never reuses a stale module.
OUT        := $(BUILD)/$(LUA)
MODULE     := $(OUT)/hwt/core.so
REDIS_MODULE := $(OUT)/hwt/redis.so
CPATH      := $(OUT)/?.so
RUN_ENV     = LUA_PATH='lua/?.lua;;' LUA_CPATH='$(CPATH);;'

.PHONY: all test check asan asan-build demo bench bench-quick bench-deps bench-shared bench-idle bench-reset bench-floor bench-traces bench-contract bench-wake bench-nginx bench-jobs soak chaos fuzz clean help deps deps-check \
        test-all-luas all-luas rock rock-install rock-redis rock-redis-install no-hiredis

# hwt.redis is built where libhiredis' headers are (Debian: libhiredis-dev,
# which `make test` and `make demo` install); a timer needs none of it.
HAVE_HIREDIS := $(shell printf '\043include <hiredis/hiredis.h>\n' | $(CC) -E -x c - >/dev/null 2>&1 && echo yes)

all: $(MODULE) $(if $(HAVE_HIREDIS),$(REDIS_MODULE),no-hiredis)

no-hiredis:
	@echo "make: hwt.redis not built (no hiredis/hiredis.h: apt-get install libhiredis-dev)" >&2

$(MODULE): $(CORE_SRC) $(CORE_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(WARNINGS) $(CFLAGS) $(LUA_CFLAGS) $(MODULE_FLAGS) -pthread -shared -o $@ $(CORE_SRC) -ldl

$(REDIS_MODULE): $(REDIS_SRC) $(REDIS_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(WARNINGS) $(CFLAGS) $(LUA_CFLAGS) $(MODULE_FLAGS) -shared -o $@ $(REDIS_SRC) $(REDIS_LIBS)

# LuaRocks' two passes (hwt-scm-1.rockspec, build.type "make"), with the
# headers, flags, interpreter and install directories that LuaRocks passes.
# The module is compiled afresh each time: LuaRocks can be configured with
# other headers or flags for the same interpreter between two runs, and make
# would not see it.
ROCK_LUA   ?= $(LUA)
ROCK_OUT    = $(BUILD)/rock-$(notdir $(ROCK_LUA))
LIBFLAG    ?= -shared

rock:
	@test -n "$(LUA_INCDIR)" || { echo "make rock: no LUA_INCDIR (luarocks make hwt-scm-1.rockspec passes it)"; exit 1; }
	@mkdir -p $(ROCK_OUT)/hwt
	$(CC) -std=c11 $(CFLAGS) $(MODULE_FLAGS) -I"$(LUA_INCDIR)" $(LIBFLAG) -pthread -o $(ROCK_OUT)/hwt/core.so $(CORE_SRC) -ldl

# hwt-redis-scm-1.rockspec's two passes: hwt.redis alone, against the
# libhiredis LuaRocks found (HIREDIS_INCDIR holds hiredis/hiredis.h).
rock-redis:
	@test -n "$(LUA_INCDIR)" || { echo "make rock-redis: no LUA_INCDIR (luarocks make hwt-redis-scm-1.rockspec passes it)"; exit 1; }
	@mkdir -p $(ROCK_OUT)/hwt
	$(CC) -std=c11 $(CFLAGS) $(MODULE_FLAGS) -I"$(LUA_INCDIR)" -I"$(HIREDIS_INCDIR)" $(LIBFLAG) \
	  -o $(ROCK_OUT)/hwt/redis.so $(REDIS_SRC) -L"$(HIREDIS_LIBDIR)" $(REDIS_LIBS)

rock-redis-install:
	@test -n "$(INST_LIBDIR)" || { echo "make rock-redis-install: no INST_LIBDIR (luarocks passes it)"; exit 1; }
	mkdir -p "$(INST_LIBDIR)/hwt"
	cp $(ROCK_OUT)/hwt/redis.so "$(INST_LIBDIR)/hwt/"

# The LuaLS annotations go to the rock's own directory (INST_PREFIX, LuaRocks'
# PREFIX): `luarocks show --rock-dir hwt` prints it, and its library/ is what
# .luarc.json's workspace.library names.
rock-install:
	@test -n "$(INST_LIBDIR)" && test -n "$(INST_LUADIR)" && test -n "$(INST_PREFIX)" || \
	  { echo "make rock-install: no INST_LIBDIR, INST_LUADIR or INST_PREFIX (luarocks passes them)"; exit 1; }
	mkdir -p "$(INST_LIBDIR)/hwt" "$(INST_LUADIR)/hwt" "$(INST_PREFIX)/library/hwt"
	cp $(ROCK_OUT)/hwt/core.so "$(INST_LIBDIR)/hwt/"
	cp lua/hwt.lua "$(INST_LUADIR)/"
	cp lua/hwt/*.lua "$(INST_LUADIR)/hwt/"
	cp library/hwt.lua "$(INST_PREFIX)/library/"
	cp library/hwt/*.lua "$(INST_PREFIX)/library/hwt/"

$(OUT)/asan/hwt/core.so: $(CORE_SRC) $(CORE_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(WARNINGS) -O1 -g $(SANITIZE) $(LUA_CFLAGS) $(MODULE_FLAGS) -pthread -shared -o $@ $(CORE_SRC) -ldl

$(OUT)/asan/hwt/redis.so: $(REDIS_SRC) $(REDIS_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(WARNINGS) -O1 -g $(SANITIZE) $(LUA_CFLAGS) $(MODULE_FLAGS) -shared -o $@ $(REDIS_SRC) $(REDIS_LIBS)

$(BUILD)/test_%: test/unit/test_%.c $(ENGINE_SRC) $(CORE_HDR) test/unit/splitmix64.h test/unit/check.h
	@mkdir -p $(BUILD)
	$(CC) $(WARNINGS) $(CFLAGS) -Isrc -pthread -o $@ $< $(ENGINE_SRC)

$(BUILD)/asan/test_%: test/unit/test_%.c $(ENGINE_SRC) $(CORE_HDR) test/unit/splitmix64.h test/unit/check.h
	@mkdir -p $(BUILD)/asan
	$(CC) $(WARNINGS) -O1 -g $(SANITIZE) -Isrc -pthread -o $@ $< $(ENGINE_SRC)

# Eight threads, one lua_State each, sharing one engine, under ThreadSanitizer.
# compat.h is forced into the host for the C API names 5.1 lacks (LUA_OK).
$(OUT)/tsan/host_threads: test/stress/host_threads.c $(CORE_SRC) $(CORE_HDR) src/hwt.h
	@mkdir -p $(dir $@)
	$(CC) $(WARNINGS) -O1 -g -fsanitize=thread $(LUA_CFLAGS) -Isrc -include src/compat.h -pthread -c -o $@.o $<
	$(CC) $(WARNINGS) -O1 -g -fsanitize=thread $(LUA_CFLAGS) -Isrc -pthread -o $@ $@.o $(CORE_SRC) $(LUA_LIBS)

# States closed with live timers (some made during lua_close) while other
# states keep firing on the shared engine: under ASan+UBSan, and under TSan.
$(OUT)/asan/close_host: test/stress/close_host.c $(CORE_SRC) $(CORE_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(WARNINGS) -O1 -g $(SANITIZE) $(LUA_CFLAGS) -Isrc -pthread -o $@ $< $(CORE_SRC) $(LUA_LIBS) -ldl

$(OUT)/tsan/close_host: test/stress/close_host.c $(CORE_SRC) $(CORE_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(WARNINGS) -O1 -g -fsanitize=thread $(LUA_CFLAGS) -Isrc -pthread -o $@ $< $(CORE_SRC) $(LUA_LIBS) -ldl

# The chaos run: test/stress/chaos.lua in many lua_States on four threads sharing
# engines, under ASan+UBSan and under TSan. As for host_threads, compat.h is
# forced into the host alone (engine.c must see its own _GNU_SOURCE first).
$(OUT)/asan/chaos_host: test/stress/chaos_host.c $(CORE_SRC) $(CORE_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(WARNINGS) -O1 -g $(SANITIZE) $(LUA_CFLAGS) -Isrc -include src/compat.h -pthread -c -o $@.o $<
	$(CC) $(WARNINGS) -O1 -g $(SANITIZE) $(LUA_CFLAGS) -Isrc -pthread -o $@ $@.o $(CORE_SRC) $(LUA_LIBS) -ldl

$(OUT)/tsan/chaos_host: test/stress/chaos_host.c $(CORE_SRC) $(CORE_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(WARNINGS) -O1 -g -fsanitize=thread $(LUA_CFLAGS) -Isrc -include src/compat.h -pthread -c -o $@.o $<
	$(CC) $(WARNINGS) -O1 -g -fsanitize=thread $(LUA_CFLAGS) -Isrc -pthread -o $@ $@.o $(CORE_SRC) $(LUA_LIBS) -ldl

# The engine's threads under ThreadSanitizer.
$(BUILD)/tsan/test_engine: test/unit/test_engine.c $(ENGINE_SRC) $(CORE_HDR) test/unit/splitmix64.h test/unit/check.h
	@mkdir -p $(BUILD)/tsan
	$(CC) $(WARNINGS) -O1 -g -fsanitize=thread -Isrc -pthread -o $@ $< $(ENGINE_SRC)

# The engine as compilers without 128-bit integers (32-bit targets) build it:
# it divides by the tick instead of multiplying by the tick's reciprocal.
$(BUILD)/no_int128/test_engine: test/unit/test_engine.c $(ENGINE_SRC) $(CORE_HDR) test/unit/splitmix64.h test/unit/check.h
	@mkdir -p $(BUILD)/no_int128
	$(CC) $(WARNINGS) $(CFLAGS) -U__SIZEOF_INT128__ -Isrc -pthread -o $@ $< $(ENGINE_SRC)

# Reliability checks (make check).
$(BUILD)/fuzz_wheel: test/stress/fuzz/fuzz_wheel.c src/wheel.c src/wheel.h
	@mkdir -p $(BUILD)
	clang $(WARNINGS) -g -O1 -fsanitize=fuzzer,address,undefined -Isrc -o $@ $< src/wheel.c

$(BUILD)/tsan/stress_engine: test/stress/stress_engine.c $(ENGINE_SRC) $(CORE_HDR)
	@mkdir -p $(BUILD)/tsan
	$(CC) $(WARNINGS) -O1 -g -fsanitize=thread -Isrc -pthread -o $@ $< $(ENGINE_SRC)

# A pthread_create that always fails, preloaded by test/stress/no_thread_test.lua's run.
$(BUILD)/no_thread.so: test/stress/no_thread.c
	@mkdir -p $(dir $@)
	$(CC) $(WARNINGS) $(CFLAGS) -fPIC -shared -o $@ $<

$(OUT)/asan/alloc_host: test/stress/alloc_host.c
	@mkdir -p $(dir $@)
	$(CC) $(WARNINGS) -O1 -g $(SANITIZE) $(LUA_CFLAGS) -o $@ $< $(LUA_LIBS)

C_TESTS := $(patsubst test/unit/%.c,%,$(wildcard test/unit/test_*.c))
CHECK_BINARIES := $(BUILD)/fuzz_wheel $(BUILD)/tsan/stress_engine $(OUT)/asan/alloc_host
# The chaos run's hosts (test/stress/chaos.lua: Lua 5.4 and LuaJIT). make check
# runs it on 5.4 and, under ASan+UBSan, on LuaJIT (its host built with LuaJIT's
# flags by a make of its own, as all-luas builds LuaJIT's module).
CHAOS_HOSTS := $(OUT)/asan/chaos_host $(OUT)/tsan/chaos_host
CHAOS_LUAJIT_HOST := $(BUILD)/luajit/asan/chaos_host
ifeq ($(LUA),lua5.4)
CHECK_BINARIES += $(CHAOS_HOSTS)
endif

# Installs the Debian packages the build and the tests need, when missing.
deps:
	@LUA=$(LUA) sh test/deps.sh

# Everything: C tests, busted specs and examples, then the same under
# ASan+UBSan, and the engine's C test under TSan.
test: deps all $(addprefix $(BUILD)/,$(C_TESTS)) $(BUILD)/no_int128/test_engine $(BUILD)/no_thread.so asan-build
	@LUA=$(LUA) HWT_OUT=$(OUT) BUSTED=$(BUSTED) sh test/run.sh

asan-build: $(OUT)/asan/hwt/core.so $(OUT)/asan/hwt/redis.so $(addprefix $(BUILD)/asan/,$(C_TESTS)) $(BUILD)/tsan/test_engine \
            $(OUT)/tsan/host_threads $(OUT)/asan/close_host $(OUT)/tsan/close_host

# The plain half (busted specs, examples) on lua5.1, lua5.2, lua5.3 and
# luajit (whose specs also run under ASan+UBSan: its FFI take is C code of
# its own), then the whole `make test` on lua5.4; one total.
all-luas:
	@for lua in $(OTHER_LUAS); do LUA=$$lua sh test/deps.sh || exit 1; \
	  $(MAKE) --no-print-directory LUA=$$lua all || exit 1; done
	@$(MAKE) --no-print-directory LUA=luajit $(BUILD)/luajit/asan/hwt/core.so \
	  $(if $(HAVE_HIREDIS),$(BUILD)/luajit/asan/hwt/redis.so)

test-all-luas: deps all-luas all $(addprefix $(BUILD)/,$(C_TESTS)) $(BUILD)/no_int128/test_engine $(BUILD)/no_thread.so asan-build
	@LUA=$(LUA) HWT_OUT=$(OUT) BUSTED=$(BUSTED) HWT_OTHER_LUAS="$(OTHER_LUAS)" sh test/run.sh

# make test-all-luas, plus the reliability checks of test/RELIABILITY.md, the
# nginx test, the LuaRocks install test and a smoke run of the benchmark harness
# (so it installs the benchmark peers too).
check: deps-check all-luas all $(addprefix $(BUILD)/,$(C_TESTS)) $(BUILD)/no_int128/test_engine $(BUILD)/no_thread.so asan-build $(CHECK_BINARIES)
	@$(MAKE) --no-print-directory LUA=luajit $(CHAOS_LUAJIT_HOST)
	@LUA=$(LUA) HWT_OUT=$(OUT) BUSTED=$(BUSTED) HWT_CHECK=1 \
	  HWT_OTHER_LUAS="$(OTHER_LUAS)" sh test/run.sh

deps-check:
	@LUA=$(LUA) HWT_CHECK=1 HWT_BENCH=1 sh test/deps.sh

soak: deps all
	@$(RUN_ENV) $(LUA) test/stress/soak.lua

# The chaos run alone (CHAOS_SECONDS, CHAOS_ALLOC_SECONDS, CHAOS_TSAN_SECONDS, CHAOS_SEED,
# CHAOS_SKIP: see test/stress/chaos_host.c), the second time with a collector step at every
# allocation (LuaJIT: its nearest, test/stress/chaos.lua). LUA=luajit runs it on LuaJIT.
chaos: deps $(CHAOS_HOSTS)
	@ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  $(OUT)/asan/chaos_host
	@ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  CHAOS_ALLOC_STRESS=1 CHAOS_SECONDS=$${CHAOS_ALLOC_SECONDS:-30} $(OUT)/asan/chaos_host
	@TSAN_OPTIONS=halt_on_error=1 CHAOS_SECONDS=$${CHAOS_TSAN_SECONDS:-30} $(OUT)/tsan/chaos_host

fuzz: deps all
	@$(RUN_ENV) $(LUA) test/stress/fuzz/differential.lua

# The ASan+UBSan half of `make test` alone.
asan: deps asan-build
	@LUA=$(LUA) HWT_OUT=$(OUT) BUSTED=$(BUSTED) HWT_ONLY=asan sh test/run.sh

demo: deps all
	@$(RUN_ENV) $(LUA) examples/retry.lua

# Side-by-side benchmark: hwt on $(LUA) and on LuaJIT against luv, a Lua heap,
# Netty and timerwheel.lua (bench/README.md). LuaJIT and its headers too.
bench-deps: deps
	@LUA=$(LUA) HWT_BENCH=1 sh test/deps.sh
	@LUA=luajit sh test/deps.sh

bench: bench-deps all
	@LUA=$(LUA) sh bench/run.sh full

bench-quick: deps all
	@LUA=$(LUA) sh bench/run.sh quick

bench-shared: deps all
	@for mode in shared private; do \
	  $(RUN_ENV) $(LUA) bench/shared.lua $$mode; done

bench-idle: deps all
	@$(RUN_ENV) $(LUA) bench/idle.lua

# An idle timeout re-armed on every event: reset() against cancel + new
# timeout and luv's timer:again() (bench/README.md).
bench-reset: deps all
	@$(RUN_ENV) $(LUA) bench/reset.lua

# What any Lua timer pays on this machine, on Lua 5.4 and LuaJIT: a closure, a
# userdata, a C call, an anchor, a cache miss, the drain floor (bench/README.md).
bench-floor: bench-deps
	@sh bench/floor.sh

# LuaJIT: whether the trace compiler compiles hwt's side of W1s, W2, W3s and
# W4 (luajit -jv; exits non-zero on an abort in hwt's Lua files).
bench-traces:
	@LUA=luajit sh test/deps.sh
	@sh bench/jit_traces.sh

# hwt against the contract's floor: W1-W3s with and without a timer behind
# the API's Lua-side work, Lua 5.4 and LuaJIT, interleaved (bench/README.md).
bench-contract: bench-deps
	@sh bench/contract.sh

# CPU per wake-up: the contract's floor, the core's calls alone, timer:run()
# and a wait()/poll() loop, alternated, three rounds (bench/wake.lua; W6 wakes
# about 10^4 times).
bench-wake: bench-deps all
	@sh bench/floor.sh build 2>/dev/null
	@for round in 1 2 3; do for mode in floor core run loop; do \
	  LUA_PATH='lua/?.lua;;' LUA_CPATH='$(CPATH);build/floor/$(LUA)/?.so;;' $(LUA) bench/wake.lua $$mode; \
	  done; done

# hwt.ngx against ngx.timer.every polling and ngx.timer.at: idle wake-ups,
# lateness, throughput (bench/README.md; ONLY=throughput runs one section).
bench-nginx: deps
	@sh bench/nginx_bench.sh

# hwt.jobs beside BullMQ on one private redis-server (bench/README.md); BullMQ
# comes from the npm registry into build/bullmq, for this benchmark only.
bench-jobs: deps all
	@sh bench/jobs_bench.sh

clean:
	rm -rf $(BUILD)

help:
	@echo "make          build $(MODULE) and $(REDIS_MODULE) (LUA=lua5.1|lua5.2|lua5.3|lua5.4|luajit)"
	@echo "make demo     run examples/retry.lua"
	@echo "make test     C tests, busted specs, examples; then again under ASan+UBSan"
	@echo "make check    make test plus fuzzers, TSan stress, allocation failures, soak, bench smoke"
	@echo "make test-all-luas  specs and examples on lua5.1-5.3 and luajit, plus make test on lua5.4"
	@echo "make fuzz     the differential fuzzer (FUZZ_SECONDS=N for a long run; LUA=luajit too)"
	@echo "make soak     the soak test (SOAK_SECONDS=N)"
	@echo "make chaos    random scripts in many states on threads, 60 s under ASan+UBSan, 30 s under TSan (LUA=luajit too)"
	@echo "make bench    hwt (Lua 5.4, LuaJIT) vs luv, a Lua heap and Netty (make bench-deps installs them)"
	@echo "make bench-quick  a one-minute version of make bench"
	@echo "make bench-shared  1000 timers x 1000 timeouts, shared vs private engines"
	@echo "make bench-idle  the worker's wake-ups and CPU while idle"
	@echo "make bench-reset  idle timeouts re-armed per event: reset() vs cancel + new and luv again()"
	@echo "make bench-floor  the floors: closure, userdata, C call, anchor, cache miss, drain"
	@echo "make bench-traces LuaJIT: trace aborts on hwt's side of W1s, W2, W3s, W4 (luajit -jv)"
	@echo "make bench-contract  hwt against the contract's floor (the API's Lua-side work alone)"
	@echo "make bench-wake  CPU per wake-up: the floor, timer:run(), a wait()/poll() loop"
	@echo "make bench-nginx hwt.ngx in nginx: idle wake-ups, lateness, throughput vs ngx.timer.at"
	@echo "make bench-jobs  hwt.jobs vs BullMQ on one redis-server (BullMQ from npm, under build/)"
	@echo "make asan     only the sanitizer runs (ASan+UBSan; the engine under TSan)"
