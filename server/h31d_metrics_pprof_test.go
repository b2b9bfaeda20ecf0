package server

import (
	"net"
	"net/http"
	"path/filepath"
	"testing"
)

// TestH31dMetricsListenerServesOnlyMetrics: the --metrics listener
// answered every path with the metrics, /debug/pprof/ included, and is
// often bound to every interface (0.0.0.0:PORT) for a scraper. It must
// serve /metrics and nothing else: no profiling endpoints (which can stall
// the daemon and dump its memory) reachable from the network, and a 404
// for anything but /metrics.
func TestH31dMetricsListenerServesOnlyMetrics(t *testing.T) {
	cfg := testConfig(emuDevice(t), filepath.Join(t.TempDir(), "zf.sock"))
	cfg.Metrics = "0.0.0.0:0"
	d := startDaemon(t, cfg)
	_, port, err := net.SplitHostPort(d.metrics.String())
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + net.JoinHostPort("127.0.0.1", port)
	for path, want := range map[string]int{
		"/metrics":                 http.StatusOK,
		"/debug/pprof/":            http.StatusNotFound,
		"/debug/pprof/heap":        http.StatusNotFound,
		"/debug/pprof/profile":     http.StatusNotFound,
		"/debug/pprof/goroutine":   http.StatusNotFound,
		"/":                        http.StatusNotFound,
		"/metrics/../debug/pprof/": http.StatusNotFound,
	} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s on a listener bound to 0.0.0.0: %d, want %d", path, resp.StatusCode, want)
		}
	}
}
