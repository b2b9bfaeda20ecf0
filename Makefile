# giouring reaches syscall.munmap through go:linkname, which Go >= 1.23
# refuses unless the linker is told -checklinkname=0: every build, test and
# bench below passes it, and a plain `go build` fails without it.
GO      ?= go
LDFLAGS := -ldflags=-checklinkname=0
export PATH := $(PATH):/usr/local/go/bin

.PHONY: all build test unit vet fmt lint bench run clean vmtest vmtest-peers fio-engine bench-fio bench-peers

all: build

build:
	$(GO) build $(LDFLAGS) -o zonefold .

# test is what CI runs: formatting, vet, and every test, race detector on.
# The server's fio tests need fio and the engine: fio-engine installs and
# builds them, and ZONEFOLD_REQUIRE_FIO makes those tests fail, not skip,
# if they are missing anyway.
test: lint unit vmtest

unit: fio-engine
	ZONEFOLD_FIO_ENGINE=$(FIO_ENGINE) ZONEFOLD_REQUIRE_FIO=1 $(GO) test $(LDFLAGS) -race -count=1 -timeout 20m ./...
	# The race detector allocates, so the no-allocation tests also run
	# without it; so does the engine's power-cut loop, which the race
	# detector would slow to minutes (under it, the loop runs 30 cuts).
	$(GO) test $(LDFLAGS) -count=1 -run 'DoesNotAllocate|TestPowerCutLoop' ./...

# fio-engine builds fio/engine.c against the installed fio's source
# (installing fio and gcc, and fetching the source into build/fio, on
# first use); see fio/build.sh.
FIO_ENGINE := $(CURDIR)/build/fio/zonefold-engine.so
fio-engine: $(FIO_ENGINE)

$(FIO_ENGINE): fio/engine.c fio/build.sh
	fio/build.sh $@

vet:
	$(GO) vet $(LDFLAGS) ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

lint: vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# vmtest runs the zns conformance suite, the engine's real-device tests
# (the model with reopens, and GC under overwrites) and Pebble on
# pebblefs (its model workload, close and reopen) against real zoned
# devices (null_blk zoned, QEMU ZNS NVMe as a block device and through
# passthrough) in a QEMU VM, without and with zone limits, and two of the
# daemon's trust probes (kill -9 under load, GC and recovery; rm against
# cold reads) on null_blk with zone limits (about 2.5 minutes; all of
# testdata/vm/h29b.sh, every probe on every device, takes 25), and the
# engine against media errors (null_blk's badblocks: failed appends,
# unreadable headers and data, bad metadata zones; under a minute). It installs
# QEMU and a Debian kernel on first use (root, apt) and caches them in
# build/vm.
vmtest:
	testdata/vm/vmtest.sh
	VMTEST_PKG=./engine VMTEST_RUN='^TestRealDevices$$' testdata/vm/vmtest.sh
	VMTEST_PKG=./pebblefs VMTEST_RUN='^TestPebbleRealDevices$$' testdata/vm/vmtest.sh
	ZONEFOLD_H29B_PROBES=kill9,rmread H29B_DEVICES=/dev/nullb0 testdata/vm/h29b.sh limits
	testdata/vm/badblocks.sh

# vmtest-peers runs bench peers' device tests (the kernel file systems
# made, mounted, written and measured; the device checks) in the VM harness
# with the tools and modules of testdata/vm/peers.sh, on Debian's stable
# kernel and on sid's (>= 6.15, for XFS zoned). Not part of make test: it
# installs f2fs-tools and btrfs-progs and fetches sid's kernel and xfsprogs.
vmtest-peers:
	CGO_ENABLED=0 $(GO) test -c $(LDFLAGS) -o build/bench.test ./bench
	testdata/vm/peers.sh --env ZONEFOLD_PEERS_DEVICE=/dev/nullb0 build/bench.test -test.run 'OnDevice' -test.v
	testdata/vm/peers.sh --kernel sid --env ZONEFOLD_PEERS_DEVICE=/dev/nullb0 build/bench.test -test.run 'OnDevice' -test.v

bench:
	$(GO) test $(LDFLAGS) -run '^$$' -bench . -benchmem ./...

# bench-peers compares zonefold with the kernel's zoned file systems
# (f2fs, btrfs, XFS zoned) on one null_blk zoned device in the VM harness:
# once with Debian's stable kernel, once with sid's for XFS zoned (4 and
# 13 minutes under TCG on a loaded 2-core machine on 2026-12-01; it prints
# the sizes, see testdata/vm/bench-peers.sh for the knobs). Tables, JSON and
# charts in build/bench-peers/.
bench-peers:
	testdata/vm/bench-peers.sh

# bench-fio compares the daemon path (fio + fio/engine.c + zonefold serve)
# with the same workload in process, for each seed workload (preset:scale,
# the scale shrinking the preset's per-file size to keep a run short), on an
# emu device in build/, in BENCH_FIO_ROUNDS alternating rounds (--force: the
# device is this target's scratch, holding the last run's files).
# To compare two builds (before and after a change), put each one's
# zonefold and zonefold-engine.so in a directory and run
# go run ./internal/benchab [--rounds N] DIR_A DIR_B: it runs these same
# jobs, alternating the builds round by round, and prints each build's
# medians, spreads and ratio of medians (with one DIR, that build's).
BENCH_FIO_RUNS   ?= seq128k:1 4x1m:0.5 16x8k:0.1 4k-qd128:1
BENCH_FIO_DEV    ?= emu:$(CURDIR)/build/bench-fio.dev?zone_size=64M&zones=128
BENCH_FIO_ROUNDS ?= 3
bench-fio: build fio-engine
	@for r in $(BENCH_FIO_RUNS); do \
		echo "== $${r%%:*}"; \
		ZONEFOLD_FIO_ENGINE=$(FIO_ENGINE) ./zonefold bench fio '$(BENCH_FIO_DEV)' --preset $${r%%:*} --scale $${r##*:} \
			--rounds $(BENCH_FIO_ROUNDS) --force || exit 1; \
	done

# run is the main job on embedded default devices: zone placement and GC
# policies compared under the four workloads where they decide the cost,
# three rounds with the configurations alternating (a few minutes; charts
# in ./zonefold-bench-gc/).
run: build
	./zonefold bench gc --repeat 3

clean:
	rm -rf zonefold build
