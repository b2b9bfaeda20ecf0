package cli

import output "github.com/zonefold/zonefold/internal/report"

// The output conventions cli shares with bench (internal/report).
var (
	writeJSON = output.WriteJSON
	newTable  = output.NewTable
	human     = output.Human
)
