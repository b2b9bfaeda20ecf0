package cache

import (
	"context"
	"errors"
	"testing"
)

// TestAccessThroughForgottenFileMakesNothing: Forget is final for the
// File it drops. Every kind of access through it afterwards ends with
// ErrForgotten and makes no state: the id stays out of the index and no
// arena memory is held, where an access that looked the file up by id
// made a new state for the removed file that no Forget would free.
func TestAccessThroughForgottenFileMakesNothing(t *testing.T) {
	ctx := context.Background()
	access := []struct {
		name string
		do   func(c *Cache, f File, b Backing) error
	}{
		{"Read", func(c *Cache, f File, b Backing) error {
			_, err := c.Read(ctx, f, 0, make([]byte, 8192), b)
			return err
		}},
		{"Write", func(c *Cache, f File, b Backing) error {
			_, err := c.Write(ctx, f, 100, fill(5000, 2), b)
			return err
		}},
		{"WriteThen", func(c *Cache, f File, b Backing) error {
			_, err := c.WriteThen(ctx, f, 0, fill(4096, 3), b, func() { t.Error("WriteThen's callback ran for a forgotten file") })
			return err
		}},
		{"WriteProgress", func(c *Cache, f File, b Backing) error {
			_, err := c.WriteProgress(ctx, f, 0, fill(4096, 4), b, func(int) {})
			return err
		}},
		{"Prefetch", func(c *Cache, f File, b Backing) error {
			return c.Prefetch(ctx, f, 0, 64<<10, b)
		}},
	}
	for _, a := range access {
		t.Run(a.name, func(t *testing.T) {
			c := newTestCache(t, Config{Bytes: 4 << 20, MaxOrder: 5, BlockSize: 4096})
			b := newMemBacking()
			b.files[1] = fill(64<<10, 1)
			f := c.File(1)
			if _, err := c.Write(ctx, f, 0, fill(4096, 9), b); err != nil {
				t.Fatal(err)
			}
			c.Forget(1)
			if err := a.do(c, f, b); !errors.Is(err, ErrForgotten) {
				t.Errorf("%s through a forgotten File: %v, want ErrForgotten", a.name, err)
			}
			st := c.Stats()
			if fs := c.file(1); fs != nil || st.CachedBytes != 0 || st.DirtyBytes != 0 {
				t.Fatalf("after Forget and a %s through the forgotten File: in the index %v, %d bytes cached, %d dirty", a.name, fs != nil, st.CachedBytes, st.DirtyBytes)
			}
			if err := a.do(c, File{}, b); !errors.Is(err, errNoFile) {
				t.Errorf("%s through the zero File: %v, want errNoFile", a.name, err)
			}
		})
	}
}
