package cli

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/zns"
)

// buildZonefold builds the real binary into dir.
func buildZonefold(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "zonefold")
	out, err := exec.Command("go", "build", "-ldflags=-checklinkname=0", "-o", bin, "..").CombinedOutput()
	if err != nil {
		t.Fatalf("build zonefold: %v\n%s", err, out)
	}
	return bin
}

// TestKill9LosesNoFsyncedWrite kills a real zonefold process mid-workload
// with SIGKILL, reopens the device, and checks that every write an fsync
// acknowledged is there.
func TestKill9LosesNoFsyncedWrite(t *testing.T) {
	bin := buildZonefold(t)
	const files, blocks, every = 4, 64, 40
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			devName := fmt.Sprintf("emu:%s?zone_size=1M&zones=24", filepath.Join(t.TempDir(), "dev"))
			cmd := exec.Command(bin, "debug", "crash-writer", devName, "--seed", fmt.Sprint(seed),
				"--files", fmt.Sprint(files), "--blocks", fmt.Sprint(blocks), "--sync-every", fmt.Sprint(every))
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// Kill after a seed-dependent number of acknowledged fsyncs,
			// while the writer is between two of them.
			killAfter := 3 + int(seed)*4
			var synced uint64
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				line := sc.Text()
				if n, ok := strings.CutPrefix(line, "synced "); ok {
					synced, _ = strconv.ParseUint(n, 10, 64)
					killAfter--
					if killAfter == 0 {
						break
					}
				}
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			go func() { // drain so the child is never blocked on a full pipe
				for sc.Scan() {
				}
			}()
			err = cmd.Wait()
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("writer did not die by SIGKILL: %v\n%s", err, stderr.String())
			}
			if synced == 0 {
				t.Fatalf("writer acknowledged no fsync before the kill\n%s", stderr.String())
			}

			// What must be there: for each block, the last write at or
			// before the last acknowledged fsync; a later write of the
			// same block may also have made it.
			durable := make([][]uint64, files)
			later := make([][]map[uint64]bool, files)
			for i := range durable {
				durable[i] = make([]uint64, blocks)
				later[i] = make([]map[uint64]bool, blocks)
			}
			s := newCrashSchedule(seed, files, blocks)
			for k := uint64(1); k <= synced+10*every; k++ {
				f, b := s.next()
				if k <= synced {
					durable[f][b] = k
				} else {
					if later[f][b] == nil {
						later[f][b] = map[uint64]bool{}
					}
					later[f][b][k] = true
				}
			}
			e, err := engine.Open(devName, engine.Config{CacheBytes: 4 << 20})
			if err != nil {
				t.Fatalf("reopen after kill -9: %v", err)
			}
			defer e.Close()
			buf := make([]byte, crashBlock)
			want := make([]byte, crashBlock)
			for f := range files {
				h, err := e.Open(fmt.Sprintf("crash.%d", f))
				if err != nil {
					t.Fatalf("file %d lost: %v", f, err)
				}
				for b := range blocks {
					clear(buf)
					h.ReadAt(buf, int64(b)*crashBlock)
					k := binary.LittleEndian.Uint64(buf[16:])
					if k == durable[f][b] || later[f][b][k] {
						if k != 0 {
							crashStamp(want, f, b, k)
							if !bytes.Equal(buf, want) {
								t.Fatalf("file %d block %d: torn content of write %d", f, b, k)
							}
						}
						continue
					}
					t.Fatalf("file %d block %d holds write %d; fsync at %d acknowledged write %d", f, b, k, synced, durable[f][b])
				}
			}
		})
	}
}

// The device left by kill -9 is consistent by fsck, too.
func TestKill9ThenFsck(t *testing.T) {
	bin := buildZonefold(t)
	devName := fmt.Sprintf("emu:%s?zone_size=1M&zones=24", filepath.Join(t.TempDir(), "dev"))
	cmd := exec.Command(bin, "debug", "crash-writer", devName, "--sync-every", "25")
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	for n := 0; n < 8 && sc.Scan(); {
		if strings.HasPrefix(sc.Text(), "synced") {
			n++
		}
	}
	cmd.Process.Signal(syscall.SIGKILL)
	go func() {
		for sc.Scan() {
		}
	}()
	cmd.Wait()
	dev, err := zns.Open(devName, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	rep, err := engine.Fsck(dev)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) > 0 || rep.Files != 4 {
		t.Fatalf("fsck after kill -9: %d files, problems %v", rep.Files, rep.Problems)
	}
}
