package cli

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestH46lPutWhoseTemporaryWasRemovedSaysSo: another client's
// `zonefold rm .zonefold-tmp.…` (say a clean-up of leftovers) of a put's
// temporary while the put runs made the put fail with `rename
// ".zonefold-tmp.ed6b…" to "NAME": no such file or directory`, which
// names neither what happened nor that NAME was left as it was. It
// says both now.
func TestH46lPutWhoseTemporaryWasRemovedSaysSo(t *testing.T) {
	sock, c, _ := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, zonefoldBinary(t), "put", "-", "name", "--socket", sock)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb strings.Builder
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := stdin.Write([]byte("part of the input")); err != nil {
		t.Fatal(err)
	}
	// Wait for put's temporary to exist, then remove it.
	var tmp string
	for tmp == "" {
		if ctx.Err() != nil {
			t.Fatal("put's temporary never appeared")
		}
		list, err := c.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range list {
			if strings.HasPrefix(e.Name, ".zonefold-tmp.") {
				tmp = e.Name
			}
		}
	}
	if err := c.Remove(ctx, tmp); err != nil {
		t.Fatal(err)
	}
	stdin.Close()
	err = cmd.Wait()
	if cmd.ProcessState.ExitCode() != 1 || !strings.Contains(errb.String(), "removed") || !strings.Contains(errb.String(), `"name" is as it was`) {
		t.Errorf("put whose temporary another client removed: %v, stderr %q; want exit 1 saying the temporary was removed and NAME is as it was", err, errb.String())
	}
	if _, err := c.Stat(ctx, "name"); err == nil {
		t.Errorf("name exists after a put that failed")
	}
}
