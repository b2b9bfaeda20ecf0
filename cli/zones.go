package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/zonefold/zonefold/engine"
	output "github.com/zonefold/zonefold/internal/report"
	"github.com/zonefold/zonefold/zns"
)

func newZonesCmd() *cobra.Command {
	cmd := groupCmd(&cobra.Command{
		Use:   "zones",
		Short: "Report and manage the zones of a zoned device",
		Long: `Report and manage zones, like util-linux blkzone. DEVICE is a device string:
/dev/nullb0 or /dev/nvme0n1 (zoned block device), /dev/ng0n1 (NVMe passthrough),
emu:PATH?zone_size=64M&zones=N (emulated), null:?size=16G&zone_size=256M.`,
	})
	cmd.AddCommand(newZonesReportCmd())
	for _, a := range zoneActions {
		cmd.AddCommand(newZoneActionCmd(a))
	}
	return cmd
}

// zoneJSON is one zone in `zones report --json`, in bytes.
type zoneJSON struct {
	Zone  int    `json:"zone"`
	Start int64  `json:"start"`
	Len   int64  `json:"len"`
	Cap   int64  `json:"cap"`
	WP    int64  `json:"wp"`
	Type  string `json:"type"`
	Cond  string `json:"cond"`
}

func newZonesReportCmd() *cobra.Command {
	var asJSON, force bool
	cmd := &cobra.Command{
		Use:   "report DEVICE",
		Short: "List every zone: number, start, length, capacity, write pointer, type, condition",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := refuseStartOver(args[0], force, "give --force too, or drop format=1"); err != nil {
				return err
			}
			return runZonesReport(cmd.OutOrStdout(), args[0], asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	cmd.Flags().BoolVar(&force, "force", false, "let format=1 in an emu device string erase a device that holds data")
	return cmd
}

// withDevice opens device for one command and closes it after fn.
func withDevice(device string, fn func(d zns.Device) error) error {
	d, err := zns.Open(device, zns.Options{RingEntries: 8})
	if err != nil {
		return err
	}
	err = fn(d)
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

func runZonesReport(w io.Writer, device string, asJSON bool) (err error) {
	if zns.StartsOver(device) {
		// format=1 erases the device as it opens: claimed as format
		// claims it, or a report reset a served device's zones under
		// its daemon.
		d, release, cerr := openClaimed(device)
		if cerr != nil {
			return cerr
		}
		defer func() { release(err == nil) }()
		return printReport(w, device, d, asJSON)
	}
	return withDevice(device, func(d zns.Device) error { return printReport(w, device, d, asJSON) })
}

func printReport(w io.Writer, device string, d zns.Device, asJSON bool) error {
	g := d.Geometry()
	zones := make([]zns.Zone, g.Zones)
	n, err := d.Report(0, zones)
	if err != nil {
		return err
	}
	zones = zones[:n]
	if asJSON {
		out := struct {
			Device   string       `json:"device"`
			Geometry geometryJSON `json:"geometry"`
			Zones    []zoneJSON   `json:"zones"`
		}{Device: device, Geometry: geometryOutput(g), Zones: make([]zoneJSON, len(zones))}
		for i, z := range zones {
			out.Zones[i] = zoneJSON{i, z.Start, z.Len, z.Cap, z.WP, z.Type.String(), z.Cond.String()}
		}
		return writeJSON(w, out)
	}
	fmt.Fprintf(w, "%d zones of %s (capacity %s), block size %s, max open %s, max active %s, max append %s\n",
		g.Zones, human(g.ZoneSize), human(g.ZoneCap), human(int64(g.BlockSize)), limit(g.MaxOpen), limit(g.MaxActive), human(int64(g.MaxAppend)))
	tw := newTable(w)
	fmt.Fprintln(tw, "zone\tstart\tlen\tcap\twp\ttype\tcond\t")
	for i, z := range zones {
		fmt.Fprintf(tw, "%d\t%#x\t%#x\t%#x\t%#x\t%s\t%s\t\n", i, z.Start, z.Len, z.Cap, z.WP, z.Type, z.Cond)
	}
	return tw.Flush()
}

func limit(n int) string {
	if n == 0 {
		return "unlimited"
	}
	return fmt.Sprint(n)
}

// zoneAction is one management verb: what it does to one zone, and which
// zones --all applies it to (the ones where it is neither a no-op nor an
// error).
type zoneAction struct {
	verb, short string
	one         func(d zns.Device, zone int) error
	all         func(z zns.Zone) bool
}

var zoneActions = []zoneAction{
	{"reset", "Reset zones: empty, write pointer at the start", zns.Device.ResetZone,
		func(z zns.Zone) bool { return z.Cond != zns.CondEmpty }},
	{"open", "Open zones explicitly", zns.Device.OpenZone,
		func(z zns.Zone) bool { return z.Cond != zns.CondExpOpen && z.Cond != zns.CondFull }},
	{"close", "Close open zones", zns.Device.CloseZone,
		func(z zns.Zone) bool { return z.Cond.Open() }},
	{"finish", "Finish zones: full, write pointer at the capacity", zns.Device.FinishZone,
		func(z zns.Zone) bool { return z.Cond != zns.CondFull }},
}

func newZoneActionCmd(a zoneAction) *cobra.Command {
	var zone int
	var all, force bool
	cmd := &cobra.Command{
		Use:   a.verb + " DEVICE (--zone N | --all)",
		Short: a.short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("zone") == all {
				return usagef("zones %s: give exactly one of --zone N and --all", a.verb)
			}
			if err := refuseStartOver(args[0], force, "give --force too, or drop format=1"); err != nil {
				return err
			}
			return runZoneAction(cmd.OutOrStdout(), args[0], a, zone, all, force)
		},
	}
	countVar(cmd.Flags(), &zone, "zone", 0, "the zone number")
	cmd.Flags().BoolVar(&all, "all", false, "every sequential zone")
	forceHelp := "let format=1 in an emu device string erase a device that holds data"
	if a.verb == "reset" {
		forceHelp = "reset zones of a zonefold file system, erasing its files; " + forceHelp
	}
	cmd.Flags().BoolVar(&force, "force", false, forceHelp)
	return cmd
}

// runZoneAction claims the device as the daemon does: changing zones
// under a daemon, or under format or fsck, would corrupt what they write
// or make their report meaningless.
//
// A reset of a zone a zonefold file system uses erases its files, and is
// refused without force, as format refuses a device that holds data: a
// user who asks zonefold to empty zones of its own file system is more
// likely wrong about the device than set on erasing it
// (TestZonesResetOfAFileSystemNeedsForce).
func runZoneAction(w io.Writer, device string, a zoneAction, zone int, all, force bool) (err error) {
	d, release, err := openClaimed(device)
	if err != nil {
		return err
	}
	defer func() { release(err == nil) }()
	// A zone past the device is the flag's value wrong: it exited 1
	// with the device's "zns: zone 99 of 16: out of range".
	if g := d.Geometry(); !all && zone >= g.Zones {
		return usagef("--zone %d: the device has %d zones (0 to %d)", zone, g.Zones, g.Zones-1)
	}
	if a.verb == "reset" && !force {
		if sb, ok := engine.FileSystemOn(d); ok && (all || zone < sb.UsedZones) {
			what := fmt.Sprintf("zone %d", zone)
			if all {
				what = "every zone"
			}
			return fmt.Errorf("zones reset: %s holds a zonefold file system (uuid %s, zones 0-%d): resetting %s erases its files; give --force to reset anyway (format starts the device over)",
				device, sb.ID(), sb.UsedZones-1, what)
		}
	}
	return applyAction(w, d, a, zone, all)
}

func applyAction(w io.Writer, d zns.Device, a zoneAction, zone int, all bool) (err error) {
	targets := []int{zone}
	if all {
		if targets, err = allTargets(d, a); err != nil {
			return err
		}
	}
	for _, z := range targets {
		if err := a.one(d, z); err != nil {
			return err
		}
	}
	// An emulated device keeps its zone table only when flushed.
	if err := d.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "%s: %s\n", a.verb, output.Plural(len(targets), "zone"))
	return nil
}

// allTargets lists the zones --all applies to, refusing up front what the
// open limit would stop halfway, so that a refused request changes nothing.
func allTargets(d zns.Device, a zoneAction) ([]int, error) {
	g := d.Geometry()
	zones := make([]zns.Zone, g.Zones)
	n, err := d.Report(0, zones)
	if err != nil {
		return nil, err
	}
	var targets []int
	open, active := 0, 0
	for i, z := range zones[:n] {
		if z.Cond.Open() {
			open++
		}
		if z.Cond.Active() {
			active++
		}
		if z.Type != zns.TypeConventional && z.Cond != zns.CondReadOnly && z.Cond != zns.CondOffline && a.all(z) {
			targets = append(targets, i)
		}
	}
	if a.verb == "open" {
		newOpen, newActive := open, active
		for _, i := range targets {
			if !zones[i].Cond.Open() {
				newOpen++
			}
			if !zones[i].Cond.Active() {
				newActive++
			}
		}
		if g.MaxOpen > 0 && newOpen > g.MaxOpen {
			return nil, fmt.Errorf("zones open --all: %d zones would be open, the device allows %d: %w", newOpen, g.MaxOpen, zns.ErrTooManyOpen)
		}
		if g.MaxActive > 0 && newActive > g.MaxActive {
			return nil, fmt.Errorf("zones open --all: %d zones would be active, the device allows %d: %w", newActive, g.MaxActive, zns.ErrTooManyActive)
		}
	}
	return targets, nil
}
