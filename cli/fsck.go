package cli

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/zns"
)

// acceptOfflineFlag is the flag of serve and fsck that opens past a data
// zone gone offline with data newer than the last checkpoint
// (engine.Config.AcceptOfflineZones); the engine's refusal names it.
const acceptOfflineFlag = "accept-offline-zones"

// acceptDamagedFlag is the flag of serve and fsck that opens past a
// damaged record header newer than the last checkpoint
// (engine.Config.AcceptDamagedRecords); the engine's refusal names it.
const acceptDamagedFlag = "accept-damaged-records"

// copyToFlag is fsck's flag that copies the files it recovers off the
// device (engine.Salvage).
const copyToFlag = "copy-to"

// errDamaged makes fsck exit exitDamaged after it printed its report.
var errDamaged = errors.New("file system is damaged")

// fsck's exit statuses, for a script checking a device or salvaging one
// to tell its outcomes apart. They follow e2fsck's where the meaning is
// the same (e2fsck: 1 errors found and corrected, 4 errors left, 8
// operational error; xfs_repair -n: 1 corruption found, which is what
// fsck's 1 is, since it corrects nothing), past zonefold's
// 0 and 2 (usage), which stay; the highest that applies is the status
// (not a bit mask). 0, 1 and 2 are what fsck exited before --copy-to
// told a copy that lost nothing from one that did.
const (
	// exitDamaged: damage found (the report lists it as DAMAGE);
	// with --copy-to, every file recovery found was still copied
	// whole.
	exitDamaged = 1
	// exitCopyIncomplete: --copy-to copied what it could, but a file
	// is NOT COPIED (DIR could not take it) or a range of one NOT
	// RECOVERED (a hole of zeros): the report lists each, DIR holds
	// the rest.
	exitCopyIncomplete = 4
	// exitNotChecked: fsck could not do its job: the device could not
	// be opened or read, recovery refused it (plain fsck) or found no
	// state to copy from (--copy-to), DIR was refused, or the copy
	// stopped part way (the report, if printed, says how many files
	// DIR holds, each whole but for a NOT RECOVERED range it lists,
	// zeros; the one it stopped in is removed, finishCopy, and listed
	// NOT COPIED with each after it).
	exitNotChecked = 8
)

// fsckStatus is err, fsck's result, with the exit status it ends with
// (nil stays nil; a usage error stays 2, exitStatus seeing through).
func fsckStatus(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errIncomplete):
		return &statusError{status: exitCopyIncomplete, err: err}
	case errors.Is(err, errDamaged):
		return &statusError{status: exitDamaged, err: err}
	}
	return &statusError{status: exitNotChecked, err: err}
}

