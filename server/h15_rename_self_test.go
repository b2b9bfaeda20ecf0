package server_test

import (
	"context"
	"testing"

	"github.com/zonefold/zonefold/server"
)

// TestH15RenameOntoItselfIsDurableWhenAnswered: docs/protocol.md says a
// rename is durable when answered: after a crash the new name holds the
// renamed file. A rename of a file onto its own name, answered OK, of a
// file created with OpenDeferSync must leave the file there after kill
// -9, as a rename to any other name does
// (TestDeferredCreateDurableFromNextFlush's "only-renamed"). On main the
// engine returns nil for oldName == newName before it logs or flushes
// anything, and the file is gone after the crash.
func TestH15RenameOntoItselfIsDurableWhenAnswered(t *testing.T) {
	d := newServe(t)
	ctx := context.Background()
	c := dialServe(t, d)
	writeFile(t, c, "self", server.OpenDeferSync, nil, false)
	if err := c.Rename(ctx, "self", "self"); err != nil {
		t.Fatal(err)
	}
	d, c = d.crashRestart(c)
	defer c.Close()
	if _, err := c.Stat(ctx, "self"); err != nil {
		t.Errorf("rename self -> self was answered OK, yet after kill -9: %v", err)
	}
	d.stop()
}
