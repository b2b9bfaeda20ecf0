package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/zonefold/zonefold/engine"
	output "github.com/zonefold/zonefold/internal/report"
	"github.com/zonefold/zonefold/server"
)

// defaultSocket is where the daemon listens unless told otherwise.
func defaultSocket() string {
	if s := os.Getenv("ZONEFOLD_SOCK"); s != "" {
		return s
	}
	return "/tmp/zonefold.sock"
}

// socketFlag defines --socket. Its help states the one default in force
// and where it comes from; pflag's own "(default ...)" after it is left
// out (it printed a second default beside ours).
func socketFlag(fs *pflag.FlagSet, p *string) {
	def := defaultSocket()
	usage := fmt.Sprintf("the daemon's Unix socket (default %q; $ZONEFOLD_SOCK sets another)", def)
	if os.Getenv("ZONEFOLD_SOCK") != "" {
		usage = fmt.Sprintf("the daemon's Unix socket (default %q, from $ZONEFOLD_SOCK)", def)
	}
	pathVar(fs, p, "socket", def, "socket", usage)
	fs.Lookup("socket").DefValue = "" // pflag prints no default for ""
}

func newServeCmd() *cobra.Command {
	var (
		ef                    engineFlags
		socket, metrics       string
		format, force, logInf bool
		acceptOffline         bool
		acceptDamaged         bool
		maxClients            int
		maxShm                int64
	)
	cmd := &cobra.Command{
		Use:   "serve DEVICE",
		Short: "Serve the files on DEVICE to clients over a Unix socket",
		Long: `Runs the zonefold daemon: it owns DEVICE and serves its files over a Unix
socket (docs/protocol.md) to the CLI (stat, ls, put, get, mv, rm) and to fio
through fio/engine.c. One daemon per device and per socket: a second one
is refused. SIGTERM, SIGINT or SIGHUP (its terminal went away) stops it
cleanly: it stops accepting, finishes in-flight requests, flushes and
checkpoints, and exits 0. A stdout or stderr whose reader has gone (a
closed pipe) does not stop it: what it would print there is lost. If
dirty data cannot be written back (the device fails appends), it exits 1
with one line saying how many files' unsynced data was lost; everything
fsynced is on the device. A request stuck on a device that stopped
answering is given up after its grace periods and a minute's wait: the
daemon writes back and checkpoints without it (for at most 5 s more, as
those may wait behind it), then exits 1 saying so and whether
acknowledged data may not be durable, leaving the connections it still
holds to the process's exit; a write among them is answered ESHUTDOWN,
never OK.

--format formats DEVICE first if it is not formatted yet; a formatted
device is served as it is, unless --force is given too, which erases it.

--accept-offline-zones opens a device the daemon otherwise refuses
because a data zone went offline (the drive lost it) while it may hold
data written since the last checkpoint: what that zone held is lost.
Reads of what files map there fail (zonefold fsck --accept-offline-zones
names the files), data written there since the checkpoint is absent
(such a range reads as it was then, a file it grew is shorter), and
every other file is served. The first start records the zone offline:
later starts need no flag.

--accept-damaged-records opens a device the daemon otherwise refuses
because the header of a data record written since the last checkpoint
is damaged (media that returns wrong bytes): nothing says whose bytes
that record held, so some file reads older bytes there, or is shorter.
Every other record is served; the first start makes that final. It also
opens an emulated device one of whose two copies of its zone table was
written over (zeroed: it does not start with the emu magic, which no
crash leaves) while its zones hold data past the other copy's write
pointers. Which copy was the newer nothing tells: if the lost one, that
data is what its flush made durable (zonefold fsck reports it; fsck
--copy-to DIR first copies the files as the other copy has them), and
the start writes over it; it may also be writes no flush made durable,
or what a zone held before its last reset, which loses nothing.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := ef.config()
			if err != nil {
				return err
			}
			cfg.AcceptOfflineZones = acceptOffline
			cfg.AcceptDamagedRecords = acceptDamaged
			if force && !format {
				return usagef("--force only goes with --format")
			}
			if err := refuseStartOver(args[0], format && force, "give --format --force too, or drop format=1"); err != nil {
				return err
			}
			if maxShm <= 0 {
				return usagef("--max-shared-memory must be more than 0")
			}
			if least := server.MinSharedMemory(); maxShm < least {
				return usagef("--max-shared-memory %s is below the smallest client region (%s): no client could connect; give at least %s",
					output.Human(maxShm), output.Human(least), output.Human(least))
			}
			if maxClients < 1 {
				return usagef("--max-clients %d: want at least 1", maxClients)
			}
			// Its stdout and stderr may be a pipe whose reader has
			// gone (a script that waited for the "serving" line with
			// `| head -1`, a log shipper that died): the Go runtime
			// kills a program whose write to fd 1 or 2 finds such a
			// pipe with SIGPIPE, unless it ignores the signal. A
			// daemon that died so at its next log line never wrote
			// back or checkpointed. Ignored, the write fails with
			// EPIPE, that log line is lost, and the daemon goes on.
			signal.Ignore(syscall.SIGPIPE)
			defer signal.Reset(syscall.SIGPIPE)
			log := slog.Default()
			if logInf && !log.Enabled(cmd.Context(), slog.LevelInfo) {
				// The engine logs through the default logger (its
				// "engine: recovered" after an unclean stop among
				// them): --log-info raises that one too, else its
				// lifecycle events showed only under -v.
				log = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelInfo}))
				prev := slog.Default()
				slog.SetDefault(log)
				defer slog.SetDefault(prev)
			}
			return server.Run(cmd.Context(), server.RunConfig{
				Device: args[0], Socket: socket, Metrics: metrics, Engine: cfg,
				Format: format, Force: force, Log: log,
				MaxConns: maxClients, MaxSharedMemory: maxShm,
				Ready: func(_ *server.Server, maddr net.Addr) {
					// Scripts wait for this line before starting clients.
					fmt.Fprintf(cmd.OutOrStdout(), "serving %s on %s\n", args[0], socket)
					if maddr != nil {
						fmt.Fprintf(cmd.OutOrStdout(), "metrics on http://%s/metrics\n", maddr)
					}
				},
			})
		},
	}
	cmd.Annotations = map[string]string{annStopsOnSignal: "yes"}
	watchesContext(cmd)
	f := cmd.Flags()
	ef.register(f)
	socketFlag(f, &socket)
	f.Var(checkedString{&metrics, "address", checkTCPAddr}, "metrics", "serve Prometheus metrics at /metrics on this address, nothing else (HOST:PORT or :PORT, e.g. 127.0.0.1:9100)")
	f.BoolVar(&format, "format", false, "format DEVICE first if it is not formatted")
	f.BoolVar(&force, "force", false, "with --format: erase DEVICE even if it holds a file system")
	f.BoolVar(&logInf, "log-info", false, "log connections and lifecycle events, not just warnings")
	f.BoolVar(&acceptOffline, acceptOfflineFlag, false, "open even if a data zone went offline holding data newer than the last checkpoint: what it held is lost, every other file is served")
	f.BoolVar(&acceptDamaged, acceptDamagedFlag, false, "open even if a data record newer than the last checkpoint has a damaged header: its bytes are lost (some file reads older bytes there, or is shorter), every other record is served")
	countVar(f, &maxClients, "max-clients", server.DefaultMaxConns, "most clients connected at once; more are refused (EUSERS)")
	sizeVar(f, &maxShm, "max-shared-memory", server.DefaultSharedMemory(),
		"most shared memory all clients' regions take together; a client that does not fit is refused (ENOMEM)")
	return cmd
}

// checkTCPAddr refuses an address to listen on that is no TCP address
// (HOST:PORT or :PORT): "nonsense", a port above 65535. --metrics
// nonsense exited 1 with the listener's "listen tcp: address nonsense:
// missing port in address". A well-formed one that cannot be had (taken,
// a host not this machine's) fails where it is listened on.
func checkTCPAddr(s string) error {
	_, port, err := net.SplitHostPort(s)
	if err == nil {
		_, err = net.LookupPort("tcp", port)
	}
	if err != nil {
		return fmt.Errorf("want HOST:PORT or :PORT, e.g. 127.0.0.1:9100 (%w)", err)
	}
	return nil
}

// session is what a client command runs with: a connection to the
// daemon, the socket it came from, where to print and whether as JSON.
type session struct {
	*server.Client
	socket string
	out    io.Writer
	json   bool
}

// clientCmd makes a command that talks to a running daemon; with
// hasJSON it takes --json.
func clientCmd(use, short string, args cobra.PositionalArgs, hasJSON bool, run func(ctx context.Context, s *session, args []string) error) *cobra.Command {
	s := &session{}
	cmd := &cobra.Command{
		Use: use, Short: short, Args: args,
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := server.Dial(cmd.Context(), s.socket, 8<<20)
			if err != nil {
				return noDaemon(s.socket, err)
			}
			defer c.Close()
			s.Client, s.out = c, cmd.OutOrStdout()
			return run(cmd.Context(), s, a)
		},
	}
	socketFlag(cmd.Flags(), &s.socket)
	if hasJSON {
		cmd.Flags().BoolVar(&s.json, "json", false, "print one JSON object")
	}
	return watchesContext(cmd)
}

// noDaemon explains a failed connection to the daemon, with the next
// step when nothing serves the socket.
func noDaemon(socket string, err error) error {
	var errno syscall.Errno
	if !errors.As(err, &errno) || errno != syscall.ENOENT && errno != syscall.ECONNREFUSED {
		return err
	}
	if st, serr := os.Stat(socket); serr == nil && st.Mode().Type() != fs.ModeSocket {
		// A directory or a file: no daemon ever serves it, and serve
		// refuses to replace it, so the advice below would not do.
		kind := "a file"
		if st.IsDir() {
			kind = "a directory"
		}
		return fmt.Errorf("%s is %s, not a socket (%w): point --socket or $ZONEFOLD_SOCK at the socket a daemon serves ('zonefold serve DEVICE --socket SOCKET')",
			socket, kind, errno)
	}
	return fmt.Errorf("no zonefold daemon is serving %s (%w); start one with 'zonefold serve DEVICE --socket %s', or point --socket or $ZONEFOLD_SOCK at a running one",
		socket, errno, socket)
}

// addClientCmds registers the commands that use a running daemon.
func addClientCmds(root *cobra.Command) {
	root.AddCommand(
		clientCmd("stat", "Show the daemon's live engine stats", cobra.NoArgs, true, runStat),
		newLsCmd(),
		newPutCmd(),
		clientCmd("get NAME LOCAL", "Copy a zonefold file to a local file (-: stdout)", cobra.ExactArgs(2), false, runGet),
		clientCmd("rm NAME...", "Remove files", cobra.MinimumNArgs(1), false, runRm),
		clientCmd("mv OLD NEW", "Rename a file, replacing NEW; returns once it is durable", cobra.ExactArgs(2), false, runMv),
	)
}

func newPutCmd() *cobra.Command {
	cmd := clientCmd("put LOCAL NAME", "Copy a local file (-: stdin) into zonefold atomically; returns once it is durable", cobra.ExactArgs(2), true, runPut)
	cmd.Long = `Copy a local file (-: stdin) into zonefold atomically; put returns once
the copy is durable (fsynced).

put writes a temporary file, fsyncs it and renames it over NAME, so NAME
is either as it was or the whole new content, never part of it. A put
that fails or is interrupted (one Ctrl-C or SIGTERM stops it, also while
it waits for more of a pipe or terminal on stdin) leaves NAME as it was
(absent if it did not exist) and removes its temporary file: what it had
read of LOCAL is discarded, and nothing of a partial copy is kept.`
	return cmd
}

// minWAFBytes is the client bytes written since the daemon started
// below which stat gives no write amplification. The counters start at
// zero with each start, and the metadata a start and a file's create
// write (blocks each) over a few client bytes make a ratio of thousands,
// or 0 over none: a number that says nothing about the device. From a
// MiB on, such fixed costs move the ratio by a few percent at most.
const minWAFBytes = 1 << 20

// statWAF is st's write amplification, and whether the client bytes
// written since the daemon started are enough for it to mean something.
func statWAF(st engine.Stats) (float64, bool) {
	if st.HostWritten < minWAFBytes {
		return 0, false
	}
	return st.WAF(), true
}

// statJSON is `stat --json`: the engine's stats and what the table
// derives from them. write_amplification is absent until minWAFBytes
// client bytes were written since the daemon started.
type statJSON struct {
	engine.Stats
	DevWritten int64    `json:"dev_written"`
	WAF        *float64 `json:"write_amplification,omitempty"`
}

func runStat(ctx context.Context, s *session, _ []string) error {
	st, err := s.Stats(ctx)
	if err != nil {
		return err
	}
	waf, wafOK := statWAF(st)
	if s.json {
		out := statJSON{Stats: st, DevWritten: st.DevWritten()}
		if wafOK {
			out.WAF = &waf
		}
		return writeJSON(s.out, out)
	}
	tw := newLeftTable(s.out)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
	fmt.Fprintln(s.out, "counters since the daemon started:")
	row("host written", human(st.HostWritten))
	row("host read", human(st.HostRead))
	row("device written", human(st.DevWritten()))
	if wafOK {
		row("write amplification", fmt.Sprintf("%.3f", waf))
	} else {
		row("write amplification", fmt.Sprintf("- (until %s written)", human(minWAFBytes)))
	}
	row("appends", st.Appends)
	row("data zones free/open/all", fmt.Sprintf("%d/%d/%d", st.FreeZones, st.OpenZones, st.DataZones))
	row("dirty", human(st.DirtyBytes))
	row("removed while open", fmt.Sprintf("%d files, %s", st.UnnamedFiles, human(st.UnnamedBytes)))
	row("cache hits/misses", fmt.Sprintf("%d/%d", st.Cache.Hits, st.Cache.Misses))
	row("GC runs/moved/resets", fmt.Sprintf("%d/%s/%d", st.GCRuns, human(st.GCWritten), st.GCResets))
	row("checkpoints", st.Checkpoints)
	row("SQEs per enter", fmt.Sprintf("%.1f", st.Ring.SQEsPerEnter()))
	return tw.Flush()
}

// fileJSON is one file in `ls --json`.
type fileJSON struct {
	Name string `json:"name"`
	Size int64  `json:"size"` // bytes
}

func newLsCmd() *cobra.Command {
	var long bool
	cmd := clientCmd("ls", "List the daemon's files (-l: with their sizes)", cobra.NoArgs, true,
		func(ctx context.Context, s *session, _ []string) error {
			list, err := s.List(ctx)
			if err != nil {
				return err
			}
			if s.json {
				files := make([]fileJSON, len(list))
				for i, e := range list {
					files[i] = fileJSON{e.Name, e.Size}
				}
				return writeJSON(s.out, struct {
					Files []fileJSON `json:"files"`
				}{files})
			}
			if !long {
				// A failed write (a full disk, > /dev/full) fails ls,
				// as it does ls -l: an empty list is no listing.
				for _, e := range list {
					if _, err := fmt.Fprintln(s.out, listedName(e.Name)); err != nil {
						return err
					}
				}
				return nil
			}
			tw := newLeftTable(s.out)
			for _, e := range list {
				fmt.Fprintf(tw, "%s\t%s\n", human(e.Size), listedName(e.Name))
			}
			return tw.Flush()
		})
	cmd.Flags().BoolVarP(&long, "long", "l", false, "print each file's size (binary units)")
	return cmd
}

// listedName is how ls prints a name: as it is, unless it holds a
// control character (a newline would read as two files), is not UTF-8,
// or starts with a double quote; then quoted as a Go string ("a\nb"),
// so that every line is one name and a quoted one cannot be taken for
// a name that is those characters. --json gives every name exactly.
func listedName(name string) string {
	if !utf8.ValidString(name) || strings.HasPrefix(name, `"`) || strings.ContainsFunc(name, unicode.IsControl) {
		return strconv.Quote(name)
	}
	return name
}

