package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/zns"
)

// errIncomplete makes fsck --copy-to exit exitCopyIncomplete after it
// printed its report: something was not recovered or not copied.
var errIncomplete = errors.New("copy incomplete")

// copyDir opens dir, fsck --copy-to's destination, creating it if it is
// missing; one that holds anything is refused (a copy must not mix with,
// or replace, what is there).
// made says whether copyDir created it: a command that then fails
// before it copies anything removes it again.
func copyDir(dir string) (root *os.Root, made bool, err error) {
	if dir == "" {
		return nil, false, usagef("--%s takes a directory, got an empty name", copyToFlag)
	}
	if err := os.Mkdir(dir, 0o755); err == nil {
		made = true
		// DIR's own entry lives in its parent: unsynced, a crash
		// after the copy reported success could lose DIR and every
		// synced file in it.
		if err := syncParentDir(dir); err != nil {
			os.Remove(dir)
			return nil, false, err
		}
	} else if !errors.Is(err, fs.ErrExist) {
		return nil, false, err
	}
	root, err = os.OpenRoot(dir)
	if err != nil {
		return nil, false, err
	}
	d, err := root.Open(".")
	if err == nil {
		var names []string
		names, err = d.Readdirnames(1)
		d.Close()
		if err == nil && len(names) > 0 {
			err = fmt.Errorf("refusing to copy into %s: it is not empty (holds %q): give an empty or missing directory", dir, names[0])
		} else if errors.Is(err, io.EOF) {
			err = nil
		}
	}
	if err != nil {
		root.Close()
		return nil, false, err
	}
	return root, made, nil
}

// copyPath is where name goes below the copy's directory, or why it
// cannot: a name is any bytes but NUL, and one with an empty, "." or
// ".." part (an absolute one has an empty first part) would not stay a
// path of its own inside the directory.
func copyPath(name string) (string, error) {
	for _, part := range strings.Split(name, "/") {
		if part == "" || part == "." || part == ".." {
			return "", fmt.Errorf("its name has an empty, '.' or '..' part, and would not stay inside the directory as a path of its own")
		}
	}
	return name, nil
}

// syncedFile is a copy: synced as it is closed, a copy that reached only
// the page cache is not a backup.
type syncedFile struct{ *os.File }

func (f syncedFile) Close() error {
	err := f.Sync()
	if cerr := f.File.Close(); err == nil {
		err = cerr
	}
	return err
}

// copyDirs is every directory below a copy's root that holds a name the
// copy created: each, and then the root, is synced once the files are,
// so that their entries survive a crash too (a synced file whose entry
// is not is lost with it). A directory the copy made itself maps to
// true: if the file it was made for is not kept (not copied, or the one
// the copy stopped in) and it holds nothing else, prune removes it.
type copyDirs map[string]bool

// add notes rel's parent directories below the root.
func (d copyDirs) add(rel string) {
	for dir := path.Dir(rel); dir != "."; dir = path.Dir(dir) {
		if _, ok := d[dir]; !ok {
			d[dir] = false
		}
	}
}

// mkdirs makes rel's parent directories below root that are missing, as
// root.MkdirAll does, noting each it made. One that stops it part way
// (ENOSPC) leaves those it made before noted, for prune.
func (d copyDirs) mkdirs(root *os.Root, rel string) error {
	for i := range len(rel) {
		if rel[i] != '/' {
			continue
		}
		switch err := root.Mkdir(rel[:i], 0o755); {
		case err == nil:
			d[rel[:i]] = true
		case !errors.Is(err, fs.ErrExist):
			return err
		}
		// One that exists but is not a directory fails the next
		// Mkdir, or the file's create, with ENOTDIR (flatClash).
	}
	return nil
}

// prune removes the directories the copy made for rel, a file it does
// not keep, that hold nothing: deepest first, up to the first that holds
// something (a file copied before). The parent of each it removes stays
// in d, or is the root, so d.sync syncs the removal.
func (d copyDirs) prune(root *os.Root, rel string) error {
	for dir := path.Dir(rel); dir != "."; dir = path.Dir(dir) {
		if !d[dir] {
			continue // not made by the copy: missing, or not its to remove
		}
		if err := root.Remove(dir); errors.Is(err, fs.ErrExist) {
			return nil // ENOTEMPTY: it, and so each above it, holds a file
		} else if err != nil {
			return fmt.Errorf("remove directory %q, made for %q and holding nothing, from the copy: %w", dir, rel, err)
		}
		delete(d, dir)
	}
	return nil
}

