# agent-runner — one non-recursive Makefile.
#
#   make            build everything into $(BUILD)/bin
#   make run        install what is missing, then serve https://127.0.0.1:8443
#   make check      the quick loop (under 3 minutes): install what is missing, build,
#                   scripts/check-layers, unit tests, fuzz replay and the integration smoke
#                   subset (make smoke)
#   make test       the full suite: install what is missing, build, scripts/check-layers, unit
#                   tests, fuzz replay, the fixtures' self-test and every integration module
#                   (~15 minutes)
#   make smoke      the integration smoke subset only (SMOKE in tests/integration/run.py:
#                   each layer once through the real stack)
#   make asan       the same tests under AddressSanitizer + UBSan (build-asan/)
#   make tsan       unit tests under ThreadSanitizer (build-tsan/)
#   make chaos      kill -9 workers, keepers and the master under load, CHAOS_ROUNDS rounds
#   make fuzz-replay  replay every fuzz corpus through its target (gcc; part of make test)
#   make fixtures-selftest  the fake callback / MCP / Agenta API servers (part of make test)
#   make fuzz       run each libFuzzer target FUZZ_SECONDS (clang, build-fuzz/)
#   make bench      install what is missing, build, run tests/bench/run.py on its own stack
#                   and write BENCHMARKS.md
#
# User knobs: CFLAGS (optimisation, sanitizers), LDFLAGS, WERROR=1 (CI), BUILD.

CC      ?= gcc
BUILD   ?= build
CFLAGS  ?= -O2 -g
PKGS    := fcgi libcurl json-c openssl libseccomp hiredis

WARN := -Wall -Wextra -Wshadow -Wconversion -Wstrict-prototypes -Wmissing-prototypes \
        -Wformat=2 -Wvla -Wpointer-arith -Wundef -fno-common $(if $(WERROR),-Werror)
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
ALL_CPPFLAGS := -D_GNU_SOURCE -Iengine $(CPPFLAGS)
ALL_CFLAGS   := -std=c17 -pthread $(WARN) $(PKG_CFLAGS) $(CFLAGS)
LDLIBS       := $(PKG_LIBS) -pthread -lrt

BIN := $(BUILD)/bin