// copyChunk is how much put and get move per call.
const copyChunk = 4 << 20

// runPut copies a local file into zonefold atomically: it writes a
// temporary file (server.TempPrefix), fsyncs it and renames it over NAME,
// so that NAME is either as it was or the whole new content, durable.
// A put that fails or is interrupted removes its temporary; one whose
// process died leaves it to the daemon's next start.
func runPut(ctx context.Context, s *session, args []string) (err error) {
	local, name := args[0], args[1]
	// Refused only at the rename, a bad name cost a whole copy and
	// an error about the temporary.
	if err := checkTarget("put", name); err != nil {
		return err
	}
	var src *os.File
	if local == "-" {
		// stdin, as Unix tools take "-" (a file named - is ./-).
		src, err = stdio(0, "stdin")
	} else if err = closedStdPath(local); err == nil {
		src, err = openInterruptible(ctx, local, os.O_RDONLY)
	}
	if err != nil {
		return err
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return err
	} else if st.IsDir() {
		return fmt.Errorf("%s is a directory; put copies one file", local)
	}
	// A pipe or FIFO may block a read for ever: an interrupt ends it.
	stop := context.AfterFunc(ctx, func() { _ = src.SetReadDeadline(time.Now()) })
	defer stop()
	tmp, err := tempName()
	if err != nil {
		return err
	}
	h, _, err := s.Open(ctx, tmp, server.OpenCreate|server.OpenExcl)
	if err != nil {
		if errors.Is(err, syscall.ENOSPC) {
			if _, serr := s.Stat(ctx, name); serr == nil {
				return replaceFullError(name, err)
			}
		}
		return namesFullError("put", name, err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, removeTemp(s, tmp))
		}
	}()
	buf := make([]byte, copyChunk)
	var off int64
	for {
		n, rerr := interruptible(ctx, func() (int, error) { return io.ReadFull(src, buf) })
		if n > 0 {
			if _, err := s.WriteAt(ctx, h, buf[:n], off); err != nil {
				return putError(ctx, name, off, st, err)
			}
			off += int64(n)
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return rerr
		}
	}
	if !st.Mode().IsRegular() {
		// The end of a pipe may be its producer killed by the
		// Ctrl-C that is on its way to us: that is no whole input.
		settleSignals(ctx)
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
	}
	// put promises durability: a crash after it returns loses nothing.
	// The rename is logged durably by the daemon before it answers.
	if err := s.Fsync(ctx, h); err != nil {
		return putError(ctx, name, off, st, err)
	}
	if err := s.CloseFile(ctx, h); err != nil {
		return err
	}
	if err := s.Rename(ctx, tmp, name); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			// Another client removed the temporary (rm .zonefold-tmp.*).
			return fmt.Errorf("put %q: its temporary file %s was removed by another client before put renamed it: %w; %q is as it was",
				name, tmp, err, name)
		}
		return namesFullError("put", name, err)
	}
	if s.json {
		return writeJSON(s.out, struct {
			Local string `json:"local"`
			Name  string `json:"name"`
			Size  int64  `json:"size"`
		}{local, name, off})
	}
	fmt.Fprintf(s.out, "%s: %s, durable\n", listedName(name), human(off))
	return nil
}

