# Orchard — hand-written Makefile in the style of git and redis.
#   make            build every binary into bin/
#   make help       list the targets
#   V=1             show full commands
#   SANITIZE=address,undefined   sanitizer build (build-san/, binaries in bin-san/)

.DEFAULT_GOAL := all
SHELL := /bin/bash

CC ?= cc
PKG_CONFIG ?= pkg-config
PYTHON ?= /usr/bin/python3

WARNINGS = -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
	-Wmissing-prototypes -Wvla -Wformat=2 -Wno-format-nonliteral \
	-Wpointer-arith -Wcast-qual -Wwrite-strings -Wno-missing-field-initializers
CFLAGS ?= -O2 -g
PKG_CFLAGS := $(shell $(PKG_CONFIG) --cflags libpq json-c libcurl 2>/dev/null)
ALL_CFLAGS = -std=gnu11 -D_GNU_SOURCE -pthread -Ilib $(WARNINGS) $(CFLAGS) $(PKG_CFLAGS) \
	-include lib/banned.h -MMD -MP
ALL_LDFLAGS = -pthread -Wl,--as-needed $(LDFLAGS)

ifdef SANITIZE
ALL_CFLAGS += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
ALL_LDFLAGS += -fsanitize=$(SANITIZE)
OBJDIR = build-san
BINDIR = bin-san
else
OBJDIR = build
BINDIR = bin
endif

# Plain and sanitizer builds live apart (build/ and bin/, build-san/ and
# bin-san/), so `make test` runs both without one overwriting the other.
# A change of the SANITIZE list rebuilds build-san/ (its stamp is rewritten).
ifdef SANITIZE
FLAVOUR_STAMP = build-san/.flavour
$(shell mkdir -p build-san && { [ "$$(cat $(FLAVOUR_STAMP) 2>/dev/null)" = "$(SANITIZE)" ] || echo "$(SANITIZE)" > $(FLAVOUR_STAMP); })
endif

ifndef V
QUIET_CC = @echo '   ' CC $@;
QUIET_LINK = @echo '   ' LINK $@;
QUIET_AR = @echo '   ' AR $@;
endif

pc = $(shell $(PKG_CONFIG) --libs $(1) 2>/dev/null)

LIBS_common = $(call pc,json-c) $(call pc,libcurl) -lm
LIBS_pg = $(call pc,libpq)

