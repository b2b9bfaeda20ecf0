package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/zns"
)

// RunConfig configures a daemon.
type RunConfig struct {
	Device string // device string (zns.Open)
	Socket string // Unix socket path
	// Metrics, if set, is the TCP address /metrics is served on. The
	// listener serves /metrics and nothing else (404): no profiling
	// endpoints, as it is often bound to every interface for a scraper.
	Metrics string
	Engine  engine.Config
	// Format formats a device that is not formatted yet; a formatted one
	// is opened as it is unless Force is set too, which erases it.
	Format, Force bool
	Grace         time.Duration // see Options.Grace
	// MaxConns and MaxSharedMemory cap the clients (see Options).
	MaxConns        int
	MaxSharedMemory int64
	Log             *slog.Logger
	// Ready, if set, is called once clients can connect, with the server
	// and the address metrics are served on (nil without Metrics).
	Ready func(srv *Server, metrics net.Addr)
}

// Run is the daemon: it claims the socket, the metrics address and the
// device, opens the engine and serves until ctx is done; then it shuts
// the server down, closes the engine (flush and checkpoint) and returns
// nil if all of that went well.
func Run(ctx context.Context, cfg RunConfig) (err error) {
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	l, err := Listen(cfg.Socket)
	if err != nil {
		return err
	}
	defer l.Close()
	// The metrics address is claimed before the device: a serve that
	// fails on it must leave the device as it was (not formatted, nor
	// erased by Force, nor an emu file made). A scrape meanwhile waits
	// in the listen backlog until the engine is open.
	var ml net.Listener
	if cfg.Metrics != "" {
		if ml, err = net.Listen("tcp", cfg.Metrics); err != nil {
			return fmt.Errorf("server: metrics: %w", err)
		}
		defer ml.Close()
	}
	devLock, err := LockDevice(cfg.Device)
	if err != nil {
		return err
	}
	defer devLock.Release()
	e, err := openEngine(cfg, log)
	if err != nil {
		devLock.Abandon() // an emu file it created goes again
		return err
	}
	removeTemporaries(e, log)
	defer func() {
		if cerr := e.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("server: close engine: %w", cerr))
		} else {
			log.Info("server: engine flushed and checkpointed")
		}
	}()
	srv := New(e, Options{Log: log, Grace: cfg.Grace, MaxConns: cfg.MaxConns, MaxSharedMemory: cfg.MaxSharedMemory})
	var maddr net.Addr
	if ml != nil {
		reg := prometheus.NewRegistry()
		reg.MustRegister(srv.Collector(), collectors.NewGoCollector())
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: metricsHeaderTimeout,
			WriteTimeout: metricsWriteTimeout, IdleTimeout: metricsIdleTimeout}
		go hs.Serve(&cappedListener{Listener: ml, slots: make(chan struct{}, maxMetricsConns)})
		defer hs.Close()
		maddr = ml.Addr()
		log.Info("server: metrics", "addr", maddr.String())
	}
	log.Info("server: serving", "device", cfg.Device, "socket", cfg.Socket)
	if cfg.Ready != nil {
		cfg.Ready(srv, maddr)
	}
	return srv.Serve(ctx, l.UnixListener)
}

// Limits of the metrics listener, which may face a network and takes
// its connections' descriptors from those the daemon's clients need:
// without them, connections kept alive after a scrape, or opened and
// never used, held a descriptor each for ever, and enough of them kept
// every new client out (TestH33bMetricsConnectionsAreBounded). A request
// must come within metricsHeaderTimeout, its response be taken within
// metricsWriteTimeout, and a kept-alive connection see its next request
// within metricsIdleTimeout (Prometheus scrapes every minute by
// default); past maxMetricsConns, a connection is closed as it comes.
var (
	metricsHeaderTimeout = 10 * time.Second
	metricsWriteTimeout  = 30 * time.Second
	metricsIdleTimeout   = 2 * time.Minute
)

const maxMetricsConns = 32

// cappedListener closes a connection it accepts while len(slots) others
// are open.
type cappedListener struct {
	net.Listener
	slots chan struct{}
}

func (l *cappedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &cappedConn{Conn: c, release: sync.OnceFunc(func() { <-l.slots })}, nil
		default:
			c.Close()
		}
	}
}

