// Command zonefold is a userspace engine for zoned storage: it serves files
// from a zoned device through io_uring, a large-folio write-back cache and
// per-file zone placement, and benchmarks what zone GC costs.
package main

import (
	"os"

	"github.com/zonefold/zonefold/cli"
)

func main() {
	cli.Exit(os.Args[1:])
}
