package cli

import (
	"encoding/json"
	"io"
	"text/tabwriter"
	"time"
)

// writeJSON prints v as one indented JSON object: what every command's
// --json gives machines.
func writeJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// newTable is the right-aligned table every command prints; rows end with
// a tab so that the last column aligns too. Flush it when done.
func newTable(out io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
}

// micros is a duration in microseconds, for JSON fields named *_us.
func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
