# giouring reaches syscall.munmap through go:linkname, which Go >= 1.23
# refuses unless the linker is told -checklinkname=0: every build, test and
# bench below passes it, and a plain `go build` fails without it.
GO      ?= go
LDFLAGS := -ldflags=-checklinkname=0
export PATH := $(PATH):/usr/local/go/bin

.PHONY: all build test unit vet fmt lint bench run clean vmtest

all: build

build:
	$(GO) build $(LDFLAGS) -o zonefold .

# test is what CI runs: formatting, vet, and every test, race detector on.
test: lint unit

unit:
	$(GO) test $(LDFLAGS) -race -count=1 ./...

vet:
	$(GO) vet $(LDFLAGS) ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

lint: vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# vmtest runs the zns conformance suite against real zoned devices (null_blk
# zoned, QEMU ZNS NVMe as a block device and through passthrough) in a QEMU
# VM, without and with zone limits. It installs QEMU and a Debian kernel on
# first use (root, apt) and caches them in build/vm.
vmtest:
	testdata/vm/vmtest.sh

bench:
	$(GO) test $(LDFLAGS) -run '^$$' -bench . -benchmem ./...

# run is the main job on the embedded default device: zone placement and GC
# policies compared under random overwrites (about a minute; charts in
# ./zonefold-bench-gc/).
run: build
	./zonefold bench gc

clean:
	rm -rf zonefold build