# Every binary is built from all *.c files in its directory plus lib/.
LIB_SRC = $(wildcard lib/*.c)
LIB_OBJ = $(LIB_SRC:%.c=$(OBJDIR)/%.o)
LIB_A = $(OBJDIR)/liborchard.a

PROGRAMS = $(BINDIR)/orchard-api $(BINDIR)/orchard-controller $(BINDIR)/orchard-watchdog \
	$(BINDIR)/orchard-agent \
	$(BINDIR)/orchardctl $(BINDIR)/orchard-admin $(BINDIR)/orchard-supervise

api_SRC = $(wildcard api/*.c)
api_LIBS = -lfcgi $(LIBS_pg) $(call pc,libargon2) $(call pc,libcrypto) $(LIBS_common)
controller_SRC = $(wildcard controller/*.c)
controller_LIBS = $(LIBS_pg) $(call pc,libseccomp) $(call pc,yaml-0.1) $(LIBS_common)
agent_SRC = $(wildcard agent/*.c)
# Idle RSS (issue 3; bench/README.md, "Agent memory"): libgit2 and
# libarchive are dlopened on first use (agent/dl.h); libmicrohttpd is static
# with its GnuTLS stubbed out (agent/mhd_notls.c); json-c and libm (one
# function) are static too. An idle agent maps only libc and wslay.
agent_LIBS = -l:libmicrohttpd.a -lwslay -l:libjson-c.a -l:libm.a -lutil -ldl
cli_SRC = $(wildcard cli/*.c)
cli_LIBS = $(call pc,libarchive) -lwslay $(LIBS_common)
admin_SRC = $(wildcard admin/*.c)
admin_LIBS = $(LIBS_pg) $(call pc,libargon2) $(call pc,libarchive) $(LIBS_common)

# The local stack's supervisor (scripts/stack.sh; docs/operations.md).
supervise_SRC = $(wildcard supervise/*.c)
supervise_LIBS = $(LIBS_common)

bench_SRC = $(wildcard bench/*.c)
bench_LIBS = $(call pc,libcrypto) $(LIBS_common)

UNIT_SRC = $(wildcard tests/unit/*.c)
UNIT_OBJ = $(UNIT_SRC:%.c=$(OBJDIR)/%.o)

ALL_OBJ = $(LIB_OBJ) $(UNIT_OBJ) $(foreach m,api controller agent cli admin supervise bench,$($(m)_SRC:%.c=$(OBJDIR)/%.o))

all: $(PROGRAMS) ## build every binary into bin/ (bin-san/ with SANITIZE)

$(OBJDIR)/%.o: %.c $(FLAVOUR_STAMP)
	@mkdir -p $(dir $@)
	$(QUIET_CC)$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(LIB_A): $(LIB_OBJ)
	$(QUIET_AR)rm -f $@ && ar rcs $@ $^

define program
$$(BINDIR)/$(1): $$($(2)_SRC:%.c=$$(OBJDIR)/%.o) $$(LIB_A)
	@mkdir -p $$(BINDIR)
	$$(QUIET_LINK)$$(CC) -o $$@ $$(filter %.o %.a,$$^) $$(ALL_LDFLAGS) $$($(2)_LIBS)
endef
$(eval $(call program,orchard-api,api))
$(eval $(call program,orchard-controller,controller))
$(eval $(call program,orchard-agent,agent))

# The first process of every local sandbox (controller/watchdog/main.c):
# static and libc-only so that it starts fast, and without sanitizers even
# in bin-san/ (a static binary cannot carry them). It uses no liborchard.
$(BINDIR)/orchard-watchdog: controller/watchdog/main.c controller/watchdog/netns.c \
		controller/watchdog/watchdog.h
	@mkdir -p $(BINDIR)
	$(QUIET_LINK)$(CC) -std=gnu11 -D_GNU_SOURCE $(WARNINGS) -O2 -g -include lib/banned.h \
		-static -o $@ $(filter %.c,$^)
$(eval $(call program,orchardctl,cli))
$(eval $(call program,orchard-admin,admin))
$(eval $(call program,orchard-supervise,supervise))
$(eval $(call program,orchard-bench,bench))

# Each program's objects but its main.o, as an archive that bin/unit-tests
# links (git's libgit.a): a unit test calls a program's functions without
# compiling its .c files in, and the linker takes only the objects it needs.
UNIT_PROGRAMS = api controller agent
UNIT_A = $(UNIT_PROGRAMS:%=$(OBJDIR)/lib%.a)
define unit_archive
$$(OBJDIR)/lib$(1).a: $$(filter-out %/main.o,$$($(1)_SRC:%.c=$$(OBJDIR)/%.o))
	$$(QUIET_AR)rm -f $$@ && ar rcs $$@ $$^
endef
$(foreach m,$(UNIT_PROGRAMS),$(eval $(call unit_archive,$(m))))

$(BINDIR)/unit-tests: $(UNIT_OBJ) $(UNIT_A) $(LIB_A)
	@mkdir -p $(BINDIR)
	$(QUIET_LINK)$(CC) -o $@ $(filter %.o %.a,$^) $(ALL_LDFLAGS) $(api_LIBS) $(controller_LIBS) \
		-lwslay -lutil -ldl

tools: ## the sandbox-tools bundle (codex, claude, opencode) into bin/sandbox-tools
	@scripts/tools-build.sh

deps: ## install missing Debian packages (apt-get; needs root)
	@scripts/deps.sh

unit: $(BINDIR)/unit-tests ## run the C unit tests
	$(BINDIR)/unit-tests

SAN = address,undefined
SOAK_SECONDS ?= 600

test: ## install what is needed, build bin/ and bin-san/, run every test suite
	@scripts/deps.sh
	@$(MAKE) --no-print-directory all bin/unit-tests
	@$(MAKE) --no-print-directory SANITIZE=$(SAN) all bin-san/unit-tests
	@scripts/tools-build.sh
	@scripts/test.sh

test-san: ## only the unit and integration suites under ASan+UBSan (bin-san/)
	@scripts/deps.sh
	@$(MAKE) --no-print-directory SANITIZE=$(SAN) all bin-san/unit-tests
	@ORCHARD_TEST_STAGES=san scripts/test.sh

valgrind: ## the agent and the api under valgrind memcheck (tests/valgrind)
	@scripts/deps.sh
	@$(MAKE) --no-print-directory all
	@tests/valgrind/run.sh

soak: ## a 10-minute mixed load on a local stack: RSS and fd growth (tests/soak)
	@scripts/deps.sh
	@$(MAKE) --no-print-directory all
	@$(PYTHON) tests/soak/soak.py --seconds $(SOAK_SECONDS)

deploy-test: ## build the images with podman, run docker-compose.yml, smoke it (docs/deploy.md)
	@scripts/deps.sh
	@scripts/deploy-test.sh

up: ## start the whole local stack in the background (var/)
	@scripts/deps.sh
	@$(MAKE) --no-print-directory all
	@scripts/tools-build.sh || echo "make up: no sandbox-tools bundle (see above); sandboxes get none" >&2
	@scripts/stack.sh up

run: ## start the whole local stack in the foreground; Ctrl-C stops it
	@scripts/deps.sh
	@$(MAKE) --no-print-directory all
	@scripts/tools-build.sh || echo "make run: no sandbox-tools bundle (see above); sandboxes get none" >&2
	@scripts/stack.sh run

down: ## stop what `make up` started
	@scripts/stack.sh down

bench: ## run the benchmarks (bench/README.md) and print their figures
	@scripts/deps.sh
	@$(MAKE) --no-print-directory all bin/orchard-bench
	@bench/run.sh

clean: ## remove build products (keeps var/)
	rm -rf build build-san bin bin-san .flavour

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(firstword $(MAKEFILE_LIST)) | sed -E 's/^([a-z-]+):.*## /  \1\t/' | expand -t 14

.PHONY: all tools deps unit test test-san valgrind soak deploy-test up run down bench clean help
-include $(ALL_OBJ:.o=.d)