// putError is a put of name that failed after off bytes were copied
// from local (st): which file and, for a full device, how far it got and
// what to do. "write: no space left on device" said neither. An
// interrupt or a daemon that went away is reported as it is.
func putError(ctx context.Context, name string, off int64, st os.FileInfo, err error) error {
	if ctx.Err() != nil {
		return err
	}
	if !errors.Is(err, syscall.ENOSPC) {
		return fmt.Errorf("put %q: %w", name, err)
	}
	of := ""
	if st.Mode().IsRegular() {
		of = " of " + human(st.Size())
	}
	return fmt.Errorf("put %q: %w, %s%s copied (the device is full: remove files with 'zonefold rm' to make room; %q is as it was and nothing of the copy is kept)",
		name, err, human(off), of, name)
}

// tempName is a fresh name in the daemon's reserved temporary space.
func tempName() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return server.TempPrefix + hex.EncodeToString(b[:]), nil
}

// removeTemp removes a failed put's temporary file. The put's own
// connection may be mid-request (an interrupt cancels by deadline), so it
// is closed first, which closes its handles, and a new one removes the
// file, within a bounded time. It says so if it could not.
func removeTemp(s *session, tmp string) error {
	s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc, err := server.Dial(ctx, s.socket, 2*64<<10)
	if err == nil {
		err = rc.Remove(ctx, tmp)
		rc.Close()
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("the temporary file %s stays until the daemon restarts: %w", tmp, err)
	}
	return nil
}

