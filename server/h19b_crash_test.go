package server

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// h19bProc is a zonefold serve subprocess (the test binary as zonefold).
type h19bProc struct {
	cmd    *exec.Cmd
	stderr *bytes.Buffer
	done   chan error
}

func startH19bProc(t testing.TB, device, socket string) *h19bProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "serve", device, "--socket", socket, "--format", "--cache", "16M")
	cmd.Env = append(os.Environ(), "ZONEFOLD_TEST_MAIN=zonefold")
	p := &h19bProc{cmd: cmd, stderr: &bytes.Buffer{}, done: make(chan error, 1)}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() { p.kill() })
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c, err := Dial(context.Background(), socket, 1<<20); err == nil {
			c.Close()
			return p
		}
	}
	t.Fatalf("daemon did not start")
	return nil
}

func (p *h19bProc) kill() {
	if p.cmd.ProcessState == nil {
		p.cmd.Process.Kill() // SIGKILL, our own child only
		<-p.done
		p.done <- nil
	}
}

func TestH19bDifferentialCrashSweep(t *testing.T) {
	for seed := int64(200); seed < 200+h19bSeeds(6); seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			dir := t.TempDir()
			device := fmt.Sprintf("emu:%s?zone_size=4M&zones=64", filepath.Join(dir, "dev"))
			socket := filepath.Join(dir, "zf.sock")
			p := startH19bProc(t, device, socket)
			d := newH19bDiff(t, socket, 2, seed)
			d.syncAll = true
			for range 3 {
				for range 250 {
					d.step()
				}
				d.note("kill -9")
				p.kill()
				for _, h := range d.hs {
					buf := make([]byte, 64)
					n, err := d.clients[h.client].ReadAt(d.ctx, h.zh, buf, 0)
					if err == nil {
						d.fail("old handle read after kill -9: %d bytes, no error", n)
					}
					h.osf.Close()
				}
				d.hs = nil
				p = startH19bProc(t, device, socket)
				for i, c := range d.clients {
					c.Close()
					d.clients[i] = dial(t, socket)
				}
				d.compareAll(d.clients[1])
			}
		})
	}
}