# engine/<layer>/*.c (and provider/daytona/): the engine library; keeper/ and fcgi/ are programs
ENGINE_SRC := $(wildcard engine/*.c engine/*/*.c engine/*/*/*.c)
KEEPER_SRC := $(filter-out keeper/main.c keeper/keeper_local.c keeper/curl_lazy.c,$(wildcard keeper/*.c))
FRONT_SRC  := $(filter-out fcgi/master.c fcgi/ctl.c,$(wildcard fcgi/*.c))
UNIT_SRC   := $(wildcard tests/unit/*.c)
# tests/fuzz/fuzz_<target>.c, each with its seed corpus in tests/fuzz/corpus/<target>/
FUZZ_TARGETS := $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_OBJ     := $(FUZZ_TARGETS:%=$(BUILD)/tests/fuzz/fuzz_%.o) $(BUILD)/tests/fuzz/replay.o

ENGINE_OBJ := $(ENGINE_SRC:%.c=$(BUILD)/%.o)
FRONT_OBJ  := $(FRONT_SRC:%.c=$(BUILD)/%.o)
KEEPER_OBJ := $(KEEPER_SRC:%.c=$(BUILD)/%.o)
UNIT_OBJ   := $(UNIT_SRC:%.c=$(BUILD)/%.o)
BENCH_OBJ  := $(BUILD)/tests/bench/loadgen.o $(BUILD)/tests/bench/bench_pool.o \
              $(BUILD)/tests/bench/bench_net.o
ALL_OBJ    := $(ENGINE_OBJ) $(FRONT_OBJ) $(KEEPER_OBJ) $(UNIT_OBJ) $(BUILD)/fcgi/master.o $(BUILD)/fcgi/ctl.o \
              $(BUILD)/keeper/main.o $(BUILD)/keeper/keeper_local.o $(BUILD)/keeper/curl_lazy.o \
              $(BUILD)/tests/fixtures/acp_scripted.o $(BENCH_OBJ) \
              $(BUILD)/tools/agent_runner_mcp.o $(BUILD)/tools/pi_stdio.o \
              $(BUILD)/tests/fixtures/daytona_driver.o

PROGRAMS := $(BIN)/agent-runnerd $(BIN)/agent-runner-keeper $(BIN)/agent-runner-keeper-remote \
            $(BIN)/agent-runner-ctl \
            $(BIN)/acp-scripted $(BIN)/agent-runner-mcp $(BIN)/agent-runner-pi-stdio \
            $(BIN)/daytona-driver
BENCH_PROGRAMS := $(BIN)/loadgen $(BIN)/bench-pool $(BIN)/bench-net

.PHONY: all check test unit integration smoke fixtures-selftest chaos run asan tsan deps harnesses clean bench bench-programs
.PHONY: fuzz-replay fuzz
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

$(BUILD)/libkeeper.a: $(KEEPER_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(BIN)/agent-runnerd: $(BUILD)/fcgi/master.o $(BUILD)/libfront.a $(BUILD)/libengine.a
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The keeper of a local sandbox: keeper_local.o (the local provider's registry) ahead of the
# engine keeps the Daytona provider out, and with it OpenSSL and its libraries (--as-needed:
# only what is referenced is loaded); curl_lazy.o loads libcurl (the model gateway's upstream
# client) at its first use instead of at every start. A remote sandbox's keeper has them all.
$(BIN)/agent-runner-keeper: $(BUILD)/keeper/main.o $(BUILD)/keeper/keeper_local.o \
                            $(BUILD)/keeper/curl_lazy.o $(BUILD)/libkeeper.a $(BUILD)/libengine.a
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -Wl,--as-needed -o $@ $^ $(filter-out -lcurl,$(LDLIBS))

$(BIN)/agent-runner-keeper-remote: $(BUILD)/keeper/main.o $(BUILD)/libkeeper.a $(BUILD)/libengine.a
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BIN)/agent-runner-ctl: $(BUILD)/fcgi/ctl.o $(BUILD)/libengine.a
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The stdio MCP server that runs inside the sandbox: libc + json-c only (no curl, no OpenSSL),
# so the archive may lend it only objects that need nothing else (the link proves it).
$(BIN)/agent-runner-mcp: $(BUILD)/tools/agent_runner_mcp.o $(BUILD)/libengine.a
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(shell pkg-config --libs json-c)

# pi started before pi-acp asks for it (local sandboxes): runs inside the sandbox, libc only
$(BIN)/agent-runner-pi-stdio: $(BUILD)/tools/pi_stdio.o
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^

$(BIN)/acp-scripted: $(BUILD)/tests/fixtures/acp_scripted.o
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# drives the Daytona provider modules against the fake Daytona (tests/integration)
$(BIN)/daytona-driver: $(BUILD)/tests/fixtures/daytona_driver.o $(BUILD)/libengine.a
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BIN)/unit-tests: $(UNIT_OBJ) $(BUILD)/libfront.a $(BUILD)/libkeeper.a $(BUILD)/libengine.a
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS) -lcunit

$(BIN)/loadgen: $(BUILD)/tests/bench/loadgen.o
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ -lcurl -pthread

$(BIN)/bench-pool: $(BUILD)/tests/bench/bench_pool.o $(BUILD)/libengine.a
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BIN)/bench-net: $(BUILD)/tests/bench/bench_net.o $(BUILD)/libengine.a
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BIN)/fuzz-replay-%: $(BUILD)/tests/fuzz/fuzz_%.o $(BUILD)/tests/fuzz/replay.o \
                      $(BUILD)/libfront.a $(BUILD)/libkeeper.a $(BUILD)/libengine.a
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

-include $(ALL_OBJ:.o=.d) $(FUZZ_OBJ:.o=.d)
.SECONDARY: $(FUZZ_OBJ)

deps:
	bash scripts/install-deps

harnesses:
	bash scripts/install-harnesses

unit: $(BIN)/unit-tests
	AR_FIXTURES=$(CURDIR)/tests/fixtures AR_SHARED=$(CURDIR)/tests/fixtures/agenta-golden $(BIN)/unit-tests

integration: $(PROGRAMS)
	BUILD=$(BUILD) python3 tests/integration/run.py

smoke: $(PROGRAMS)
	BUILD=$(BUILD) python3 tests/integration/run.py --smoke

# The scripted fake servers (tool callback, MCP, Agenta API) against their own self-test.
fixtures-selftest:
	python3 tests/fixtures/test_fakes_selftest.py

# Every fuzz target over its committed corpus: fast, no libFuzzer needed.
fuzz-replay: $(FUZZ_TARGETS:%=$(BIN)/fuzz-replay-%)
	@for t in $(FUZZ_TARGETS); do \
	    $(BIN)/fuzz-replay-$$t tests/fuzz/corpus/$$t || exit 1; \
	done

# CHAOS_ARGS: e.g. --seed N --seconds-per-round S --sessions K --schedule balanced --keep
CHAOS_ROUNDS ?= 30
CHAOS_ARGS ?=
chaos: $(PROGRAMS)
	BUILD=$(BUILD) python3 tests/chaos/run.py --rounds $(CHAOS_ROUNDS) $(CHAOS_ARGS)

check: deps harnesses
	$(MAKE) all
	scripts/check-layers
	$(MAKE) unit
	$(MAKE) fuzz-replay
	$(MAKE) smoke

test: deps harnesses
	$(MAKE) all
	scripts/check-layers
	$(MAKE) unit
	$(MAKE) fuzz-replay
	$(MAKE) fixtures-selftest
	$(MAKE) integration

bench-programs: $(PROGRAMS) $(BENCH_PROGRAMS)

# Benchmarks on a real stack in a temp dir (tests/bench/run.py): one table on stdout, the same
# table with the machine description in BENCHMARKS.md. Meant for an otherwise idle machine.
# Installs only what scripts/install-deps does (with strace, --bench); the pi rows need the harnesses already
# installed (make harnesses) and say so when they are not. BENCH_ARGS="--only tools" runs some
# rows only (and leaves BENCHMARKS.md alone); "--quick" makes a smoke run.
bench: deps
	bash scripts/install-deps --bench
	$(MAKE) bench-programs
	BUILD=$(BUILD) python3 tests/bench/run.py --out $(CURDIR)/BENCHMARKS.md $(BENCH_ARGS)

run: deps harnesses
	$(MAKE) $(PROGRAMS)
	bash scripts/run-local

asan:
	$(MAKE) BUILD=build-asan CFLAGS='-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer' LDFLAGS='-fsanitize=address,undefined' all unit integration

asan-unit:
	$(MAKE) BUILD=build-asan CFLAGS='-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer' LDFLAGS='-fsanitize=address,undefined' unit

tsan:
	$(MAKE) BUILD=build-tsan CFLAGS='-O1 -g -fsanitize=thread' LDFLAGS='-fsanitize=thread' all unit integration

# libFuzzer: clang with ASan + UBSan into its own tree; every engine and front-end object is
# rebuilt there with fuzzer-no-link so coverage reaches the code under test. Each target runs
# FUZZ_SECONDS on a scratch copy of its corpus (build-fuzz/corpus/<target>, kept between runs,
# seeded from tests/fuzz/corpus/<target>); the log is build-fuzz/fuzz-<target>.log, crashes
# land in build-fuzz/artifacts/<target>/. Extra libFuzzer flags: FUZZ_FLAGS='-jobs=4 ...'.
FUZZ_BUILD   := build-fuzz
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_CFLAGS  := -std=c17 -pthread $(filter-out -Werror,$(WARN)) $(PKG_CFLAGS) -O1 -g \
                -fno-omit-frame-pointer $(FUZZ_SAN)

$(FUZZ_BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(FUZZ_CC) $(ALL_CPPFLAGS) -MMD -MP $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_BUILD)/libengine.a: $(ENGINE_SRC:%.c=$(FUZZ_BUILD)/%.o)
	rm -f $@ && ar rcs $@ $^

$(FUZZ_BUILD)/libfront.a: $(FRONT_SRC:%.c=$(FUZZ_BUILD)/%.o)
	rm -f $@ && ar rcs $@ $^

$(FUZZ_BUILD)/libkeeper.a: $(KEEPER_SRC:%.c=$(FUZZ_BUILD)/%.o)
	rm -f $@ && ar rcs $@ $^

$(FUZZ_BUILD)/fuzz-%: $(FUZZ_BUILD)/tests/fuzz/fuzz_%.o $(FUZZ_BUILD)/libfront.a \
                      $(FUZZ_BUILD)/libkeeper.a $(FUZZ_BUILD)/libengine.a
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $^ $(LDLIBS)

.SECONDARY: $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/tests/fuzz/fuzz_%.o)
-include $(wildcard $(FUZZ_BUILD)/engine/*.d $(FUZZ_BUILD)/engine/*/*.d \
                    $(FUZZ_BUILD)/engine/*/*/*.d $(FUZZ_BUILD)/fcgi/*.d $(FUZZ_BUILD)/keeper/*.d \
                    $(FUZZ_BUILD)/tests/fuzz/*.d)

fuzz: $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/fuzz-%)
	@failed=""; \
	for t in $(FUZZ_TARGETS); do \
	    mkdir -p $(FUZZ_BUILD)/corpus/$$t $(FUZZ_BUILD)/artifacts/$$t; \
	    cp tests/fuzz/corpus/$$t/* $(FUZZ_BUILD)/corpus/$$t/; \
	    dict=; if [ -f tests/fuzz/$$t.dict ]; then dict=-dict=tests/fuzz/$$t.dict; fi; \
	    echo "fuzz: $$t for $(FUZZ_SECONDS)s"; \
	    $(FUZZ_BUILD)/fuzz-$$t -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	        -artifact_prefix=$(FUZZ_BUILD)/artifacts/$$t/ $$dict $(FUZZ_FLAGS) \
	        $(FUZZ_BUILD)/corpus/$$t > $(FUZZ_BUILD)/fuzz-$$t.log 2>&1 || failed="$$failed $$t"; \
	    grep -E '^#[0-9]+[[:space:]]+DONE|stat::number_of_executed_units' $(FUZZ_BUILD)/fuzz-$$t.log \
	        | sed "s/^/fuzz: $$t: /"; \
	done; \
	if [ -n "$$failed" ]; then \
	    echo "fuzz: FAILED:$$failed (see $(FUZZ_BUILD)/fuzz-<target>.log, artifacts/)"; \
	    exit 1; \
	fi

clean:
	rm -rf build build-asan build-tsan $(FUZZ_BUILD)
