package server_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/zonefold/zonefold/server"
)

// TestH33bFsyncRacingAnotherClientsTruncateOrRemove: client A writes a
// file and fsyncs it while client B truncates it (down, up or to
// zero) or removes it, at the same moment; both are answered, then the
// daemon is SIGKILLed. What both were told must hold after the restart:
// a truncate answered is durable (the file is that size, its bytes
// below it A's, zeros past A's end), a remove answered is durable (the
// file is gone), and A's fsync, if it said OK, lost nothing of A's
// data that is still in the file.
func TestH33bFsyncRacingAnotherClientsTruncateOrRemove(t *testing.T) {
	dev, sock := kill9Device(t)
	rng := rand.New(rand.NewPCG(33, 2))
	const files = 6
	const size = 160 << 10
	p := serveKill9(t, dev, sock)
	bg := context.Background()
	rounds := 12
	if testing.Short() {
		rounds = 3
	}
	for round := range rounds {
		a, err := server.Dial(bg, sock, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		b, err := server.DialSocketFraming(bg, sock, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		type want struct {
			name    string
			data    []byte
			removed bool
			size    int
			fsyncOK bool
		}
		wants := make([]want, files)
		var wg sync.WaitGroup
		var mu sync.Mutex
		for i := range files {
			name := fmt.Sprintf("r%d-f%d", round, i)
			data := make([]byte, size)
			for j := range data {
				data[j] = byte(rng.Uint32()) | 1
			}
			w := want{name: name, data: data, removed: i%3 == 2}
			switch i % 3 {
			case 0:
				w.size = rng.IntN(size)
			case 1:
				w.size = size + rng.IntN(size)
			}
			ha, _, err := a.Open(bg, name, server.OpenCreate)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := a.WriteAt(bg, ha, data, 0); err != nil {
				t.Fatal(err)
			}
			hb, _, err := b.Open(bg, name, 0)
			if err != nil {
				t.Fatal(err)
			}
			wg.Add(2)
			go func() {
				defer wg.Done()
				err := a.Fsync(bg, ha)
				mu.Lock()
				wants[i].fsyncOK = err == nil
				mu.Unlock()
				if err != nil {
					t.Errorf("%s: fsync beside another client's truncate or remove: %v", name, err)
				}
			}()
			go func() {
				defer wg.Done()
				var err error
				if w.removed {
					err = b.Remove(bg, name)
				} else {
					err = b.Truncate(bg, hb, int64(w.size))
				}
				if err != nil {
					t.Errorf("%s: truncate/remove beside an fsync: %v", name, err)
				}
			}()
			mu.Lock()
			wants[i] = w
			mu.Unlock()
		}
		wg.Wait()
		p.kill()
		a.Close()
		b.Close()
		p = serveKill9(t, dev, sock)
		c, err := server.Dial(bg, sock, 4<<20)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range wants {
			st, err := c.Stat(bg, w.name)
			if w.removed {
				if !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("round %d: %s, removed with an answer, after kill -9: %v %+v", round, w.name, err, st)
				}
				continue
			}
			if err != nil {
				t.Errorf("round %d: %s after kill -9: %v", round, w.name, err)
				continue
			}
			if st.Size != int64(w.size) {
				t.Errorf("round %d: %s is %d bytes after kill -9, truncated to %d with an answer", round, w.name, st.Size, w.size)
				continue
			}
			h, _, err := c.Open(bg, w.name, 0)
			if err != nil {
				t.Fatal(err)
			}
			got := make([]byte, w.size)
			if _, err := c.ReadAt(bg, h, got, 0); err != nil {
				t.Fatal(err)
			}
			exp := make([]byte, w.size)
			copy(exp, w.data)
			if !bytes.Equal(got, exp) && w.fsyncOK {
				i := 0
				for i < len(got) && got[i] == exp[i] {
					i++
				}
				t.Errorf("round %d: %s after kill -9 differs from byte %d (of %d): got %#x want %#x", round, w.name, i, w.size, got[i], exp[i])
			}
			c.CloseFile(bg, h)
			// Room for the next rounds; and a name removed is free again.
			if err := c.Remove(bg, w.name); err != nil {
				t.Fatal(err)
			}
		}
		c.Close()
		if t.Failed() {
			t.Fatalf("daemon output:\n%s", p.out.String())
		}
	}
	p.interrupt()
}