// runGet copies a zonefold file to a local one through a temporary file
// beside it, renamed over LOCAL at the end: a get that fails leaves LOCAL
// as it was and nothing else behind.
func runGet(ctx context.Context, s *session, args []string) (err error) {
	name, local := args[0], args[1]
	if err := engine.CheckName(name); err != nil {
		return usagef("get: %w", err)
	}
	// Open first: a missing NAME fails before anything local is made.
	h, size, err := s.Open(ctx, name, 0)
	if err != nil {
		return err
	}
	if local == "-" {
		// stdout, as Unix tools take "-" (a file named - is ./-),
		// written where it stands, as cat NAME does.
		dst, err := stdio(1, "stdout")
		if err != nil {
			s.CloseFile(ctx, h)
			return err
		}
		return getInto(ctx, s, name, h, size, dst)
	}
	if st, err := os.Stat(local); err == nil && st.IsDir() {
		local = filepath.Join(local, filepath.Base(name))
	}
	// A symbolic link is written through, to its target, as cp does:
	// replaced, it would no longer point where its owner meant.
	local = throughLinks(local)
	if dst := ownDescriptor(local, args[1]); dst != nil {
		// /dev/stdout, /dev/fd/N: this process's own open file (a
		// pipe, a socket, a file the shell opened with > or >>),
		// written where it stands, as cat NAME > /dev/stdout writes.
		return getInto(ctx, s, name, h, size, dst)
	}
	mode := 0o666 &^ umask() // a new file, as the shell's > makes one
	st, serr := os.Stat(local)
	if errors.Is(serr, syscall.ELOOP) {
		// Links in a loop (a -> b -> a): refused, as cp does, rather
		// than replaced by a file.
		s.CloseFile(ctx, h)
		return serr
	}
	proc := onProcFS(filepath.Dir(local))
	if serr == nil && (!st.Mode().IsRegular() || proc) {
		// A FIFO, a device, an open file reached through procfs:
		// written to, never replaced (as root, a rename over /dev/null
		// replaced it for the whole system; a procfs link's text
		// may name another file, or none). A regular file is
		// truncated first, as cp does.
		flag := os.O_WRONLY
		if st.Mode().IsRegular() {
			flag |= os.O_TRUNC
		}
		dst, err := openInterruptible(ctx, local, flag)
		if err != nil {
			s.CloseFile(ctx, h)
			return err
		}
		return getInto(ctx, s, name, h, size, dst)
	}
	if proc {
		// /dev/fd/9 with no descriptor 9: procfs takes no new file,
		// and an error naming the temporary would hide what was wrong.
		s.CloseFile(ctx, h)
		return serr
	}
	if serr == nil {
		mode = st.Mode().Perm() // replacing a file keeps its permissions
		if flockedByOther(local) {
			// A running daemon's emu device or PATH.lock: replaced, the
			// daemon's next start would find no file system.
			s.CloseFile(ctx, h)
			return fmt.Errorf("get: %s is in use: another process holds a lock on it (a zonefold daemon's device or lock file?); not replaced", local)
		}
	}
	dst, err := os.CreateTemp(filepath.Dir(local), "."+shortBase(local)+".zonefold-get-*")
	if err != nil {
		s.CloseFile(ctx, h)
		// Name LOCAL, as typed: the temporary is get's own business.
		if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
			return &fs.PathError{Op: "create", Path: local, Err: pe.Err}
		}
		return err
	}
	defer func() {
		if err != nil {
			dst.Close()
			os.Remove(dst.Name())
		}
	}()
	rewind := func() error {
		if err := dst.Truncate(0); err != nil {
			return err
		}
		_, err := dst.Seek(0, io.SeekStart)
		return err
	}
	if err := copyWhole(ctx, s, name, h, size, dst, rewind); err != nil {
		return err
	}
	if err := dst.Chmod(mode); err != nil {
		return err
	}
	if err := dst.Close(); err != nil {
		return err
	}
	return os.Rename(dst.Name(), local)
}

