// Package cli holds zonefold's cobra commands. It owns flag parsing and
// printing only: every command calls into the engine's packages and turns
// their results into tables or JSON. The conventions every command follows
// (exit statuses, signals, errors, sizes, counts, --json) are in
// conventions.go; errors reach the user as one line on stderr and a
// non-zero exit status; nothing here panics on input.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/zonefold/zonefold/bench"
	"github.com/zonefold/zonefold/cache"
	"github.com/zonefold/zonefold/engine"
)

// Main runs the command line args and returns the process exit status
// (see conventions.go). It is for callers that go on after it (tests):
// it stops catching signals when it returns, so a signal that lands
// between its return and the caller's exit takes its default action.
// A process that exits with the status calls Exit instead.
func Main(args []string, stdout, stderr io.Writer) int {
	return runCommand(args, stdout, stderr, true)
}

// Exit runs the command line args and exits the process with their
// status. Signals stay caught until the process is gone: a SIGINT that
// follows the one that decided the status (Ctrl-C held down, a
// supervisor repeating it) must not kill the process on its way out and
// replace 130 with death by signal.
func Exit(args []string) {
	os.Exit(runCommand(args, os.Stdout, os.Stderr, false))
}

func runCommand(args []string, stdout, stderr io.Writer, stopSignals bool) int {
	sigs := make(chan os.Signal, 2)
	stops := []os.Signal{syscall.SIGINT, syscall.SIGTERM}
	// SIGHUP too: a terminal that goes away (its window closed, an ssh
	// session dropped) sends it, and its default ends the process at
	// once, as a kill -9 would, serve with its unsynced writes. Unless
	// it is ignored (nohup): Notify would undo that.
	if !signal.Ignored(syscall.SIGHUP) {
		stops = append(stops, syscall.SIGHUP)
	}
	barrier := newSignalBarrier()
	signal.Notify(sigs, append(stops, barrierSignal)...)
	if stopSignals {
		defer signal.Stop(sigs)
	}
	var mode stopMode
	ctx, cancel := context.WithCancel(context.WithValue(context.WithValue(context.Background(), barrierKey{}, barrier), stopModeKey{}, &mode))
	defer cancel()
	var running atomic.Pointer[cobra.Command]
	root := newRoot(stdout, stderr, &running)
	root.SetArgs(args)
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	var got syscall.Signal
	var gotAt time.Time
	for {
		select {
		case err := <-done:
			return exitStatus(stderr, err, got, running.Load())
		case s := <-sigs:
			sig := s.(syscall.Signal)
			if sig == barrierSignal {
				barrier.seen()
				continue
			}
			if got != 0 && sig != syscall.SIGINT {
				// The clean stop asked for again, as timeout(1) and
				// a kill of the process and then of its group ask for
				// it twice at once: taken for a second signal, it cut
				// the stop short (serve's unsynced writes never
				// written back, its socket left behind).
				fmt.Fprintf(stderr, "zonefold: %s while stopping cleanly changes nothing (SIGINT or SIGKILL stops at once)\n", signalName(sig))
				continue
			}
			if got == syscall.SIGINT && sig == syscall.SIGINT && time.Since(gotAt) < sameRequestWindow {
				// timeout -s INT, or a kill of the process and then
				// of its group: one request that reached us twice
				// (unless the two merged into one pending signal).
				// Ctrl-C pressed again comes later.
				fmt.Fprintf(stderr, "zonefold: a second SIGINT within %v is taken for the same request; still stopping cleanly (Ctrl-C again stops at once)\n", sameRequestWindow)
				continue
			}
			if got != 0 || (!annotated(running.Load(), annWatchesContext) && mode.CompareAndSwap(stopAtOnce, stoppingAtOnce)) {
				// Ctrl-C while stopping, or a command that would not
				// notice the first signal (nor said it would from
				// here on, stopCleanlyFromHere; the swap keeps it
				// from saying so now): stop now.
				fmt.Fprintf(stderr, "zonefold: interrupted by %s\n", signalName(sig))
				return exitSignal(sig)
			}
			got, gotAt = sig, time.Now()
			cancel()
		}
	}
}

// stopMode is how the first signal stops a command that is not
// annotated as watching its context (annWatchesContext): at once until
// the command says it watches it from here on (stopCleanlyFromHere),
// cleanly after. fsck --copy-to says so as it begins to copy: until
// then it only reads (its whole-device check, which does not watch the
// context: marked as watching, it would take the first Ctrl-C only once
// that walk ended), after it a stop at once could leave a file in DIR
// part copied. Whichever of the command and Main's loop swaps the mode
// first decides: the command never begins what it must finish once
// Main has chosen to exit at once.
type stopMode struct{ atomic.Int32 }

