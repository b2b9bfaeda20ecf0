package server_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/zonefold/zonefold/internal/syncbuf"
	"github.com/zonefold/zonefold/server"
)

// Crash points for the daemon the test binary runs (TestMain,
// installCrashHook), chosen by the environment:
//
//   - envKillAt=N: the daemon kills itself (SIGKILL, a kill -9) just
//     before it runs the N-th request that opens, closes, stats, removes,
//     renames, truncates or fsyncs (counted over all connections): every
//     request before it ran, none after.
//   - envDropRename=FILE: the first rename waits until FILE exists and
//     is then dropped (run as a nop), as if its client had died before
//     sending it: the test kills the client meanwhile.
const (
	envKillAt     = "ZONEFOLD_TEST_KILL_AT"
	envDropRename = "ZONEFOLD_TEST_DROP_RENAME"
	killedMark    = "zonefold-test: kill -9 before request"
	renameMark    = "zonefold-test: rename held"
)

func installCrashHook() error {
	killAt, drop := os.Getenv(envKillAt), os.Getenv(envDropRename)
	if killAt == "" && drop == "" {
		return nil
	}
	var at int64
	if killAt != "" {
		var err error
		if at, err = strconv.ParseInt(killAt, 10, 64); err != nil || at < 1 {
			return fmt.Errorf("%s=%q: want a request count from 1", envKillAt, killAt)
		}
	}
	var n atomic.Int64
	var held atomic.Bool
	server.SetExecHook(func(q *server.Request, _ *server.Reply) {
		switch q.Op {
		case server.OpOpen, server.OpClose, server.OpStat, server.OpRemove, server.OpRename,
			server.OpTruncate, server.OpFsync:
			if at > 0 && n.Add(1) == at {
				fmt.Fprintf(os.Stderr, "%s %d (%v)\n", killedMark, at, q.Op)
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
		}
		if drop != "" && q.Op == server.OpRename && held.CompareAndSwap(false, true) {
			fmt.Fprintln(os.Stderr, renameMark)
			for end := time.Now().Add(2 * time.Minute); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
				if _, err := os.Stat(drop); err == nil {
					break
				}
			}
			q.Op = server.OpNop
		}
	})
	return nil
}

// h39bLayoutCases are jobs that lay out anew a 1 MiB file, shorter than
// their range (zf_lay_out_anew): a job that writes (the name gets an
// empty file, grown) and one that reads (the new file is written with
// fio's data).
var h39bLayoutCases = []struct {
	name string
	args []string
}{
	{"write", []string{"--rw=write", "--size=2m"}},
	{"read", []string{"--rw=read", "--size=2m"}},
}

// h39bOld is the file fio finds at the name: fsynced, shorter than the
// job's range.
var h39bOld = bytes.Repeat([]byte{0xab}, 1<<20)

// h39bPutOld gives name the old file, durably, on a daemon of its own,
// stopped cleanly after.
func h39bPutOld(t *testing.T, device, socket, name string) {
	t.Helper()
	d := startServe(t, device, socket)
	c := dialServe(t, d)
	c.Remove(context.Background(), name) // ENOENT the first time
	c.CloseFile(context.Background(), writeFile(t, c, name, 0, h39bOld, true))
	c.Close()
	d.stop()
}

// h39bCheckName requires that name hold the old file or a new one,
// never neither, and that no temporary is left.
func h39bCheckName(t *testing.T, c *server.Client, name, when string) (old bool) {
	t.Helper()
	ctx := context.Background()
	if _, err := c.Stat(ctx, name); err != nil {
		t.Fatalf("%s: stat %s: %v: the old file is gone and the new one is not there", when, name, err)
	}
	got := readWhole(t, c, name)
	if old = bytes.Equal(got, h39bOld); !old && bytes.Contains(got, h39bOld[:4096]) {
		t.Fatalf("%s: %s is %d bytes holding the old file's data: neither the old file nor a new one", when, name, len(got))
	}
	list, err := c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range list {
		if strings.HasPrefix(e.Name, server.TempPrefix) {
			t.Fatalf("%s: temporary %s (%d bytes) left: %v", when, e.Name, e.Size, list)
		}
	}
	return old
}

