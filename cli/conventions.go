package cli

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	output "github.com/zonefold/zonefold/internal/report"
	"github.com/zonefold/zonefold/zns"
)

// The command line's conventions, in one place so that every command
// follows them (the output half, shared with bench, is internal/report):
//
//   - Exit status: 0 success, 1 failure, 2 usage (an unknown command or
//     help topic, a bad flag or argument, an empty one: emptyArg,
//     pathVar), 128+N after signal N (fsck alone has statuses of its own
//     past 2, as e2fsck does: fsckStatus): 130 after
//     SIGINT, 143 after SIGTERM, 129 after SIGHUP. serve, which a signal
//     is meant to stop, exits 0 when it stopped cleanly. A well-formed
//     path that cannot be opened or created (put's LOCAL, a device,
//     --cpuprofile FILE in a missing directory) is a failure, 1, as the
//     shell's own failed redirection is, not a usage error; a device
//     string wrong as typed (malformed, or parameters that describe no
//     device) is a usage error that shows the accepted form
//     (checkDevice).
//   - A signal (SIGINT, SIGTERM, or SIGHUP: the terminal went away)
//     cancels the command's context. A command that does not watch its
//     context (annotated below, or, as fsck --copy-to once it copies,
//     said from then on: stopCleanlyFromHere) stops at once; one that
//     does gets to finish (serve flushes, put removes its temporary
//     file, fsck --copy-to removes the file it was copying) unless a
//     SIGINT follows (Ctrl-C again). A SIGTERM or SIGHUP that follows
//     asks for the same clean stop again and changes nothing: GNU
//     timeout sends its signal to the command and then to its process
//     group, and supervisors that are done waiting send SIGKILL. For the
//     same reason a SIGINT within sameRequestWindow (200 ms) of a first
//     SIGINT changes nothing (`timeout -s INT`); Ctrl-C pressed again
//     comes later.
//   - Errors are one line on stderr, "zonefold: ...", without repeated
//     prefixes (errorLine), with the next step where there is one.
//   - Sizes: every size flag takes what zns.ParseSize reads (4096, 64K,
//     1.5M, 2GiB: binary units) and is printed in KiB/MiB/GiB; counts are
//     whole numbers; nan, inf, negative and overflowing values are refused
//     (sizeVar, countVar, numberVar).
//   - Every command that prints a table has --json: one object, snake_case
//     keys (internal/report.WriteJSON).

// Exit statuses.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// exitSignal is the status after signal sig, as a shell reports a process
// that a signal ended.
func exitSignal(sig syscall.Signal) int { return 128 + int(sig) }

// Command annotations.
const (
	// annWatchesContext marks a command that returns promptly once its
	// context is canceled; others are stopped at once by a signal.
	annWatchesContext = "zonefold.watches-context"
	// annStopsOnSignal marks a command that a signal is meant to stop
	// (serve): its exit status is its own result, not 128+N.
	annStopsOnSignal = "zonefold.stops-on-signal"
)

// watchesContext marks cmd as returning promptly when its context is
// canceled, and returns it.
func watchesContext(cmd *cobra.Command) *cobra.Command {
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[annWatchesContext] = "yes"
	return cmd
}

func annotated(cmd *cobra.Command, key string) bool {
	return cmd != nil && cmd.Annotations[key] != ""
}

// statusError is an error a command ends with under an exit status of
// its own (fsck's: fsckStatus), printed as any failure is. A usage error
// or a signal it wraps still decides the status.
type statusError struct {
	status int
	err    error
}

func (e *statusError) Error() string { return e.err.Error() }
func (e *statusError) Unwrap() error { return e.err }

// usageError is an error in how a command was called: exit status 2.
type usageError struct {
	err error
	cmd string // the command's path, for the pointer to its help
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// usagef makes a usage error.
func usagef(format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...)}
}

// asUsage marks err as a usage error of cmd (nil stays nil).
func asUsage(cmd *cobra.Command, err error) error {
	if err == nil {
		return nil
	}
	var u *usageError
	if errors.As(err, &u) {
		if u.cmd == "" {
			u.cmd = cmd.CommandPath()
		}
		return err
	}
	return &usageError{err: err, cmd: cmd.CommandPath()}
}

// groupCmd makes cmd, which only holds subcommands, print its help when
// called alone and refuse an unknown subcommand as a usage error (cobra
// would print the help and exit 0).
func groupCmd(cmd *cobra.Command) *cobra.Command {
	cmd.SuggestionsMinimumDistance = 2
	cmd.Args = cobra.ArbitraryArgs
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			msg += fmt.Sprintf(" (did you mean %q?)", s[0])
		}
		return usagef("%s", msg)
	}
	return cmd
}

