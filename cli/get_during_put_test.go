package cli

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestGetDuringPutsReadsOneWholeVersion: put replaces NAME atomically, so
// a get of NAME while puts replace it must copy one whole version, old or
// new. It failed with ENOENT: the handle get had opened was of the file a
// put's rename then replaced, whose reads answer ENOENT.
func TestGetDuringPutsReadsOneWholeVersion(t *testing.T) {
	sock, _, _ := newDaemon(t)
	dir := t.TempDir()
	versions := [][]byte{bytes.Repeat([]byte{'a'}, 3*copyChunk), bytes.Repeat([]byte{'b'}, 3*copyChunk)}
	var locals []string
	for i, v := range versions {
		p := filepath.Join(dir, fmt.Sprint(i))
		if err := os.WriteFile(p, v, 0o644); err != nil {
			t.Fatal(err)
		}
		locals = append(locals, p)
	}
	zonefold(t, "put", locals[0], "f", "--socket", sock)
	stop, done := make(chan struct{}), make(chan error, 1)
	go func() {
		for i := 1; ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			var out, errb bytes.Buffer
			if code := Main([]string{"put", locals[i%2], "f", "--socket", sock}, &out, &errb); code != 0 {
				done <- fmt.Errorf("put %d: exit %d: %s", i, code, errb.String())
				return
			}
		}
	}()
	got := filepath.Join(dir, "got")
	for i := range 40 {
		var out, errb bytes.Buffer
		if code := Main([]string{"get", "f", got, "--socket", sock}, &out, &errb); code != 0 {
			close(stop)
			<-done
			t.Fatalf("get %d while puts replace the file: exit %d: %s", i, code, errb.String())
		}
		data, err := os.ReadFile(got)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(data, versions[0]) && !bytes.Equal(data, versions[1]) {
			close(stop)
			<-done
			t.Fatalf("get %d: %d bytes, neither whole version: %d a, %d b, %d zero", i, len(data), bytes.Count(data, []byte{'a'}), bytes.Count(data, []byte{'b'}), bytes.Count(data, []byte{0}))
		}
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