// order is the directories to sync: the deepest first, the root (".")
// last, since a directory's own entry lives in its parent.
func (d copyDirs) order() []string {
	dirs := slices.Collect(maps.Keys(d))
	slices.SortFunc(dirs, func(a, b string) int {
		return cmp.Or(cmp.Compare(strings.Count(b, "/"), strings.Count(a, "/")), strings.Compare(a, b))
	})
	return append(dirs, ".")
}

// sync syncs every directory in order.
func (d copyDirs) sync(root *os.Root) error {
	for _, dir := range d.order() {
		if err := syncDir(root, dir); err != nil {
			return err
		}
	}
	return nil
}

// syncParentDir syncs the directory holding dir's entry; a variable so
// a test can see it called.
var syncParentDir = func(dir string) error {
	parent := filepath.Dir(filepath.Clean(dir))
	f, err := os.Open(parent)
	if err == nil {
		err = f.Sync()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("sync %s, the directory holding the copy's %s: %w", parent, dir, err)
	}
	return nil
}

func syncDir(root *os.Root, dir string) error {
	f, err := root.Open(dir)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync directory %s of the copy: %w", dir, err)
	}
	return nil
}

// createIn makes the create function engine.Salvage takes: each file
// new (never replacing one), sized, below root; dirs collects the
// directories its names live in.
func createIn(root *os.Root, dirs copyDirs) func(name string, size int64) (io.WriterAt, error) {
	return func(name string, size int64) (io.WriterAt, error) {
		rel, err := copyPath(name)
		if err != nil {
			return nil, err
		}
		// NOT COPIED leaves no directory made for it that holds
		// nothing.
		notCopied := func(err error) error {
			if perr := dirs.prune(root, rel); perr != nil {
				err = errors.Join(err, fmt.Errorf("and %w", perr))
			}
			return err
		}
		if err := dirs.mkdirs(root, rel); err != nil {
			return nil, notCopied(flatClash(root, rel, err))
		}
		f, err := root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return nil, notCopied(flatClash(root, rel, err))
		}
		// Noted once made: a part of rel that mkdirs took for a
		// directory (EEXIST) may be a file (flatClash), and each
		// directory it made is noted already.
		dirs.add(rel)
		if err := f.Truncate(size); err != nil {
			// NOT COPIED, so not left in DIR, empty under its
			// name (over a size limit or quota: EFBIG, EDQUOT).
			f.Close()
			if rerr := root.Remove(rel); rerr != nil {
				return nil, errors.Join(err, fmt.Errorf("and it could not be removed from the copy: %w", rerr))
			}
			return nil, notCopied(err)
		}
		return syncedFile{f}, nil
	}
}

// flatClash is why rel could not be made below root (err) when the
// cause is that zonefold's names are flat and a directory's are not:
// 'a' and 'a/b' can both be zonefold files, and the copy made the one
// it copied first, so a part of rel is a file there, or rel is a
// directory (of names below it). Other errors are returned as they are.
func flatClash(root *os.Root, rel string, err error) error {
	why := ""
	for i := range len(rel) {
		if rel[i] != '/' {
			continue
		}
		if fi, lerr := root.Lstat(rel[:i]); lerr == nil && !fi.IsDir() {
			why = fmt.Sprintf("%q is a file in %s, so %q cannot be made under it", rel[:i], root.Name(), rel)
			break
		}
	}
	if fi, lerr := root.Lstat(rel); why == "" && lerr == nil && fi.IsDir() {
		held := ""
		if d, oerr := root.Open(rel); oerr == nil {
			if names, _ := d.Readdirnames(1); len(names) > 0 {
				held = fmt.Sprintf(" (holding %q)", rel+"/"+names[0])
			}
			d.Close()
		}
		why = fmt.Sprintf("%q is a directory in %s%s, so the file %q cannot be made there", rel, root.Name(), held, rel)
	}
	if why == "" {
		return err
	}
	return fmt.Errorf("%s (zonefold names are flat: a name can be a file and also begin others' names, a directory's cannot; "+
		"copy it with: zonefold get %s LOCAL, once zonefold serve opens the device): %w", why, shellWord(rel), err)
}