const (
	stopAtOnce     int32 = iota // the first signal stops the command at once
	stopCleanly                 // it cancels the command's context
	stoppingAtOnce              // Main's loop took a signal to stop at once
)

type stopModeKey struct{}

// stopCleanlyFromHere tells Main that the command watches ctx from here
// on: a first signal cancels ctx, as for a command annotated
// watchesContext, and the command returns promptly after. It reports
// false if a signal already made Main stop the process at once: the
// caller must not begin what a stop at once would leave half done.
// Outside Main (no signal loop) it reports true.
func stopCleanlyFromHere(ctx context.Context) bool {
	m, _ := ctx.Value(stopModeKey{}).(*stopMode)
	return m == nil || m.CompareAndSwap(stopAtOnce, stopCleanly) || m.Load() == stopCleanly
}

// exitStatus reports how a command ended and returns its exit status.
func exitStatus(stderr io.Writer, err error, sig syscall.Signal, cmd *cobra.Command) int {
	stops := annotated(cmd, annStopsOnSignal)
	switch {
	case err == nil && (sig == 0 || stops):
		return exitOK
	case sig != 0 && !stops:
		if err == nil || interrupted(err) {
			fmt.Fprintf(stderr, "zonefold: interrupted by %s\n", signalName(sig))
		} else {
			fmt.Fprintf(stderr, "%s (interrupted by %s)\n", errorLine(err), signalName(sig))
		}
		return exitSignal(sig)
	}
	var u *usageError
	var bad *bench.OptionError
	var ce *engine.ConfigError
	var se *cache.SizeError
	var fz *engine.FormatZonesError
	switch {
	case errors.As(err, &u):
	case errors.As(err, &bad):
		// A value the benchmark refuses is a bad flag all the same.
		u = &usageError{err: err}
	case errors.As(err, &se) && !se.AboveMemory:
		// And a cache size the cache cannot be (a bench's --cache,
		// checked by the engine); one above the memory available is
		// the machine's state, a failure.
		u = &usageError{err: err}
	case errors.As(err, &ce) && configFlags[ce.Setting].name != "":
		// So is an engine setting the device cannot take: said as
		// the flag that set it.
		err = configFlagError(err, ce)
		u = &usageError{err: err}
	case errors.As(err, &fz):
		// format --zones below what zonefold needs: the flag's value
		// wrong, as --zones above the device is. It exited 1 with the
		// engine's "format: 3 zones asked for".
		err = fmt.Errorf("--zones %d: zonefold needs at least %d zones on this device (it has %d)", fz.Zones, fz.Least, fz.DeviceZones)
		u = &usageError{err: err}
	}
	if u != nil {
		path := u.cmd
		if path == "" && cmd != nil {
			path = cmd.CommandPath()
		}
		if path == "" {
			path = "zonefold"
		}
		fmt.Fprintf(stderr, "%s (see '%s --help')\n", errorLine(err), path)
		return exitUsage
	}
	fmt.Fprintln(stderr, errorLine(err))
	if st := (*statusError)(nil); errors.As(err, &st) {
		return st.status
	}
	return exitFailure
}

func signalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	}
	return sig.String()
}

