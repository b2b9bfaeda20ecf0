// Package report holds the output conventions every zonefold command
// shares, cli's and bench's alike: one indented JSON object for --json,
// right-aligned tables, byte counts in binary units.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// WriteJSON prints v as one indented JSON object: what every command's
// --json gives machines.
func WriteJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// NewTable is the right-aligned table every command prints; rows end with
// a tab so that the last column aligns too. Flush it when done.
func NewTable(out io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
}

// Micros is a duration in microseconds, for JSON fields named *_us.
func Micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// Human prints a byte count in binary units.
func Human(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dG", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dM", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dK", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}
