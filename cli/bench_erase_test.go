package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/zonefold/zonefold/server"
)

// TestBenchRefusesDeviceWithFiles: `zonefold bench run DEVICE` formatted
// DEVICE without asking, also when it held a zonefold file system with
// files in it: a user who pointed a benchmark at the device the daemon
// served lost every file put acknowledged as durable. `format` refuses
// such a device without --force, and so does `bench peers`; every bench
// that formats a DEVICE the user names (run, gc, fio, lsm, seeds'
// --affinity-device) does too, naming --force, and leaves the files.
func TestBenchRefusesDeviceWithFiles(t *testing.T) {
	device, sock, local := deviceAndLocalFile(t, "acknowledged")
	stop := serveInProcess(t, device, sock)
	zonefold(t, "put", local, "keep", "--socket", sock)
	stop()

	for _, args := range [][]string{
		{"bench", "run", device, "--size", "1M"},
		{"bench", "fio", device, "--size", "1M", "--rounds", "1"},
		{"bench", "gc", device, "--workload", "uniform"},
		{"bench", "lsm", device},
		{"bench", "seeds", "--quick", "--affinity-device", device},
	} {
		var out, errb bytes.Buffer
		code := Main(args, &out, &errb)
		stop = serveInProcess(t, device, sock)
		c, err := server.Dial(context.Background(), sock, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Stat(context.Background(), "keep")
		c.Close()
		stop()
		if err != nil {
			t.Fatalf("%s on a device holding files: exit %d, and the file put made durable is gone: %v", args[:2], code, err)
		}
		if code == 0 {
			t.Fatalf("%s on a device holding files exited 0 without erasing it: %q", args[:2], out.String())
		}
		if !strings.Contains(errb.String(), "--force") {
			t.Errorf("%s refused the device without naming --force: %q", args[:2], errb.String())
		}
	}
}

// TestBenchForceErasesDeviceWithFiles: with --force, bench run erases a
// device holding files, as format --force does.
func TestBenchForceErasesDeviceWithFiles(t *testing.T) {
	device, sock, local := deviceAndLocalFile(t, "acknowledged")
	stop := serveInProcess(t, device, sock)
	zonefold(t, "put", local, "keep", "--socket", sock)
	stop()
	var out, errb bytes.Buffer
	if code := Main([]string{"bench", "run", device, "--size", "1M", "--force"}, &out, &errb); code != 0 {
		t.Fatalf("bench run --force: exit %d: %s", code, errb.String())
	}
}
