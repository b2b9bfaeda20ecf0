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
			fig0 := m.figures()
			before, err := d.written()
			if err != nil {
				t.Fatal(err)
			}
			s := kfsStore{dir: m.dir}
			buf := make([]byte, bs)
			rng := rand.New(rand.NewPCG(1, 2))
			var fs []*kfsFile
			for i := range files {
				f, err := s.Open(fmt.Sprintf("f%d", i), true)
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
			if err := s.Remove("f0"); err != nil {
				t.Fatal(err)
			}
			if err := m.sync(); err != nil {
				t.Fatal(err)
			}
			after, err := d.written()
			if err != nil {
				t.Fatal(err)
			}
			fig := m.figures().sub(fig0)
			host := int64(files*fileSize + overwrites*bs)
			t.Logf("%s: capacity %d MiB; wrote %d KiB, the device counted %d KiB (WAF %.2f); own GC figures %+v",
				k.name, capacity>>20, host>>10, (after-before)>>10, float64(after-before)/float64(host), fig)
			// Every byte of the fill reached the device at least once.
			if after-before < files*fileSize {
				t.Errorf("device counted %d bytes written; the fill alone is %d", after-before, files*fileSize)
			}
			if k.name != "btrfs" && fig.GCBytes < 0 {
				t.Errorf("%s: no GC counter found in %q", k.name, m.sysDir)
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