func newRoot(stdout, stderr io.Writer, running *atomic.Pointer[cobra.Command]) *cobra.Command {
	var verbose bool
	var cpuProfile, blockProfile, mutexProfile, memProfile, traceFile string
	var profile, traceOut *os.File
	root := groupCmd(&cobra.Command{
		Use:           "zonefold",
		Short:         "A userspace engine for zoned storage",
		Version:       version(),
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			running.Store(cmd)
			level := slog.LevelWarn
			if verbose {
				level = slog.LevelDebug
			}
			slog.SetDefault(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})))
			if blockProfile != "" {
				runtime.SetBlockProfileRate(int(10 * time.Microsecond)) // a sample per 10 µs blocked
			}
			if mutexProfile != "" {
				runtime.SetMutexProfileFraction(10)
			}
			var err error
			if traceOut, err = startRecording("trace", traceFile, trace.Start); err != nil {
				return err
			}
			profile, err = startRecording("cpuprofile", cpuProfile, pprof.StartCPUProfile)
			return err
		},
		PersistentPostRunE: func(*cobra.Command, []string) error {
			if profile != nil {
				pprof.StopCPUProfile()
				profile.Close()
			}
			if traceOut != nil {
				trace.Stop()
				traceOut.Close()
			}
			return errors.Join(writeProfile("blockprofile", "block", blockProfile), writeProfile("mutexprofile", "mutex", mutexProfile), writeProfile("memprofile", "allocs", memProfile))
		},
	})
	root.SetVersionTemplate("zonefold {{.Version}}\n")
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().BoolVarP(&verbose, "verbose", "v", false, "log debug messages")
	root.PersistentFlags().StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the command to this file (go tool pprof)")
	root.PersistentFlags().StringVar(&blockProfile, "blockprofile", "", "write a profile of where goroutines blocked (waits of 10µs and more, sampled) to this file")
	root.PersistentFlags().StringVar(&mutexProfile, "mutexprofile", "", "write a profile of mutex contention (one event in 10) to this file")
	root.PersistentFlags().StringVar(&traceFile, "trace", "", "write an execution trace of the command to this file (go tool trace): what goroutines waited on, and for how long")
	root.PersistentFlags().StringVar(&memProfile, "memprofile", "", "write a profile of heap allocations (sampled, since the start) to this file: what makes the garbage collector run")
	root.AddCommand(newBenchCmd())
	root.AddCommand(newZonesCmd())
	root.AddCommand(newFormatCmd())
	root.AddCommand(newFsckCmd())
	root.AddCommand(newDebugCmd())
	root.AddCommand(newServeCmd())
	addClientCmds(root)
	root.SetHelpCommand(newHelpCmd())
	markUsage(root)
	return root
}

// newHelpCmd is `zonefold help [command]`: cobra's own printed the
// nearest command's help and exited 0 for a topic it did not know
// (`help nosuch`), where an unknown command is a usage error.
func newHelpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		Long:  "Help provides help for any command in the application.\nSimply type zonefold help [path to command] for full details.",
		ValidArgsFunction: func(c *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			cmd, _, err := c.Root().Find(args)
			if err != nil || cmd == nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var names []string
			for _, sub := range cmd.Commands() {
				if sub.IsAvailableCommand() && strings.HasPrefix(sub.Name(), toComplete) {
					names = append(names, sub.Name())
				}
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(c *cobra.Command, args []string) error {
			cmd, rest, err := c.Root().Find(args)
			if err == nil && cmd != nil && len(rest) == 0 {
				cmd.InitDefaultHelpFlag()
				cmd.InitDefaultVersionFlag()
				return cmd.Help()
			}
			topic, parent := args[0], c.Root()
			if err == nil && cmd != nil {
				topic, parent = rest[0], cmd
			}
			return &usageError{err: fmt.Errorf("unknown help topic %q for %q", topic, parent.CommandPath()), cmd: c.CommandPath()}
		},
	}
}

func newBenchCmd() *cobra.Command {
	cmd := groupCmd(&cobra.Command{
		Use:   "bench",
		Short: "Benchmarks that compare two configurations in one run",
	})
	cmd.AddCommand(newBenchBatchingCmd())
	cmd.AddCommand(watchesContext(newBenchRunCmd()))
	cmd.AddCommand(newBenchFoliosCmd())
	cmd.AddCommand(watchesContext(newBenchFioCmd()))
	cmd.AddCommand(watchesContext(newBenchKernelCmd()))
	cmd.AddCommand(watchesContext(newBenchGCCmd()))
	cmd.AddCommand(watchesContext(newBenchSeedsCmd()))
	cmd.AddCommand(watchesContext(newBenchPeersCmd()))
	cmd.AddCommand(watchesContext(newBenchLSMCmd()))
	return cmd
}

// startRecording creates file, if set, and starts start (a CPU profile, an
// execution trace) writing to it; flag names the option in errors.
func startRecording(flag, file string, start func(io.Writer) error) (*os.File, error) {
	if file == "" {
		return nil, nil
	}
	f, err := os.Create(file)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", flag, err)
	}
	if err := start(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--%s: %w", flag, err)
	}
	return f, nil
}

// writeProfile writes the runtime profile name to file, if file is set;
// its errors name the flag that set file.
func writeProfile(flag, name, file string) error {
	if file == "" {
		return nil
	}
	f, err := os.Create(file)
	if err != nil {
		return fmt.Errorf("--%s: %w", flag, err)
	}
	if name == "allocs" {
		// The profile is as of the last completed collection: run one, so
		// that it counts the allocations since then too.
		runtime.GC()
	}
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		f.Close()
		return fmt.Errorf("--%s: %w", flag, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("--%s: %w", flag, err)
	}
	return nil
}

// sameRequestWindow: a SIGINT this soon after a first SIGINT is the
// same request sent twice, not Ctrl-C pressed again.
const sameRequestWindow = 200 * time.Millisecond