// markUsage makes every argument and flag error of cmd's tree a usage
// error.
func markUsage(cmd *cobra.Command) {
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return asUsage(c, err) })
	if args := cmd.Args; args != nil {
		cmd.Args = func(c *cobra.Command, a []string) error {
			if err := argCount(c, a, args(c, a)); err != nil {
				return asUsage(c, err)
			}
			if err := deviceArg(c, a); err != nil {
				return asUsage(c, err)
			}
			return asUsage(c, emptyArg(c, a))
		}
	}
	for _, sub := range cmd.Commands() {
		markUsage(sub)
	}
}

// argCount says cobra's "accepts 2 arg(s), received 1" as which
// arguments the command takes: "put takes LOCAL NAME, got 1 argument",
// and cobra.NoArgs's "unknown command" for a command without
// subcommands as "stat takes no arguments". Other errors pass as they
// are.
func argCount(c *cobra.Command, a []string, err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	_, want, _ := strings.Cut(c.Use, " ")
	if want == "" && !c.HasSubCommands() && strings.HasPrefix(msg, "unknown command ") {
		// cobra.NoArgs's words, meant for a command with subcommands.
		return fmt.Errorf("%s takes no arguments, got %d (%q)", strings.TrimPrefix(c.CommandPath(), "zonefold "), len(a), strings.Join(a, " "))
	}
	if want == "" || !strings.HasPrefix(msg, "accepts ") && !strings.HasPrefix(msg, "requires at least ") {
		return err
	}
	noun := "arguments"
	if len(a) == 1 {
		noun = "argument"
	}
	return fmt.Errorf("%s takes %s, got %d %s", strings.TrimPrefix(c.CommandPath(), "zonefold "), want, len(a), noun)
}

// deviceArg checks the device string of a command whose first argument
// is DEVICE (its Use says so, "serve DEVICE", "gc [DEVICE]"), before
// anything claims or opens it (checkDevice).
func deviceArg(c *cobra.Command, a []string) error {
	_, want, _ := strings.Cut(c.Use, " ")
	first, _, _ := strings.Cut(want, " ")
	if len(a) == 0 || first != "DEVICE" && first != "[DEVICE]" {
		return nil
	}
	return checkDevice("", a[0])
}

// emptyArg refuses an empty argument, which no command takes, named as
// its Use names it ("get: LOCAL is empty"). get wrote its temporary and
// failed renaming it to "", put failed opening "".
func emptyArg(c *cobra.Command, a []string) error {
	_, want, _ := strings.Cut(c.Use, " ")
	names := strings.Fields(want)
	for i, arg := range a {
		if arg != "" {
			continue
		}
		name := fmt.Sprintf("argument %d", i+1)
		switch last := len(names) - 1; {
		case i <= last:
			name = names[i]
		case last >= 0 && strings.HasSuffix(names[last], "..."):
			name = names[last]
		}
		return fmt.Errorf("%s: %s is empty", strings.TrimPrefix(c.CommandPath(), "zonefold "), strings.Trim(name, "[]."))
	}
	return nil
}

// checkDevice refuses a device string that is wrong as typed (malformed,
// or parameters that describe no device: zns.CheckDeviceString) as a
// usage error that shows the accepted form; flag, if set, is the flag
// that gave it. It exited 1 with zns's parse error, after the device
// was claimed: an unknown backend ("emux:...") read as "lock device ...:
// no such file or directory". A well-formed string naming what cannot
// be opened passes, to fail (exit 1) where it is opened.
func checkDevice(flag, device string) error {
	err := zns.CheckDeviceString(device)
	var de *zns.DeviceStringError
	if !errors.As(err, &de) {
		return err
	}
	msg := de.Err.Error()
	if device == "" || !strings.Contains(msg, strconv.Quote(device)) {
		msg = fmt.Sprintf("device %q: %s", device, strings.TrimPrefix(msg, "zns: "))
	}
	if flag != "" {
		msg = flag + ": " + msg
	}
	return usagef("%s; the accepted form is %s", msg, de.Form)
}

// errorLine is err as the user sees it: one line, "zonefold: " once,
// and no package prefix repeated (the Go convention of prefixing both a
// sentinel error and its wrapping, "zns: reset zone 0: zns: conventional
// zone", and the client's own "zonefold: " would otherwise stutter).
func errorLine(err error) string {
	msg := strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
	seen := map[string]bool{"zonefold": true}
	var kept []string
	for _, part := range strings.Split(msg, ": ") {
		prefix := part != "" && !strings.ContainsAny(part, " /.") && strings.ToLower(part) == part
		switch {
		case prefix && seen[part]:
			continue
		case len(kept) > 0 && kept[len(kept)-1] == part:
			continue
		}
		if prefix {
			seen[part] = true
		}
		kept = append(kept, part)
	}
	return "zonefold: " + strings.Join(kept, ": ")
}

