package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/zns"
)

// peersTestDevice is the zoned block device the kernel file system tests
// may erase, from ZONEFOLD_PEERS_DEVICE; they skip without it. They run in
// the VM harness, which has the file systems' tools and modules:
//
//	CGO_ENABLED=0 go test -c -ldflags=-checklinkname=0 -o build/bench.test ./bench
//	testdata/vm/peers.sh [--kernel sid] --env ZONEFOLD_PEERS_DEVICE=/dev/nullb0 \
//	  build/bench.test -test.run 'OnDevice' -test.v
//
// (make vmtest-peers does both kernels.)
func peersTestDevice(t *testing.T) *peerDevice {
	t.Helper()
	path := os.Getenv("ZONEFOLD_PEERS_DEVICE")
	if path == "" {
		t.Skip("ZONEFOLD_PEERS_DEVICE is not set (make vmtest-peers sets it in the VM harness)")
	}
	d, err := openPeerDevice(path, true)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Each kernel file system this kernel supports: made, mounted, written
// through the store (a sequential fill and fsync'd random overwrites),
// measured by the device counter, unmounted; then the device is refused
// without --force, naming that file system.
func TestKernelFSOnDevice(t *testing.T) {
	d := peersTestDevice(t)
	restore, err := dirtyLimit(16 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := restore(); err != nil {
			t.Error(err)
		}
	}()
	ctx := context.Background()
	for _, k := range kernelFSes {
		t.Run(k.name, func(t *testing.T) {
			if why := k.unsupported(); why != "" {
				t.Skip(why)
			}
			if err := d.resetZones(); err != nil {
				t.Fatal(err)
			}
			m, err := makeKernelFS(ctx, k, d.path)
			if err != nil {
				t.Fatal(err)
			}
			mounted := true
			defer func() {
				if mounted {
					if err := m.unmount(); err != nil {
						t.Error(err)
					}
				}
			}()
			capacity, err := m.capacity()
			if err != nil || capacity <= 0 {
				t.Fatalf("capacity %d, %v", capacity, err)
			}
			const files, fileSize, bs, overwrites = 4, 4 << 20, 8 << 10, 512
			if capacity < 2*files*fileSize {
				t.Fatalf("capacity %d: too small for the test's %d bytes", capacity, files*fileSize)
			}
			b, err := newKernelFSBackend(m, d)
			if err != nil {
				t.Fatal(err)
			}
			if b.Capacity() != capacity {
				t.Errorf("backend capacity %d, statfs %d", b.Capacity(), capacity)
			}
			k0 := b.Counters()
			buf := make([]byte, bs)
			rng := rand.New(rand.NewPCG(1, 2))
			var fs []BackendFile
			for i := range files {
				f, err := b.Create(fmt.Sprintf("f%d", i))
				if err != nil {
					t.Fatal(err)
				}
				fs = append(fs, f)
				for off := int64(0); off < fileSize; off += bs {
					if _, err := f.WriteAt(ctx, buf, off); err != nil {
						t.Fatal(err)
					}
				}
			}
			for i := range overwrites {
				f := fs[rng.IntN(files)]
				if _, err := f.WriteAt(ctx, buf, rng.Int64N(fileSize/bs)*bs); err != nil {
					t.Fatal(err)
				}
				if i%16 == 0 {
					if err := f.Sync(ctx); err != nil {
						t.Fatal(err)
					}
				}
			}
			for _, f := range fs {
				if err := f.Close(); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.Remove("f0"); err != nil {
				t.Fatal(err)
			}
			if err := b.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			k1 := b.Counters()
			host := int64(files*fileSize + overwrites*bs)
			dev := k1.DevWritten - k0.DevWritten
			t.Logf("%s: capacity %d MiB; wrote %d KiB, the device counted %d KiB (WAF %.2f); GC counters %+v -> %+v",
				k.name, capacity>>20, host>>10, dev>>10, float64(dev)/float64(host), k0, k1)
			// Every byte of the fill reached the device at least once.
			if dev < files*fileSize {
				t.Errorf("device counted %d bytes written; the fill alone is %d", dev, files*fileSize)
			}
			if k.name != "btrfs" && (k1.GCWritten < 0 || k1.GCResets < 0) {
				t.Errorf("%s: no GC counters found in %q", k.name, m.sysDir)
			}
			mounted = false
			if err := m.unmount(); err != nil {
				t.Fatal(err)
			}
			_, err = openPeerDevice(d.path, false)
			if err == nil || !strings.Contains(strings.ToLower(err.Error()), k.name) {
				t.Errorf("open without --force after %s: %v; want a refusal naming %s", k.name, err, k.name)
			}
		})
	}
}

// A device zonefold formatted is refused without --force as holding a
// zonefold file system; after a reset it is accepted.
func TestPeerDeviceZonefoldOnDevice(t *testing.T) {
	d := peersTestDevice(t)
	dev, err := zns.Open(d.path, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.FormatAndOpen(dev, engine.Config{})
	if err != nil {
		dev.Close()
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := openPeerDevice(d.path, false); err == nil || !strings.Contains(err.Error(), "zonefold") {
		t.Errorf("open without --force after format: %v; want a refusal naming zonefold", err)
	}
	if err := d.resetZones(); err != nil {
		t.Fatal(err)
	}
	// f2fs and XFS leave their superblocks in the conventional zones,
	// which a zone reset keeps: accepted only if the earlier test did not
	// run, so only the zone check is asserted here.
	if what := d.contents(); strings.Contains(what, "zone") || strings.Contains(what, "zonefold") {
		t.Errorf("after reset: contents %q", what)
	}
}

// zonefold's row takes its device bytes from the block device's counter,
// as the kernel file systems' rows do: it must agree with what the engine
// itself counts (the engine is the device's only writer here).
func TestDeviceCountedOnDevice(t *testing.T) {
	d := peersTestDevice(t)
	if err := d.resetZones(); err != nil {
		t.Fatal(err)
	}
	b, closeTarget, err := peerTarget{name: TargetZonefold}.open(context.Background(), d, DefaultPeers)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := closeTarget(); err != nil {
			t.Error(err)
		}
	}()
	ctx := context.Background()
	eb := b.(deviceCounted).EngineBackend
	k0, e0 := b.Counters(), eb.Counters()
	f, err := b.Create("f")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	for off := int64(0); off < 32<<20; off += int64(len(buf)) {
		if _, err := f.WriteAt(ctx, buf, off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	dev, own := b.Counters().DevWritten-k0.DevWritten, eb.Counters().DevWritten-e0.DevWritten
	t.Logf("32 MiB written: the device counted %d bytes, the engine %d", dev, own)
	if dev < 32<<20 || own < 32<<20 || dev < own*95/100 || dev > own*105/100 {
		t.Errorf("device counter %d and engine counter %d disagree by more than 5%% (or miss the 32 MiB written)", dev, own)
	}
}
