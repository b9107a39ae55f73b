# agent-runner — one non-recursive Makefile.
#
#   make            build everything into $(BUILD)/bin
#   make run        install what is missing, then serve https://127.0.0.1:8443
#   make test       install what is missing, build, run unit + integration tests
#   make asan       the same tests under AddressSanitizer + UBSan (build-asan/)
#   make tsan       unit tests under ThreadSanitizer (build-tsan/)
#   make bench      install what is missing, build, run tests/bench/run.py on its own stack
#                   and write BENCHMARKS.md
#
# User knobs: CFLAGS (optimisation, sanitizers), LDFLAGS, WERROR=1 (CI), BUILD.

CC      ?= gcc
BUILD   ?= build
CFLAGS  ?= -O2 -g
PKGS    := fcgi libcurl json-c openssl

WARN := -Wall -Wextra -Wshadow -Wconversion -Wstrict-prototypes -Wmissing-prototypes \
        -Wformat=2 -Wvla -Wpointer-arith -Wundef -fno-common $(if $(WERROR),-Werror)
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
ALL_CPPFLAGS := -D_GNU_SOURCE $(CPPFLAGS)
ALL_CFLAGS   := -std=c17 -pthread $(WARN) $(PKG_CFLAGS) $(CFLAGS)
LDLIBS       := $(PKG_LIBS) -pthread -lrt

BIN := $(BUILD)/bin

ENGINE_SRC := $(filter-out engine/keeper_main.c,$(wildcard engine/*.c engine/harness/*.c engine/provider/*.c))
FRONT_SRC  := $(filter-out fcgi/master.c fcgi/ctl.c,$(wildcard fcgi/*.c))
UNIT_SRC   := $(wildcard tests/unit/*.c)

ENGINE_OBJ := $(ENGINE_SRC:%.c=$(BUILD)/%.o)
FRONT_OBJ  := $(FRONT_SRC:%.c=$(BUILD)/%.o)
UNIT_OBJ   := $(UNIT_SRC:%.c=$(BUILD)/%.o)
BENCH_OBJ  := $(BUILD)/tests/bench/loadgen.o $(BUILD)/tests/bench/bench_pool.o
ALL_OBJ    := $(ENGINE_OBJ) $(FRONT_OBJ) $(UNIT_OBJ) $(BUILD)/fcgi/master.o $(BUILD)/fcgi/ctl.o \
              $(BUILD)/engine/keeper_main.o $(BUILD)/tests/fixtures/acp_scripted.o $(BENCH_OBJ)

PROGRAMS := $(BIN)/agent-runnerd $(BIN)/agent-runner-keeper $(BIN)/agent-runner-ctl \
            $(BIN)/acp-scripted
BENCH_PROGRAMS := $(BIN)/loadgen $(BIN)/bench-pool

.PHONY: all test unit integration run asan tsan deps harnesses clean bench bench-programs
.DEFAULT_GOAL := all

all: $(PROGRAMS) $(BIN)/unit-tests

$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CPPFLAGS) -MMD -MP $(ALL_CFLAGS) -c $< -o $@

$(BUILD)/libengine.a: $(ENGINE_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/libfront.a: $(FRONT_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(BIN)/agent-runnerd: $(BUILD)/fcgi/master.o $(BUILD)/libfront.a $(BUILD)/libengine.a
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BIN)/agent-runner-keeper: $(BUILD)/engine/keeper_main.o $(BUILD)/libengine.a
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BIN)/agent-runner-ctl: $(BUILD)/fcgi/ctl.o $(BUILD)/libengine.a
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BIN)/acp-scripted: $(BUILD)/tests/fixtures/acp_scripted.o
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BIN)/unit-tests: $(UNIT_OBJ) $(BUILD)/libfront.a $(BUILD)/libengine.a
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS) -lcunit

$(BIN)/loadgen: $(BUILD)/tests/bench/loadgen.o
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ -lcurl -pthread

$(BIN)/bench-pool: $(BUILD)/tests/bench/bench_pool.o $(BUILD)/libengine.a
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

-include $(ALL_OBJ:.o=.d)

deps:
	bash scripts/install-deps

harnesses:
	bash scripts/install-harnesses

unit: $(BIN)/unit-tests
	AR_FIXTURES=$(CURDIR)/tests/fixtures AR_SHARED=$(CURDIR)/tests/fixtures/agenta-golden $(BIN)/unit-tests

integration: $(PROGRAMS)
	BUILD=$(BUILD) python3 tests/integration/run.py

test: deps harnesses
	$(MAKE) all
	$(MAKE) unit
	$(MAKE) integration

bench-programs: $(PROGRAMS) $(BENCH_PROGRAMS)

# Benchmarks on a real stack in a temp dir (tests/bench/run.py): one table on stdout, the same
# table with the machine description in BENCHMARKS.md. Meant for an otherwise idle machine.
bench: deps harnesses
	$(MAKE) bench-programs
	BUILD=$(BUILD) python3 tests/bench/run.py --out $(CURDIR)/BENCHMARKS.md

run: deps harnesses
	$(MAKE) $(PROGRAMS)
	bash scripts/run-local

asan:
	$(MAKE) BUILD=build-asan CFLAGS='-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer' LDFLAGS='-fsanitize=address,undefined' all unit integration

asan-unit:
	$(MAKE) BUILD=build-asan CFLAGS='-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer' LDFLAGS='-fsanitize=address,undefined' unit

tsan:
	$(MAKE) BUILD=build-tsan CFLAGS='-O1 -g -fsanitize=thread' LDFLAGS='-fsanitize=thread' unit

clean:
	rm -rf build build-asan build-tsan