// shellWord is s as one word a POSIX shell reads back as s: as it is if
// it holds only characters no shell treats specially, else in single
// quotes.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=.,/:@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// salvage is fsck --copy-to: it copies what engine.Salvage recovers off
// dev into root (dir), and prints fsck's report of the state it
// recovered and what it could not.
func salvage(cmd *cobra.Command, device string, dev zns.Device, root *os.Root, dir string, asJSON bool) error {
	dirs := copyDirs{}
	return salvageInto(cmd.OutOrStdout(), device, dev, stopsBetweenChunks(cmd.Context(), createIn(root, dirs)), finishCopy(root, dirs), dir, asJSON)
}

// stopsBetweenChunks makes create's copies stop once ctx ends: before
// the first file, it tells Main that a first signal now stops the copy
// cleanly (stopCleanlyFromHere); then a file's writes fail with ctx's
// error once ctx ended, and so does the close of a file begun after it
// ended (one that needs no write, empty or all holes, would not stop
// the copy). engine.Salvage stops at that error, between two chunks,
// and salvageInto removes the file it stopped in (finishCopy) and
// reports the files copied before it, as copied: a NOT RECOVERED range
// the report lists in one is zeros there, the rest of it whole.
func stopsBetweenChunks(ctx context.Context, create func(name string, size int64) (io.WriterAt, error)) func(name string, size int64) (io.WriterAt, error) {
	return func(name string, size int64) (io.WriterAt, error) {
		if !stopCleanlyFromHere(ctx) {
			// Main is exiting at once: create nothing it would
			// leave half copied.
			return nil, fmt.Errorf("not copied: %w", context.Canceled)
		}
		late := ctx.Err() != nil
		w, err := create(name, size)
		if err != nil {
			return nil, err
		}
		return watchedFile{ctx: ctx, WriterAt: w, late: late}, nil
	}
}

// watchedFile is a copy's file whose writes fail once ctx ended, and
// whose close does too if it was begun after (late).
type watchedFile struct {
	ctx context.Context
	io.WriterAt
	late bool
}

func (f watchedFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.stopped(); err != nil {
		return 0, err
	}
	return f.WriterAt.WriteAt(p, off)
}

func (f watchedFile) Close() error {
	var err error
	if c, ok := f.WriterAt.(io.Closer); ok {
		err = c.Close()
	}
	if f.late {
		err = errors.Join(err, f.stopped())
	}
	return err
}

// stopped is ctx's error, once it ended, as the report's NOT COPIED line
// of the file the copy stopped in says it: "context canceled" names no
// signal. Main cancels ctx on one (stopCleanlyFromHere).
func (f watchedFile) stopped() error {
	if err := f.ctx.Err(); err != nil {
		return fmt.Errorf("interrupted by a signal, the copy stopped here: %w", err)
	}
	return nil
}

// finishCopy makes the done function salvageInto takes for a copy into
// root: it removes the file the copy stopped in, if any (partial), and
// the directories made for it that then hold nothing, then syncs dirs.
func finishCopy(root *os.Root, dirs copyDirs) func(partial string) error {
	return func(partial string) error {
		var err error
		if partial != "" {
			if err = root.Remove(partial); err != nil {
				err = fmt.Errorf("remove %q, copied part way, from the copy: %w", partial, err)
			} else {
				err = dirs.prune(root, partial)
			}
		}
		return errors.Join(err, dirs.sync(root))
	}
}