// getInto is get to a LOCAL that is not replaced by a new file (a FIFO,
// a character device, an open file reached through procfs): the copy is
// written into dst, which it closes. A NAME replaced while being read
// fails the get, since what the stream took cannot be taken back.
func getInto(ctx context.Context, s *session, name string, h uint32, size int64, dst *os.File) error {
	// A FIFO nobody reads may block a write for ever: an interrupt ends
	// it (the deadline where dst is pollable; a descriptor inherited in
	// blocking mode is left so, as its other holders expect, and
	// interruptible leaves its write behind).
	stop := context.AfterFunc(ctx, func() { _ = dst.SetWriteDeadline(time.Now()) })
	defer stop()
	err := copyWhole(ctx, s, name, h, size, dst, nil)
	return errors.Join(err, dst.Close())
}

// copyWhole copies NAME, open as h with size bytes, to dst, one whole
// version: a put renamed a new file over NAME while this read the old
// one (whose reads then answer ENOENT) starts it over on the new one
// after rewind, or fails it if rewind is nil. h is closed.
func copyWhole(ctx context.Context, s *session, name string, h uint32, size int64, dst *os.File, rewind func() error) error {
	buf := make([]byte, copyChunk)
	for try := 1; ; try++ {
		replaced, err := copyOut(ctx, s, name, h, size, dst, buf)
		s.CloseFile(ctx, h)
		if err != nil {
			return err
		}
		if !replaced {
			return nil
		}
		if rewind == nil {
			return fmt.Errorf("get %s: replaced while being read, after part of it was written", name)
		}
		if try == getTries {
			return fmt.Errorf("get %s: replaced %d times while being read", name, try)
		}
		if h, size, err = s.Open(ctx, name, 0); err != nil {
			return err
		}
		if err := rewind(); err != nil {
			return err
		}
	}
}