// runFioBounded runs fio with args, killing it after two minutes.
func runFioBounded(t *testing.T, args ...string) (string, error) {
	t.Helper()
	fio, _ := fioEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, fio, args...)
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestH39bFioLayoutAnewSurvivesKill9AtEveryStep: fio's layout of a
// file shorter than the job's range replaces it with a new one ("layout
// unlink"). A kill -9 of the daemon at any point of it must leave the
// name with the old file or the new one. The engine closed the file,
// removed the name and created it again: killed between the remove and
// the create, the daemon came back with neither (request 4 of the job
// that writes: open, close, remove, then the create). Every crash point
// is tried in turn: the daemon kills itself before its N-th request that
// opens, closes, stats, removes, renames, truncates or fsyncs, until fio
// gets through with none left.
func TestH39bFioLayoutAnewSurvivesKill9AtEveryStep(t *testing.T) {
	_, engine := fioEnv(t)
	for _, tc := range h39bLayoutCases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			device := fmt.Sprintf("emu:%s?zone_size=16M&zones=64", filepath.Join(dir, "dev"))
			socket := filepath.Join(dir, "zf.sock")
			args := append([]string{"--name=j", "--ioengine=external:" + engine, "--sock=" + socket,
				"--filename=f", "--bs=64k"}, tc.args...)
			for at := 1; ; at++ {
				if at > 30 {
					t.Fatalf("fio still met a crash point at request %d", at)
				}
				h39bPutOld(t, device, socket, "f")
				d := startServe(t, device, socket, fmt.Sprintf("%s=%d", envKillAt, at))
				out, err := runFioBounded(t, args...)
				killed := strings.Contains(d.stderr.String(), killedMark)
				if !killed {
					checkFio(t, tc.name, out, err, false)
					d.stop()
				} else {
					select {
					case <-d.exited:
					case <-time.After(time.Minute):
						t.Fatalf("the daemon said it killed itself and runs on:\n%s", d.stderr)
					}
				}
				d = startServe(t, device, socket)
				c := dialServe(t, d)
				when := fmt.Sprintf("daemon killed before request %d", at)
				if !killed {
					when = "fio done"
				}
				old := h39bCheckName(t, c, "f", when)
				t.Logf("%s: f is the %s file", when, map[bool]string{true: "old", false: "new"}[old])
				c.Close()
				d.stop()
				if !killed {
					if old {
						t.Fatalf("fio ended and f is still the old file:\n%s", out)
					}
					break
				}
			}
		})
	}
}

// TestH39bFioLayoutAnewEngineDiesBeforeRename: the engine lays a file
// out anew in a temporary (server.TempPrefix: the daemon removes it when
// the connection that created it ends) and renames it over the name.
// fio killed before the rename leaves the name with the old file, data
// and all, and no temporary behind, also after a kill -9 of the daemon.
// (The engine used to remove the name first: no rename ever came.)
func TestH39bFioLayoutAnewEngineDiesBeforeRename(t *testing.T) {
	fio, engine := fioEnv(t)
	for _, tc := range h39bLayoutCases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			device := fmt.Sprintf("emu:%s?zone_size=16M&zones=64", filepath.Join(dir, "dev"))
			socket := filepath.Join(dir, "zf.sock")
			gofile := filepath.Join(dir, "go")
			h39bPutOld(t, device, socket, "f")
			d := startServe(t, device, socket, envDropRename+"="+gofile)
			cmd := exec.Command(fio, append([]string{"--name=j", "--ioengine=external:" + engine,
				"--sock=" + socket, "--filename=f", "--bs=64k"}, tc.args...)...)
			cmd.Dir = t.TempDir()
			out := &syncbuf.Buffer{}
			cmd.Stdout, cmd.Stderr = out, out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			defer func() {
				os.WriteFile(gofile, nil, 0o644)
				cmd.Process.Kill()
				<-done
			}()
			for end := time.Now().Add(time.Minute); !strings.Contains(d.stderr.String(), renameMark); time.Sleep(10 * time.Millisecond) {
				select {
				case err := <-done:
					done <- err
					t.Fatalf("fio ended (%v) and its layout of f renamed nothing over it: not atomic\n%s", err, out)
				default:
				}
				if time.Now().After(end) {
					t.Fatalf("fio's layout of f renamed nothing within a minute\n%s", out)
				}
			}
			// The layout is in fio's parent (create_serialize=1): no job
			// process is forked yet.
			cmd.Process.Kill()
			done <- <-done
			if err := os.WriteFile(gofile, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			c := dialServe(t, d)
			ctx := context.Background()
			for end := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
				list, err := c.List(ctx)
				if err != nil {
					t.Fatal(err)
				}
				temps := 0
				for _, e := range list {
					if strings.HasPrefix(e.Name, server.TempPrefix) {
						temps++
					}
				}
				if temps == 0 {
					break
				}
				if time.Now().After(end) {
					t.Fatalf("fio killed before its rename: a minute later the daemon still has its temporary: %v", list)
				}
			}
			if !h39bCheckName(t, c, "f", "fio killed before its rename") {
				t.Fatalf("fio killed before its rename: f is not the old file")
			}
			d, c = d.crashRestart(c)
			if !h39bCheckName(t, c, "f", "fio killed before its rename, then the daemon") {
				t.Fatalf("fio killed before its rename, then the daemon: f is not the old file")
			}
			c.Close()
			d.stop()
		})
	}
}
