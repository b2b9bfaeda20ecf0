package bench

import (
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/internal/report"
	"github.com/zonefold/zonefold/server"
	"github.com/zonefold/zonefold/zns"
)

// WriteJSON prints v as one indented JSON object.
var WriteJSON = report.WriteJSON

var (
	newTable = report.NewTable
	micros   = report.Micros
	human    = report.Human
	given    = report.Given // a size a flag gave, read back exactly (--bs 3000)
	mibPerS  = report.MiBps // every rate is MiB/s
)

// writeFileWith creates path and fills it with write.
func writeFileWith(path string, write func(*os.File) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

func writeCSV(path string, records [][]string) error {
	return writeFileWith(path, func(f *os.File) error {
		cw := csv.NewWriter(f)
		if err := cw.WriteAll(records); err != nil {
			return err
		}
		return cw.Error()
	})
}

// newProgress is a progress bar of max bytes on w (a terminal): what
// progressbar.DefaultBytes draws on stderr.
func newProgress(w io.Writer, max int64, desc string) *progressbar.ProgressBar {
	return progressbar.NewOptions64(max,
		progressbar.OptionSetDescription(desc),
		progressbar.OptionSetWriter(w),
		progressbar.OptionShowBytes(true),
		progressbar.OptionShowTotalBytes(true),
		progressbar.OptionSetWidth(10),
		progressbar.OptionThrottle(65*time.Millisecond),
		progressbar.OptionShowCount(),
		progressbar.OptionOnCompletion(func() { fmt.Fprint(w, "\n") }),
		progressbar.OptionSpinnerType(14),
		progressbar.OptionFullWidth(),
		progressbar.OptionSetRenderBlankState(true),
	)
}

// OpenFormatted claims device as the daemon does (so that a benchmark
// never erases a device a daemon serves), formats it (erasing it) and
// opens an engine on it, which owns the device; release drops the claim
// after the engine closed.
func OpenFormatted(device string, cfg engine.Config) (e *engine.Engine, release func(), err error) {
	return openFormattedFor(device, cfg, nil)
}

// openFormattedFor is OpenFormatted for a bench that runs w on the
// device (if not nil): it refuses, erasing nothing, a workload whose
// files the device cannot hold (checkDeviceFits).
func openFormattedFor(device string, cfg engine.Config, w *Workload) (e *engine.Engine, release func(), err error) {
	e, lock, err := openFormattedLocked(device, cfg, w)
	if err != nil {
		return nil, nil, err
	}
	return e, lock.Release, nil
}

// openFormattedLocked is openFormattedFor with the claim itself, for a
// caller that abandons it (removing an emu file the claim created) when
// it fails after the open.
func openFormattedLocked(device string, cfg engine.Config, w *Workload) (*engine.Engine, *server.DeviceLock, error) {
	dev, lock, err := claimDevice(device)
	if err != nil {
		return nil, nil, err
	}
	// Nothing is erased for settings the engine would then refuse (a
	// --open-zones or --gc-high above the device), as serve checks, nor
	// for a workload the device cannot hold: a usage error (exit 2)
	// that has erased the device (--force) changed what it was to
	// refuse.
	err = engine.CheckConfig(dev, cfg, &engine.FormatOptions{Force: true})
	if err == nil && w != nil {
		err = checkDeviceFits(dev, cfg, *w)
	}
	if err != nil {
		dev.Close()
		lock.Abandon()
		return nil, nil, err
	}
	e, err := engine.FormatAndOpen(dev, cfg)
	if err != nil {
		dev.Close()
		lock.Abandon()
		return nil, nil, err
	}
	return e, lock, nil
}

// removeIfCreated is for a bench that formats device afresh for each of
// its runs, each run claiming it anew: called at the bench's end with its
// error, it removes device's emu file if the bench failed and the file
// was not there when the bench began (so the bench created it). Each
// run's own claim cannot tell: the first run's created the file and, as
// that run succeeded, kept it; a later run that failed found it there and
// kept it too, so a failed bench left the file behind (every command that
// fails leaves no emu file it created, and the retry was refused as
// holding data). The file is removed under a claim of its own, so never
// while another command holds it.
func removeIfCreated(device string) func(err error) {
	if !strings.HasPrefix(device, "emu:") {
		return func(error) {}
	}
	path, _, _ := strings.Cut(strings.TrimPrefix(device, "emu:"), "?")
	if _, err := os.Lstat(path); err == nil || !os.IsNotExist(err) {
		return func(error) {}
	}
	return func(err error) {
		if err == nil {
			return
		}
		if _, serr := os.Lstat(path); serr != nil {
			return // never made, or gone already
		}
		lock, lerr := server.LockDevice(device)
		if lerr != nil {
			return // someone else's now
		}
		os.Remove(path)
		lock.Release()
	}
}

// claimDevice claims device as the daemon does and opens it.
func claimDevice(device string) (zns.Device, *server.DeviceLock, error) {
	lock, err := server.LockDevice(device)
	if err != nil {
		return nil, nil, err
	}
	dev, err := zns.Open(device, zns.Options{})
	if err != nil {
		lock.Abandon() // an emu file the claim created goes again
		return nil, nil, err
	}
	return dev, lock, nil
}

// CheckErasable refuses, unless force, a device the user named that
// holds data (a zonefold file system, even an empty one, or anything written), as
// format does without --force: a benchmark that formats it would erase
// what is there. A bench calls it once, before its first format; the
// formats after that erase only what the bench itself wrote. A null:
// device holds nothing and passes.
func CheckErasable(device string, force bool) error {
	if force || device == "" || strings.HasPrefix(device, "null:") {
		return nil
	}
	if zns.StartsOver(device) {
		// The open below would erase it before anything is checked.
		return fmt.Errorf("%s: format=1 in the device string erases the device; give --force too, or drop format=1", device)
	}
	dev, lock, err := claimDevice(device)
	if err != nil {
		return err
	}
	err = engine.CheckEmpty(dev, 0)
	if cerr := dev.Close(); err == nil {
		err = cerr
	}
	lock.Abandon() // an emu file the claim created (empty) goes again
	if err != nil {
		return fmt.Errorf("%s: the benchmark formats it, erasing it: %w", device, err)
	}
	return nil
}