// throughLinks follows local through symbolic links to the path they
// name, existing or not (a dangling link's target is made, as cp does).
// It stops at a link on procfs (/proc/self/fd/1, which /dev/stdout
// leads to): the kernel's handle on an open file, whose text
// ("pipe:[825635]", "/tmp/log (deleted)", or a name the file has since
// lost) is no path to follow.
func throughLinks(local string) string {
	for range 40 { // ELOOP's bound
		st, err := os.Lstat(local)
		if err != nil || st.Mode()&fs.ModeSymlink == 0 || onProcFS(filepath.Dir(local)) {
			return local
		}
		t, err := os.Readlink(local)
		if err != nil {
			return local
		}
		if !filepath.IsAbs(t) {
			t = filepath.Join(filepath.Dir(local), t)
		}
		local = t
	}
	return local
}

// onProcFS says whether dir is on procfs.
func onProcFS(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Type == unix.PROC_SUPER_MAGIC
}

// ownDescriptor is a new descriptor (close-on-exec), called as in its
// errors, of the open file local names if local is one of this process's
// own on procfs (/proc/self/fd/N, /dev/fd/N, /proc/<its pid>/fd/N), else
// nil. Its open file description is the one the process was given: a
// socket, which open(2) of the link refuses (ENXIO), and a file the
// shell opened for appending (>>), which open(2) would start at offset
// 0, are written as they are.
func ownDescriptor(local, as string) *os.File {
	n, ok := ownFD(local)
	if !ok {
		return nil
	}
	fd, err := unix.FcntlInt(uintptr(n), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	return os.NewFile(uintptr(fd), as)
}

// ownFD is the number of the descriptor local names if local is one of
// this process's own on procfs (/proc/self/fd/N, /dev/fd/N,
// /proc/<its pid>/fd/N).
func ownFD(local string) (int, bool) {
	n, err := strconv.Atoi(filepath.Base(local))
	if err != nil || n < 0 || !onProcFS(filepath.Dir(local)) {
		return 0, false
	}
	dir, err := filepath.EvalSymlinks(filepath.Dir(local))
	if err != nil {
		return 0, false
	}
	own := "/proc/" + strconv.Itoa(os.Getpid())
	// /proc/thread-self/fd is /proc/<pid>/task/<tid>/fd: the threads
	// share the process's descriptors.
	if dir != own+"/fd" && (!strings.HasPrefix(dir, own+"/task/") || filepath.Base(dir) != "fd") {
		return 0, false
	}
	return n, true
}

// closedStdPath is stdio's error for a put's LOCAL that names, through
// procfs (/dev/stdin, /proc/self/fd/0), a stdin closed when the process
// started; nil for any other.
func closedStdPath(local string) error {
	if n, ok := ownFD(throughLinks(local)); ok && n == 0 && closedAtStart(n) {
		return fmt.Errorf("%s: %w (descriptor %d was closed when zonefold started)", local, syscall.EBADF, n)
	}
	return nil
}

// stdio is a descriptor of its own on this process's fd (0: stdin, 1:
// stdout), named as, for put and get to read or write "-" and close
// when done without closing the process's own. A stdin that was closed
// when the process started is an error (EBADF), as cat reports it: the
// Go runtime puts /dev/null there, which made put - NAME <&- replace
// NAME with an empty file, exiting 0. Only stdin: what the runtime opens
// (/dev/null, read and write) is also what Python's subprocess.DEVNULL
// gives, and a script sending get NAME -, ls or stat to it to throw the
// output away must not fail; such a stdout loses no stored data, while
// such a stdin replaces a file with nothing (put - NAME <>/dev/null is
// refused with it: an empty file is made with truncate).
func stdio(fd int, as string) (*os.File, error) {
	if fd == 0 && closedAtStart(fd) {
		return nil, fmt.Errorf("%s: %w (it was closed when zonefold started; '-' reads stdin and writes stdout)", as, syscall.EBADF)
	}
	n, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", as, err)
	}
	return os.NewFile(uintptr(n), as), nil
}