// cappedConn gives its slot back when it is closed: before the close
// itself, so that a scraper that sees its connection closed finds the
// slot free. Released after, a client could see the close and connect
// again while the slot was still held, and be refused (CI122's
// TestH33bMetricsConnectionsAreBounded: the 33rd connection stayed open
// because one of the 32 before it had been refused that way).
type cappedConn struct {
	net.Conn
	release func()
}

func (c *cappedConn) Close() error {
	c.release()
	return c.Conn.Close()
}

// TempPrefix starts the names of temporary files: zonefold put writes to
// TempPrefix+random, fsyncs it and renames it over its target. Names with
// this prefix are reserved: the daemon removes such a file when the
// connection that created it ends (conn.endTemps: a put whose client died
// leaves one) and every such file when it starts, as nothing can be
// writing them then (a crash brings back an unflushed removal). A file
// created there is a temporary by this contract; a rename onto such a
// name, which would turn a file a client keeps into one, is refused
// (EPERM).
const TempPrefix = ".zonefold-tmp."

// isTemporary reports whether name is in the temporaries' reserved space.
func isTemporary(name string) bool { return strings.HasPrefix(name, TempPrefix) }

// removeTemporaries removes what clients that died left in TempPrefix
// files.
func removeTemporaries(e *engine.Engine, log *slog.Logger) {
	for _, fi := range e.List() {
		if !isTemporary(fi.Name) {
			continue
		}
		removeTemporary(log, e.Remove, fi, "a client left")
	}
}

// removeTemporary removes the temporary fi with remove and logs it, whose
// it was saying why it goes; one already gone is no failure.
func removeTemporary(log *slog.Logger, remove func(string) error, fi engine.FileInfo, whose string) {
	if err := remove(fi.Name); err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			log.Warn("server: remove a temporary file "+whose, "name", fi.Name, "err", err)
		}
		return
	}
	log.Info("server: removed a temporary file "+whose, "name", fi.Name, "size", fi.Size)
}

// openEngine opens the engine on cfg.Device, formatting it as asked.
func openEngine(cfg RunConfig, log *slog.Logger) (*engine.Engine, error) {
	dev, err := zns.Open(cfg.Device, zns.Options{})
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(cfg.Device, "null:") {
		// A null device stores nothing: there is nothing to recover,
		// and the engine runs on it only freshly formatted.
		e, err := engine.FormatAndOpen(dev, cfg.Engine)
		if err == nil {
			log.Warn("server: the null: device keeps no data: GC cannot read back the zones it would reclaim, so its capacity is one fill; overwrites past it get ENOSPC; reads of data not in the cache fail with EIO (the log says a data block fails its checksum) (use emu: or a zoned device to keep data)",
				"device", cfg.Device, "capacity", e.Capacity())
		}
		return e, err
	}
	if cfg.Format && cfg.Force {
		// Nothing is erased for settings the engine would then refuse.
		if err := engine.CheckConfig(dev, cfg.Engine, &engine.FormatOptions{Force: true}); err != nil {
			dev.Close()
			return nil, err
		}
		if _, err := engine.Format(dev, engine.FormatOptions{Force: true}); err != nil {
			dev.Close()
			return nil, err
		}
		log.Warn("server: device erased and formatted (--force)", "device", cfg.Device)
	}
	e, err := engine.OpenDevice(dev, cfg.Engine)
	if errors.Is(err, engine.ErrNotFormatted) && cfg.Format {
		if _, err = engine.Format(dev, engine.FormatOptions{}); err == nil {
			log.Info("server: formatted", "device", cfg.Device)
			e, err = engine.OpenDevice(dev, cfg.Engine)
		}
	}
	if errors.Is(err, engine.ErrNotFormatted) && !cfg.Format {
		err = notFormattedError{cfg.Device}
	}
	if err != nil {
		dev.Close()
		return nil, err
	}
	return e, nil
}

// notFormattedError is engine.ErrNotFormatted as serve says it: with
// serve's own way out, --format, first.
type notFormattedError struct{ device string }

func (e notFormattedError) Error() string {
	return fmt.Sprintf("%s is not formatted by zonefold: serve it with --format (or run `zonefold format DEVICE` first)", e.device)
}

func (notFormattedError) Unwrap() error { return engine.ErrNotFormatted }
