// Package report holds the output conventions every zonefold command
// shares, cli's and bench's alike:
//
//   - Sizes are binary and written with IEC units: 512 B, 4 KiB, 64 MiB,
//     1.5 GiB (Human). Flags and device strings read the same units
//     (zns.ParseSize: 64M, 64MiB, 1.5G).
//   - Rates are MiB/s (RateUnit, MiBps), never MB/s, so that a rate and
//     the sizes beside it use one unit.
//   - --json prints one indented JSON object with snake_case keys and
//     no HTML escaping (WriteJSON); durations are numbers with their unit
//     in the key (*_us, *_seconds).
//   - Tables are right-aligned (NewTable).
package report

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"
)

// WriteJSON prints v as one indented JSON object: what every command's
// --json gives machines. '&', '<' and '>' stay as they are (device
// strings hold '&').
func WriteJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// NewTable is the right-aligned table every command prints; rows end with
// a tab so that the last column aligns too. Flush it when done.
func NewTable(out io.Writer) *Table {
	return NewTableFlags(out, tabwriter.AlignRight)
}

// NewTableFlags is a table with tabwriter's flags (0: left-aligned).
func NewTableFlags(out io.Writer, flags uint) *Table {
	buf := bufio.NewWriterSize(out, 64<<10)
	return &Table{Writer: tabwriter.NewWriter(buf, 0, 0, 2, ' ', flags), buf: buf}
}

// Table is a tabwriter whose output reaches out in blocks: tabwriter
// writes each cell and each run of padding apart, 14 writes a row of
// `zones report`, and on stdout each one was a system call (55 s for a
// device of 2^20 zones).
type Table struct {
	*tabwriter.Writer
	buf *bufio.Writer
}

// Flush writes the table out.
func (t *Table) Flush() error {
	if err := t.Writer.Flush(); err != nil {
		return err
	}
	return t.buf.Flush()
}

// Micros is a duration in microseconds, for JSON fields named *_us.
func Micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// Plural is "1 thing", "n things": output says "GC's 1 stream", not
// "GC's 1 stream(s)".
func Plural[N ~int | ~int64](n N, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

var iecUnits = [...]string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}

// Human writes a byte count in binary units: exact when it is a whole
// number of the largest unit that fits (64 MiB), else with up to two
// decimals (1.5 KiB, 20.48 MiB): for amounts (a file's size in ls -l,
// what a copy wrote), read at a glance. A size the user gave and reads
// back (a bench's --bs 3000) is Given's.
func Human(n int64) string {
	if n < 0 {
		return "-" + humanU(uint64(-(n+1))+1) // -MinInt64 overflows an int64
	}
	return humanU(uint64(n))
}

func humanU(n uint64) string {
	if n < 1<<10 {
		return fmt.Sprintf("%d B", n)
	}
	i := unitIndex(n)
	shift := uint(10 * (i + 1))
	if n&(1<<shift-1) == 0 {
		return fmt.Sprintf("%d %s", n>>shift, iecUnits[i])
	}
	v := strconv.FormatFloat(float64(n)/float64(uint64(1)<<shift), 'f', 2, 64)
	v = strings.TrimRight(strings.TrimRight(v, "0"), ".")
	return v + " " + iecUnits[i]
}

// unitIndex is the index in iecUnits of the largest unit n holds at
// least one of (n ≥ 1 KiB).
func unitIndex(n uint64) int {
	i := 0
	for i+1 < len(iecUnits) && n>>(10*(i+2)) > 0 {
		i++
	}
	return i
}

// Given writes a size the user gave (a flag's value, read back in a
// heading or an error) as Human does where Human is exact, else as
// Exact does: --bs 3000 is "3000 B", not "2.93 KiB", and 6148 KiB not
// "6 MiB" — a size read back rounded is not the size given, nor one a
// user could give again.
func Given(n int64) string {
	u := uint64(n)
	if n < 0 {
		u = uint64(-(n + 1)) + 1
	}
	if u < 1<<10 {
		return Human(n)
	}
	i := unitIndex(u)
	// Human's two decimals are exact for multiples of a quarter of
	// its unit (1.25 KiB, 20.5 MiB) only.
	if u%(1<<(10*(i+1)-2)) == 0 {
		return Human(n)
	}
	return Exact(n)
}

// Exact writes a byte count in the largest binary unit of which it is a
// whole number (6148 KiB, 3000 B, 64 MiB): for a size the output sets
// against another, where Human's rounding (6 MiB for 6148 KiB) would
// make a size over a limit read as one within it.
func Exact(n int64) string {
	u := int64(1)
	i := -1
	for i+1 < len(iecUnits) && n != 0 && n%(u<<10) == 0 {
		u <<= 10
		i++
	}
	if i < 0 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%d %s", n/u, iecUnits[i])
}

// RateUnit is the unit of every rate zonefold prints.
const RateUnit = "MiB/s"

// MiBps is bytes over d in MiB/s; 0 for no time.
func MiBps(bytes int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(bytes) / (1 << 20) / d.Seconds()
}

// Median of xs (not reordered); 0 for none. Every benchmark's ratio is
// one of medians, so that a round the machine disturbed moves it least.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Spread of xs is max/min, printed beside every median: how far the
// rounds swung. 0 for none, or when the least is not positive.
func Spread(xs []float64) float64 {
	if len(xs) == 0 || slices.Min(xs) <= 0 {
		return 0
	}
	return slices.Max(xs) / slices.Min(xs)
}

// ProcessCPU is this process's user and system time so far (every
// thread): the CPU a benchmark's side costs, which a busy machine moves
// much less than wall time. getrusage(RUSAGE_SELF) does not fail; 0 if
// it ever did.
func ProcessCPU() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