// flockedByOther says whether another open file holds an exclusive
// flock(2) on the regular file path, as a zonefold daemon does on its
// emu device and its socket's PATH.lock while it runs. A file get
// cannot open to ask is not taken for locked.
func flockedByOther(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close() // drops the shared lock taken below
	return unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB) == unix.EWOULDBLOCK
}

// closedAtStart says whether standard descriptor fd (0, 1 or 2) is what
// the Go runtime opens on one closed when the process starts: /dev/null,
// open for reading and writing (runtime.checkfds). A shell opens
// /dev/null for < /dev/null read-only and for > /dev/null write-only,
// so those are read and written as usual; only <>/dev/null is taken
// for a closed descriptor too.
func closedAtStart(fd int) bool {
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil || fl&unix.O_ACCMODE != unix.O_RDWR {
		return false
	}
	var st, null unix.Stat_t
	if unix.Fstat(fd, &st) != nil || unix.Stat(os.DevNull, &null) != nil {
		return false
	}
	return st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == null.Rdev
}

// shortBase is local's base name, cut so that get's temporary name
// beside it (dot, base, suffix, random digits) stays within NAME_MAX.
func shortBase(local string) string {
	b := filepath.Base(local)
	return b[:min(len(b), 200)]
}

// umask is the process's file mode creation mask, from
// /proc/self/status (umask(2) reads it only by setting it, which a file
// created meanwhile by another goroutine would see); read each time, as
// the process may change it.
func umask() fs.FileMode {
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Umask:"); ok {
				if m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil {
					return fs.FileMode(m)
				}
			}
		}
	}
	m := syscall.Umask(0) // a kernel older than 4.7
	syscall.Umask(m)
	return fs.FileMode(m)
}

// openInterruptible opens local with flag (os.OpenFile's). open(2) of a
// FIFO waits for the other end (put's LOCAL for a writer, get's for a
// reader), and a signal does not end the wait: an interrupt returns at
// once (the open left behind ends with the process, and closes what it
// opens if it returns first).
func openInterruptible(ctx context.Context, local string, flag int) (*os.File, error) {
	type opened struct {
		f   *os.File
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		f, err := os.OpenFile(local, flag, 0)
		ch <- opened{f, err}
	}()
	select {
	case o := <-ch:
		return o.f, o.err
	case <-ctx.Done():
		go func() {
			if o := <-ch; o.f != nil {
				o.f.Close()
			}
		}()
		return nil, fmt.Errorf("open %s: %w", local, context.Cause(ctx))
	}
}

// interruptible runs op, a read or write of a local file (put's LOCAL,
// get's), and returns its result, or ctx's cause at once once ctx ends.
// The deadline put and get set on their file when ctx ends ends only an
// op on a pollable file: a pipe or terminal inherited in blocking mode
// (stdin or stdout, as a shell makes them: `producer | zonefold put -
// NAME` whose producer writes nothing more, `zonefold get NAME - |
// consumer` whose consumer stops reading) takes none, os.NewFile leaving
// such a descriptor out of the poller, and making it non-blocking would
// change it for every process that shares it (the shell's terminal).
// Such an op waited through the first SIGINT, and only a second one
// stopped the command. An op cut short goes on in its goroutine until
// it returns (at the process's exit at the latest): the caller must not
// touch its buffer after. Closing its file meanwhile does not wait for
// it (a blocking descriptor's close is deferred until the op is done).
func interruptible(ctx context.Context, op func() (int, error)) (int, error) {
	type result struct {
		n   int
		err error
	}
	ch := make(chan result, 1)
	go func() {
		n, err := op()
		ch <- result{n, err}
	}()
	select {
	case r := <-ch:
		return r.n, r.err
	case <-ctx.Done():
		return 0, context.Cause(ctx)
	}
}

