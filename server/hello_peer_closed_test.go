package server

import (
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
)

// TestDialSaysWhenTheDaemonClosesDuringTheHello: a daemon that goes away
// (killed, or stopping) after it accepted a connection and before it
// answered the hello. The client said "not a zonefold daemon" (an empty
// reply does not parse) or gave the bare "connection reset by peer";
// a daemon that closed the connection is what happened, as every later
// call says (io.ErrUnexpectedEOF). The listener here is a plain socket
// that reads the hello (or not) and closes.
func TestDialSaysWhenTheDaemonClosesDuringTheHello(t *testing.T) {
	for _, tc := range []struct {
		name      string
		readHello bool
	}{
		{"after reading the hello", true},
		{"with the hello unread", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "s")
			l, err := net.Listen("unixpacket", sock)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			go func() {
				nc, err := l.Accept()
				if err != nil {
					return
				}
				if tc.readHello {
					var b [HelloRingsSize]byte
					nc.Read(b[:])
				}
				nc.Close()
			}()
			for _, dial := range []func(context.Context, string, int) (*Client, error){Dial, DialSocketFraming} {
				c, err := dial(context.Background(), sock, 0)
				if err == nil {
					c.Close()
					t.Fatal("dial to a daemon that closed the connection succeeded")
				}
				if !errors.Is(err, io.ErrUnexpectedEOF) || !strings.Contains(err.Error(), "daemon closed the connection") {
					t.Fatalf("dial: %v: want the daemon closed the connection (io.ErrUnexpectedEOF)", err)
				}
				go func() { // the next dial's connection
					nc, err := l.Accept()
					if err == nil {
						nc.Close()
					}
				}()
			}
		})
	}
}
