package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zonefold/zonefold/engine"
)

// Options configure a Server.
type Options struct {
	// Log receives connection and protocol events; default slog.Default().
	Log *slog.Logger
	// Grace is how long shutdown lets in-flight requests finish before
	// it cancels them; default 10s.
	Grace time.Duration
}

// Server serves one engine to many clients.
type Server struct {
	e     *engine.Engine
	log   *slog.Logger
	grace time.Duration

	mu      sync.Mutex
	conns   map[*conn]struct{}
	closing bool
	connWG  sync.WaitGroup
	nextID  atomic.Uint64
	stats   serverCounters
}

// serverCounters are the daemon's own counters, exported as metrics.
type serverCounters struct {
	accepted, active            atomic.Int64
	protocolErrors              atomic.Int64
	msgsIn, msgsOut             atomic.Int64
	requests                    [opLimit]atomic.Int64
	errors                      [256]atomic.Int64 // by status (errno); larger ones count in errors[0]
	bytesRead, bytesWritten     atomic.Int64
	requestsIn, repliesOut      atomic.Int64
	canceled, rejectedMalformed atomic.Int64
}

func (sc *serverCounters) countStatus(st Status) {
	switch {
	case st == StatusOK:
	case st < Status(len(sc.errors)):
		sc.errors[st].Add(1)
	default:
		sc.errors[0].Add(1)
	}
}

// New makes a server for e. The caller keeps owning e: it closes it after
// Serve returns.
func New(e *engine.Engine, opts Options) *Server {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Grace <= 0 {
		opts.Grace = 10 * time.Second
	}
	return &Server{e: e, log: opts.Log, grace: opts.Grace, conns: map[*conn]struct{}{}}
}

// Serve accepts clients on l until ctx is done, then shuts down: it stops
// accepting, stops reading requests, lets the requests already read
// finish (for up to the grace period, then cancels them), sends their
// replies and closes every connection. It returns nil after such a
// shutdown. The caller closes the engine afterwards (which flushes and
// checkpoints) and closes l.
func (s *Server) Serve(ctx context.Context, l *net.UnixListener) error {
	stop := context.AfterFunc(ctx, func() { l.SetDeadline(time.Now()) })
	defer stop()
	var acceptErr error
	for {
		uc, err := l.AcceptUnix()
		if err != nil {
			if ctx.Err() == nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					continue
				}
				acceptErr = fmt.Errorf("server: accept: %w", err)
			}
			break
		}
		s.start(uc)
	}
	s.shutdown()
	return acceptErr
}

func (s *Server) start(uc *net.UnixConn) {
	c := newConn(s, uc)
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		uc.Close()
		return
	}
	s.conns[c] = struct{}{}
	s.connWG.Add(1)
	s.mu.Unlock()
	s.stats.accepted.Add(1)
	s.stats.active.Add(1)
	go func() {
		defer s.connWG.Done()
		c.serve()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		s.stats.active.Add(-1)
	}()
}

// shutdown stops every connection: reading stops at once, in-flight
// requests get the grace period, then are canceled.
func (s *Server) shutdown() {
	s.mu.Lock()
	s.closing = true
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	if len(conns) > 0 {
		s.log.Info("server: shutting down", "connections", len(conns))
	}
	for _, c := range conns {
		c.stopReading()
	}
	done := make(chan struct{})
	go func() { s.connWG.Wait(); close(done) }()
	select {
	case <-done:
		return
	case <-time.After(s.grace):
	}
	s.log.Warn("server: in-flight requests outlived the grace period; canceling them", "grace", s.grace)
	s.mu.Lock()
	for c := range s.conns {
		c.abort()
	}
	s.mu.Unlock()
	<-done
}

// Connections is how many clients are connected.
func (s *Server) Connections() int { return int(s.stats.active.Load()) }
