package server

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// TestH33bMetricsConnectionsAreBounded: the --metrics listener, often
// bound to every interface for a scraper, shares the daemon's file
// descriptors with its clients. A connection kept alive after a scrape
// was held for ever (the server had no idle timeout: 300 such
// connections held 300 of the daemon's descriptors after 15 s idle),
// and connections were not capped, so anyone who could reach the port
// could take every descriptor the daemon has and keep new clients out
// (accept fails with EMFILE). An idle connection must be closed, and
// connections past the cap closed at once, while a scrape still gets
// in once the others are gone.
func TestH33bMetricsConnectionsAreBounded(t *testing.T) {
	idle, header := metricsIdleTimeout, metricsHeaderTimeout
	metricsIdleTimeout, metricsHeaderTimeout = 200*time.Millisecond, time.Minute
	defer func() { metricsIdleTimeout, metricsHeaderTimeout = idle, header }()
	cfg := testConfig(emuDevice(t), filepath.Join(t.TempDir(), "zf.sock"))
	cfg.Metrics = "127.0.0.1:0"
	d := startDaemon(t, cfg)
	addr := d.metrics.String()

	// A scrape on a kept-alive connection, then nothing.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := fmt.Fprintf(c, "GET /metrics HTTP/1.1\r\nHost: zonefold\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("scrape: %s, close %v", resp.Status, resp.Close)
	}
	if err := metricsConnClosed(c, br); err != nil {
		t.Errorf("a connection idle after a scrape: %v", err)
	}

	// Connections past the cap are closed at once.
	var held []net.Conn
	defer func() {
		for _, h := range held {
			h.Close()
		}
	}()
	for range maxMetricsConns {
		h, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, h)
	}
	extra, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	if err := metricsConnClosed(extra, bufio.NewReader(extra)); err != nil {
		t.Errorf("connection %d to the metrics listener: %v", maxMetricsConns+1, err)
	}
	for _, h := range held {
		h.Close()
	}
	held = nil
	// A scraper gets in again once they are gone.
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no scrape served after the held connections went: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// metricsConnClosed waits (at most 10 s) for the daemon to close c, whose
// reader is br: nil if it did.
func metricsConnClosed(c net.Conn, br *bufio.Reader) error {
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := br.ReadByte()
	switch {
	case err == nil:
		return errors.New("the daemon sent more")
	case errors.Is(err, os.ErrDeadlineExceeded):
		return errors.New("still open after 10 s")
	}
	return nil // end of file, or a reset
}

// slotWatchConn records how many slots were held when it was closed.
type slotWatchConn struct {
	net.Conn
	slots   chan struct{}
	atClose int
}

func (c *slotWatchConn) Close() error {
	c.atClose = len(c.slots)
	return nil
}

// TestCappedConnFreesItsSlotBeforeItCloses: by the time the peer can see
// a metrics connection closed, its slot is free, so a scraper that
// reconnects at once is not refused for a slot its own closed connection
// still held.
func TestCappedConnFreesItsSlotBeforeItCloses(t *testing.T) {
	slots := make(chan struct{}, 1)
	slots <- struct{}{}
	inner := &slotWatchConn{slots: slots}
	c := &cappedConn{Conn: inner, release: sync.OnceFunc(func() { <-slots })}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if inner.atClose != 0 {
		t.Fatalf("%d slots held as the connection closed, want its own given back first", inner.atClose)
	}
	if err := c.Close(); err != nil || len(slots) != 0 {
		t.Fatalf("second close: %v, %d slots held", err, len(slots))
	}
}