// interrupted tells whether err is what canceling a command's context
// gives (directly or through a deadline the client set to stop a call).
func interrupted(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, os.ErrDeadlineExceeded) ||
		errors.Is(err, context.DeadlineExceeded)
}

// version is the binary's version: the module version and the VCS
// revision it was built from, when the build recorded them.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	if v == "" || v == "(devel)" {
		v = "devel"
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" {
		v += " " + rev + dirty
	}
	return v + " " + bi.GoVersion
}

// parseSize reads a byte count as every size flag does (zns.ParseSize:
// 4096, 64K, 1.5M, 2GiB).
func parseSize(s string) (int64, error) { return zns.ParseSize(s) }

// sizeValue is a size flag.
type sizeValue struct{ p *int64 }

func (v sizeValue) String() string {
	if v.p == nil || *v.p == 0 {
		return "0" // what pflag takes for a default not to print
	}
	return strings.ReplaceAll(output.Human(*v.p), " ", "")
}
func (v sizeValue) Type() string { return "size" }
func (v sizeValue) Set(s string) error {
	n, err := parseSize(s)
	if err != nil {
		return err
	}
	*v.p = n
	return nil
}

// sizeVar defines a size flag: 64M, 1.5G, 4096.
func sizeVar(fs *pflag.FlagSet, p *int64, name string, def int64, usage string) {
	*p = def
	fs.Var(sizeValue{p}, name, usage)
}

// countValue is a count flag: a whole number, not negative.
type countValue struct{ p *int }

func (v countValue) String() string {
	if v.p == nil {
		return "0"
	}
	return strconv.Itoa(*v.p)
}
func (v countValue) Type() string { return "count" }
func (v countValue) Set(s string) error {
	n, err := zns.ParseCount(s)
	if err != nil {
		return err
	}
	*v.p = n
	return nil
}

// countVar defines a count flag.
func countVar(fs *pflag.FlagSet, p *int, name string, def int, usage string) {
	*p = def
	fs.Var(countValue{p}, name, usage)
}

// numberValue is a finite, non-negative real number flag.
type numberValue struct{ p *float64 }

func (v numberValue) String() string {
	if v.p == nil {
		return "0"
	}
	return strconv.FormatFloat(*v.p, 'g', -1, 64)
}
func (v numberValue) Type() string { return "number" }
func (v numberValue) Set(s string) error {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return fmt.Errorf("bad number %q (want a finite number, at least 0)", s)
	}
	*v.p = f
	return nil
}

// numberVar defines a number flag.
func numberVar(fs *pflag.FlagSet, p *float64, name string, def float64, usage string) {
	*p = def
	fs.Var(numberValue{p}, name, usage)
}

// nonZero is err, or an error saying that 0 is not allowed.
func nonZero(n int64, err error) error {
	if err == nil && n == 0 {
		return errors.New("must be more than 0")
	}
	return err
}

// intSizeValue is a size flag held in an int: at most 2 GiB - 1.
type intSizeValue struct{ p *int }

func (v intSizeValue) String() string {
	if v.p == nil {
		return "0"
	}
	return strings.ReplaceAll(output.Human(int64(*v.p)), " ", "")
}
func (v intSizeValue) Type() string { return "size" }
func (v intSizeValue) Set(s string) error {
	n, err := parseSize(s)
	if err != nil {
		return err
	}
	if n > math.MaxInt32 {
		return fmt.Errorf("size %q is too large (at most 2 GiB - 1)", s)
	}
	*v.p = int(n)
	return nil
}

// intSizeVar defines a size flag held in an int.
func intSizeVar(fs *pflag.FlagSet, p *int, name string, def int, usage string) {
	*p = def
	fs.Var(intSizeValue{p}, name, usage)
}

// checkedString is a string flag whose values check refuses (as the
// flag's value: a usage error).
type checkedString struct {
	p     *string
	typ   string // the value's type in the help: "string", "address"
	check func(string) error
}

func (v checkedString) String() string {
	if v.p == nil {
		return ""
	}
	return *v.p
}
func (v checkedString) Type() string { return v.typ }
func (v checkedString) Set(s string) error {
	if err := v.check(s); err != nil {
		return err
	}
	*v.p = s
	return nil
}

// pathVar defines a flag naming a path that must be given when the flag
// is, to a names ("socket", "folder"): an empty one names nothing, and
// was taken for something else or failed late (--socket "": "connect to
// daemon: empty socket path", exit 1; bench batching --dir "": $TMPDIR,
// unsaid; bench gc --out "": "--out: want a folder", exit 1).
func pathVar(fs *pflag.FlagSet, p *string, name, def, names, usage string) {
	*p = def
	fs.Var(checkedString{p, "string", func(s string) error {
		if s == "" {
			return fmt.Errorf("an empty path names no %s", names)
		}
		return nil
	}}, name, usage)
}
