# hwt — build, test and demo. `make help` lists the targets.
LUA        ?= lua5.4
LUA_PC     ?= $(LUA)
BUSTED      = $(shell command -v busted 2>/dev/null || echo /usr/bin/busted)
CC         ?= cc
CFLAGS     ?= -O2 -g
WARNINGS   := -std=c11 -Wall -Wextra -Wpedantic -Werror
LUA_CFLAGS  = $(shell pkg-config --cflags $(LUA_PC) 2>/dev/null)
SANITIZE   := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer

CORE_SRC   := src/wheel.c src/engine.c src/lhwt.c
CORE_HDR   := src/wheel.h src/engine.h src/compat.h
BUILD      := build

.PHONY: all test asan asan-build demo bench-idle clean help deps

all: hwt/core.so

hwt/core.so: $(CORE_SRC) $(CORE_HDR)
	@mkdir -p hwt
	$(CC) $(WARNINGS) $(CFLAGS) $(LUA_CFLAGS) -fPIC -pthread -shared -o $@ $(CORE_SRC)

$(BUILD)/asan/hwt/core.so: $(CORE_SRC) $(CORE_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(WARNINGS) -O1 -g $(SANITIZE) $(LUA_CFLAGS) -fPIC -pthread -shared -o $@ $(CORE_SRC)

$(BUILD)/test_%: test/test_%.c src/wheel.c src/engine.c $(CORE_HDR)
	@mkdir -p $(BUILD)
	$(CC) $(WARNINGS) $(CFLAGS) -Isrc -pthread -o $@ $< src/wheel.c src/engine.c

$(BUILD)/asan/test_%: test/test_%.c src/wheel.c src/engine.c $(CORE_HDR)
	@mkdir -p $(BUILD)/asan
	$(CC) $(WARNINGS) -O1 -g $(SANITIZE) -Isrc -pthread -o $@ $< src/wheel.c src/engine.c

# The engine's threads under ThreadSanitizer.
$(BUILD)/tsan/test_engine: test/test_engine.c src/wheel.c src/engine.c $(CORE_HDR)
	@mkdir -p $(BUILD)/tsan
	$(CC) $(WARNINGS) -O1 -g -fsanitize=thread -Isrc -pthread -o $@ $< src/wheel.c src/engine.c

C_TESTS := $(patsubst test/%.c,%,$(wildcard test/test_*.c))

# Installs the Debian packages the build and the tests need, when missing.
deps:
	@sh test/deps.sh

# Everything: C tests, busted specs and examples, then the same under
# ASan+UBSan, and the engine's C test under TSan.
test: deps all $(addprefix $(BUILD)/,$(C_TESTS)) asan-build
	@LUA=$(LUA) BUSTED=$(BUSTED) sh test/run.sh

asan-build: $(BUILD)/asan/hwt/core.so $(addprefix $(BUILD)/asan/,$(C_TESTS)) $(BUILD)/tsan/test_engine

# The ASan+UBSan half of `make test` alone.
asan: deps asan-build
	@LUA=$(LUA) BUSTED=$(BUSTED) HWT_ONLY=asan sh test/run.sh

demo: deps all
	@LUA_PATH='lua/?.lua;;' LUA_CPATH='./?.so;;' $(LUA) examples/retry.lua

bench-idle: deps all
	@LUA_PATH='lua/?.lua;;' LUA_CPATH='./?.so;;' $(LUA) bench/idle.lua

clean:
	rm -rf $(BUILD) hwt

help:
	@echo "make          build hwt/core.so for $(LUA)"
	@echo "make demo     run examples/retry.lua"
	@echo "make test     C tests, busted specs, examples; then again under ASan+UBSan"
	@echo "make bench-idle  the worker's wake-ups and CPU while idle"
	@echo "make asan     only the sanitizer runs (ASan+UBSan; the engine under TSan)"