// getTries bounds how often get starts over on a NAME that puts keep
// replacing while it reads.
const getTries = 20

// copyOut copies size bytes of the open file h (name) to dst; replaced
// says the file was replaced or removed while it read (a read answered
// ENOENT). A failed read is named by the file and the bytes it asked
// for: "read: input/output error" alone left a user with nothing to go
// on.
func copyOut(ctx context.Context, s *session, name string, h uint32, size int64, dst *os.File, buf []byte) (replaced bool, err error) {
	for off := int64(0); off < size; {
		want := min(int64(len(buf)), size-off)
		n, rerr := s.ReadAt(ctx, h, buf[:want], off)
		if n > 0 {
			if _, err := interruptible(ctx, func() (int, error) { return dst.Write(buf[:n]) }); err != nil {
				return false, err
			}
			off += int64(n)
		}
		if rerr == io.EOF {
			break
		}
		if errors.Is(rerr, syscall.ENOENT) {
			return true, nil
		}
		if rerr != nil {
			return false, readError(ctx, name, off, want, rerr)
		}
	}
	return false, nil
}

// readError is a failed read of name's bytes [off, off+n) as get reports
// it: which file and where, and for EIO (a block that fails its checksum
// or a device read that failed) where to look next. An interrupt or a
// daemon that went away is reported as it is.
func readError(ctx context.Context, name string, off, n int64, err error) error {
	if ctx.Err() != nil {
		return err
	}
	if errors.Is(err, syscall.EIO) {
		return fmt.Errorf("get %q: bytes %d-%d: %w (the daemon's log names the block; 'zonefold fsck DEVICE', with the daemon stopped, lists every damaged one)", name, off, off+n-1, err)
	}
	return fmt.Errorf("get %q: bytes %d-%d: %w", name, off, off+n-1, err)
}

// runMv renames through the daemon, which makes the rename durable
// before it answers (engine.Rename), and refuses a NEW in put's reserved
// names (a file kept there would be removed as a temporary).
func runMv(ctx context.Context, s *session, args []string) error {
	if err := checkTarget("mv", args[1]); err != nil {
		return err
	}
	return namesFullError("mv", args[1], s.Rename(ctx, args[0], args[1]))
}

// namesFullError explains an ENOSPC from a create or a rename, which
// take no data room: the metadata has no room for another name of that
// length (engine.nsRoomFor keeps what the checkpoint of a full device's
// extents needs), however many data zones are free. The bare errno
// named put's temporary file and read as a full device that
// `zonefold stat` showed nearly empty.
func namesFullError(cmd, name string, err error) error {
	if err == nil || !errors.Is(err, syscall.ENOSPC) {
		return err
	}
	return fmt.Errorf("%s %q: %w: the device's metadata has no room for more file names (the names of its files, many or long, fill what it keeps for them, whatever room the data has); remove files with 'zonefold rm' to make room, or use a shorter name",
		cmd, name, err)
}

// replaceFullError is namesFullError for a put over an existing NAME:
// the temporary it writes first needs a name of its own until its
// rename replaces NAME, so a shorter NAME does not help (the advice
// namesFullError gives), and NAME is as it was.
func replaceFullError(name string, err error) error {
	return fmt.Errorf("put %q: %w: the device's metadata has no room for more file names (the names of its files, many or long, fill what it keeps for them, whatever room the data has), and put replaces %q through a temporary file that needs a name of its own; %q is as it was; remove files with 'zonefold rm' to make room",
		name, err, name, name)
}

// checkTarget refuses a name that put or mv (cmd) cannot leave a file
// under: not a valid name, or one of put's temporaries' reserved names,
// whose files the daemon removes when it starts (a dead put's leftover),
// so that a file put or moved there would be said durable and be lost.
func checkTarget(cmd, name string) error {
	if strings.HasPrefix(name, server.TempPrefix) {
		return usagef("%s %s: names starting with %s are reserved for put's temporary files", cmd, name, server.TempPrefix)
	}
	if err := engine.CheckName(name); err != nil {
		return usagef("%s: %w", cmd, err)
	}
	return nil
}

func runRm(ctx context.Context, s *session, args []string) error {
	var errs []error
	for _, name := range args {
		// A name no file can have is said so, with its first bytes:
		// the daemon's ENAMETOOLONG quoted all of it (a screenful).
		if err := engine.CheckName(name); err != nil {
			errs = append(errs, fmt.Errorf("rm: %w", err))
			continue
		}
		errs = append(errs, s.Remove(ctx, name))
	}
	return errors.Join(errs...)
}
