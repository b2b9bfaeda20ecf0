package server_test

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestH33aFioJobKilledMidRunLeavesOthersServed: fio's job processes of
// one fio, 64 deep in writes, are killed with SIGKILL while another fio
// verifies its own file. The other job must finish clean, the killed
// jobs' file must serve a new job (open, write, verify), and the daemon
// must stop cleanly (flushed and checkpointed). (fio 3.33's own parent
// then aborts, "double free or corruption", as it does with libaio on
// ext4 when a job process at iodepth > 1 is killed: not the engine's.)
func TestH33aFioJobKilledMidRunLeavesOthersServed(t *testing.T) {
	fioEnv(t)
	d := newServe(t)
	other, otherWait := startFio(t, fioArgs(t, d, "other", "--iodepth=8", "--verify=crc32c",
		"--verify_fatal=1", "--verify_state_save=0", "--loops=10")...)
	fio, _ := fioEnv(t)
	victim := exec.Command(fio, fioArgs(t, d, "victim", "--iodepth=64", "--numjobs=2",
		"--time_based", "--runtime=60")...)
	victim.Dir = t.TempDir()
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	victimDone := make(chan error, 1)
	go func() { victimDone <- victim.Wait() }()
	t.Cleanup(func() {
		for _, k := range descendants(victim.Process.Pid) {
			syscall.Kill(k, syscall.SIGKILL)
		}
		victim.Process.Kill()
	})
	// fio's two job processes are there, and the daemon has served some
	// thousands of requests since.
	var kids []int
	for deadline := time.Now().Add(time.Minute); len(kids) < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("fio's job processes are not there after a minute: %v", kids)
		}
		kids = descendants(victim.Process.Pid)
	}
	awaitRequests(t, d, d.progress()+5000)
	for _, k := range kids {
		syscall.Kill(k, syscall.SIGKILL)
	}
	select {
	case <-victimDone: // its status is fio's own
	case <-time.After(time.Minute):
		t.Fatal("fio did not end within a minute of its jobs' kill")
	}
	if err := otherWait(2 * time.Minute); err != nil || !strings.Contains(other.String(), "err= 0") ||
		strings.Contains(other.String(), "verify:") {
		t.Fatalf("another client's verify job, while a fio's jobs were killed: %v\n%s", err, other)
	}
	out, err := runFioWatched(t, d, fioArgs(t, d, "victim", "--iodepth=16", "--verify=crc32c",
		"--verify_fatal=1", "--verify_state_save=0")...)
	checkFio(t, "victim again", out, err, false)
	d.stop()
}
