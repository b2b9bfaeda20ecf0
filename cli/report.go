package cli

import (
	"io"

	output "github.com/zonefold/zonefold/internal/report"
)

// The output conventions cli shares with bench (internal/report).
var (
	writeJSON = output.WriteJSON
	newTable  = output.NewTable
	// newLeftTable is a left-aligned one (ls -l, stat).
	newLeftTable = func(w io.Writer) *output.Table { return output.NewTableFlags(w, 0) }
	human        = output.Human
)