func newFsckCmd() *cobra.Command {
	var asJSON, acceptOffline, acceptDamaged bool
	var copyTo string
	cmd := &cobra.Command{
		Use:   "fsck DEVICE",
		Short: "Check a zonefold file system without changing it",
		Long: `Reads both superblock copies, the metadata log, every record in every data
zone (header and data checksums) and checks that every file's extents point
at records that carry them. Prints a report; exits non-zero on damage
(the exit statuses are at the end).

--accept-offline-zones checks the file system as zonefold serve
--accept-offline-zones would open it when a data zone went offline
holding data newer than the last checkpoint (without it, that is
recovery's one problem): the report names the files that map data there.

--accept-damaged-records checks it as zonefold serve
--accept-damaged-records would open it when a data record newer than the
last checkpoint has a damaged header: the report names where it was.

--copy-to DIR also copies every file it can recover into DIR (created if
missing; refused unless empty), never writing the device: a salvage when
serve refuses the device (its newest checkpoint or the log before it
damaged), or a backup of a healthy one. It recovers from the best state
it can decode (falling back to the older checkpoint) and copies only bytes
it verifies: each extent in a record that carries that file, offset and
version, each block's checksum passing. What it cannot verify is left a
hole (zeros) and listed as NOT RECOVERED with why; a name that would
leave DIR ('..', absolute, empty parts) is not copied. Names with '/'
become subdirectories. An emu file whose zone table is lost (both header
slots zeros, or garbage over a device a zonefold superblock at a zone
start shows; its zones holding data; plain fsck refuses it) is salvaged
too: each zone's write pointer inferred from where the file's data ends
in it, in memory, the report saying so first; the device string must give
the geometry it was formatted with (zone_size, zones, zone_cap, conv), and
where the one given differs, fsck names the parameter. A name DIR cannot hold
because zonefold names are flat ('a' and 'a/b' both files) is NOT COPIED
with why.

Exit status (the highest that applies; 4 and 8 as e2fsck's, 1 as
xfs_repair -n's: fsck repairs nothing):
  0  clean; with --copy-to, every file copied whole
  1  damage found (the report's DAMAGE lines); with --copy-to, every file
     it recovered still copied whole (what the damage cost that it cannot
     name, such as what was logged after a damaged checkpoint, the DAMAGE
     lines say)
  2  usage error (a bad flag, argument or device string)
  4  --copy-to: a file NOT COPIED (DIR could not take it: a name it
     cannot hold, a size over its limit) or a range NOT RECOVERED (left
     a hole of zeros); the report lists each, DIR holds the rest
  8  fsck could not check or copy: the device could not be opened or
     read, recovery refused it or (--copy-to) found no state to copy from
     (the report or the error says why), DIR was refused, or the copy
     stopped part way (DIR holds the files the report says it copied,
     a NOT RECOVERED range it lists in one zeros; the report lists the
     one it stopped in, not kept, and each after it as NOT COPIED)
A script salvaging a device: 0 or 1, every file fsck found came back
whole; 4, the report lists what did not; 8, DIR holds only the files
the report says it copied, if any. A signal (SIGINT, SIGTERM, SIGHUP)
stops fsck with 130, 143 or 129. While it checks, at once, with no report
(DIR still holds nothing). While --copy-to copies, between two chunks:
the file it was copying removed (and a subdirectory made for it that
holds nothing), DIR synced, the report printed, listing that file and
each after it NOT COPIED, with a line saying where it was interrupted
(--json: interrupted_in); DIR holds the files the report says it
copied. After the copy ended, the report whole, with no such line.
Ctrl-C again stops it at once (DIR may then hold a file copied part
way).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			defer func() { err = fsckStatus(err) }()
			if err := refuseStartOver(args[0], false, "fsck never writes: drop format=1"); err != nil {
				return err
			}
			var root *os.Root
			if cmd.Flags().Changed(copyToFlag) {
				var made bool
				if root, made, err = copyDir(copyTo); err != nil {
					return err
				}
				defer root.Close()
				if made {
					// A device that cannot be opened leaves no
					// empty directory behind; a copy fsck made,
					// empty or not (exit 1 or 4: the report says
					// what DIR holds), is kept.
					defer func() {
						if err != nil && !errors.Is(err, errDamaged) && !errors.Is(err, errIncomplete) {
							os.Remove(copyTo) // only if still empty
						}
					}()
				}
			}
			// A daemon writing meanwhile would make the report
			// meaningless: claim the device as the daemon does.
			// Existing: a blank emu table is refused, not replaced
			// by an empty one (fsck never writes the device).
			// A salvage goes on past a lost emu zone table,
			// inferring it in memory (InferLostTable): it copies
			// only what records verify.
			dev, release, err := openClaimedWith(args[0], zns.Options{Existing: true, InferLostTable: root != nil})
			if err != nil {
				return err
			}
			defer func() { release(err == nil) }()
			if root != nil {
				return salvage(cmd, args[0], dev, root, copyTo, asJSON)
			}
			rep, err := engine.FsckWith(dev, engine.FsckOptions{AcceptOfflineZones: acceptOffline, AcceptDamagedRecords: acceptDamaged})
			if err != nil {
				return err
			}
			if asJSON {
				if err := writeJSON(cmd.OutOrStdout(), fsckOutput(args[0], rep)); err != nil {
					return err
				}
			} else {
				printFsck(cmd.OutOrStdout(), args[0], rep)
			}
			if !rep.Recovered {
				// What fsck found stopped it before the files:
				// not checked, which damage found in a file
				// system it checked (1) would understate.
				return fmt.Errorf("%s: fsck could not check the file system: recovery stopped before the files (%s, see the report)", args[0],
					counted(len(rep.Problems), "problem"))
			}
			if len(rep.Problems) > 0 {
				return fmt.Errorf("%s: %w (%s)", args[0], errDamaged, counted(len(rep.Problems), "problem"))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as one JSON object")
	cmd.Flags().BoolVar(&acceptOffline, acceptOfflineFlag, false, "recover past a data zone gone offline holding data newer than the last checkpoint, as serve --accept-offline-zones does, and name the files that map data there")
	cmd.Flags().StringVar(&copyTo, copyToFlag, "", "copy every file it can recover into `DIR` (empty or missing), never writing the device; exits 4 if anything was not copied whole")
	cmd.Flags().BoolVar(&acceptDamaged, acceptDamagedFlag, false, "recover past a damaged record header newer than the last checkpoint, as serve --accept-damaged-records does, and name where it was")
	return cmd
}

// printFsck prints rep as fsck's text report.
func printFsck(out io.Writer, device string, rep *engine.FsckReport) {
	fmt.Fprintf(out, "%s: uuid %s, formatted on %d of %d zones\n", device, rep.Superblock.ID(), rep.Superblock.UsedZones, rep.Superblock.Zones)
	fmt.Fprintf(out, "%s, %s, %s live; %s; %d replayed past the checkpoint\n",
		counted(rep.Files, "file"), counted(rep.Extents, "extent"), human(rep.LiveBytes), counted(rep.Records, "record"), rep.Replayed)
	for _, n := range rep.Notes {
		fmt.Fprintln(out, "note:", n)
	}
	for _, p := range rep.Problems {
		fmt.Fprintln(out, "DAMAGE:", p)
	}
	if len(rep.Problems) == 0 {
		fmt.Fprintln(out, "clean")
	}
}

// counted is n things: "1 file", "2 files".
func counted[N int | int64](n N, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