// salvageInto runs engine.Salvage into create, then done (which removes
// the file the copy stopped in, partial, with the directories made for
// it that hold nothing, and makes what was copied durable), and prints
// the report. A copy that stops part way (the copy's file system full,
// a device read failing other than EIO, a signal) still syncs and
// reports the files it copied before the one that stopped it, so the
// user knows what DIR holds: those, each whole but for the NOT
// RECOVERED ranges the report lists in it, which are zeros. The one it
// stopped in is not left there: created at its full size, its first
// bytes copied and the rest zeros, it looked whole. It and each file
// after it are listed NOT COPIED (engine.Salvage names them), so that
// the files copied and not copied are all the report counts.
func salvageInto(out io.Writer, device string, dev zns.Device, create func(name string, size int64) (io.WriterAt, error), done func(partial string) error, dir string, asJSON bool) error {
	var partial string // the file being copied
	rep, err := engine.Salvage(dev, func(name string, size int64) (io.WriterAt, error) {
		w, err := create(name, size)
		if err == nil {
			partial = name
		}
		return w, err
	})
	if rep == nil {
		return err
	}
	if err == nil {
		partial = "" // every file created was copied
	}
	stopped := errors.Join(err, done(partial))
	copied, holes, skipped := 0, 0, 0
	var bytes int64
	interrupted := "" // the file a signal stopped the copy in (stopsBetweenChunks)
	if errors.Is(err, context.Canceled) {
		interrupted = partial
	}
	for _, f := range rep.Files {
		switch {
		case f.Err != nil:
			skipped++
		default:
			// A hole's bytes were not copied: the summary counts
			// only what was verified.
			copied++
			bytes += f.Size
			holes += len(f.Holes)
			for _, h := range f.Holes {
				bytes -= h.Len
			}
		}
	}
	if asJSON {
		j := fsckOutput(device, rep.Fsck)
		j.CopyTo, j.Copied, j.NotRecovered, j.InterruptedIn = dir, &copied, []notRecoveredJSON{}, interrupted
		for _, f := range rep.Files {
			if f.Err != nil {
				j.NotRecovered = append(j.NotRecovered, notRecoveredJSON{File: f.Name, Length: f.Size, Why: f.Err.Error(), NotCopied: true})
			}
			for _, h := range f.Holes {
				j.NotRecovered = append(j.NotRecovered, notRecoveredJSON{File: f.Name, Offset: h.Off, Length: h.Len, Why: h.Why})
			}
		}
		if err := writeJSON(out, j); err != nil {
			return errors.Join(stopped, err)
		}
	} else {
		printFsck(out, device, rep.Fsck)
		for _, f := range rep.Files {
			if f.Err != nil {
				fmt.Fprintf(out, "NOT COPIED: file %q (%s): %v\n", f.Name, human(f.Size), f.Err)
			}
			for _, h := range f.Holes {
				fmt.Fprintf(out, "NOT RECOVERED: file %q: bytes %d..%d (%s), left a hole (zeros): %s\n", f.Name, h.Off, h.Off+h.Len, human(h.Len), h.Why)
			}
		}
		fmt.Fprintf(out, "copied %s (%s) to %s", counted(copied, "file"), human(bytes), dir)
		if holes > 0 || skipped > 0 {
			fmt.Fprintf(out, "; %s not recovered, %s not copied", counted(holes, "range"), counted(skipped, "file"))
		}
		fmt.Fprintln(out)
		if interrupted != "" {
			// The report is of the files copied before it.
			fmt.Fprintf(out, "interrupted: the copy stopped in %q (the part of it copied is not kept); %s holds the files counted above, as listed (a NOT RECOVERED range is zeros)\n", interrupted, dir)
		}
	}
	if stopped != nil {
		if partial != "" {
			return fmt.Errorf("%s: the copy to %s stopped after %s (the part of %q copied is not kept): %w", device, dir, counted(copied, "file"), partial, stopped)
		}
		return fmt.Errorf("%s: the copy to %s stopped after %s: %w", device, dir, counted(copied, "file"), stopped)
	}
	if !rep.Fsck.Recovered {
		// Nothing to copy from, which is not every file copied:
		// fsck could not do its job, as plain fsck's refusal.
		return fmt.Errorf("%s: recovery found no state to copy from (%s, see the report): nothing was copied to %s", device,
			counted(len(rep.Fsck.Problems), "problem"), dir)
	}
	if holes > 0 || skipped > 0 {
		return fmt.Errorf("%s: %w: %s not recovered, %s not copied, %s (see the report)", device, errIncomplete,
			counted(holes, "range"), counted(skipped, "file"), counted(len(rep.Fsck.Problems), "problem"))
	}
	if !rep.Complete() {
		// Damage, but every file recovery found came back whole
		// (what the damage cost that it cannot name, the DAMAGE
		// lines say).
		return fmt.Errorf("%s: %w (%s); every file it recovered was copied whole to %s", device, errDamaged,
			counted(len(rep.Fsck.Problems), "problem"), dir)
	}
	return nil
}
