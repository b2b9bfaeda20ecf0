package cli

import (
	"testing"
)

// TestH45dBenchRunRefusesWhatTheDeviceCannotHoldUpFront: a workload
// whose files hold more than the device's room for files (its data
// zones less GC's reserve: 12 MiB of 14 here) wrote until the device was
// full and exited 1 with the engine's admission internals (or, between
// the room and the data zones' capacity, was let through by a check
// against the capacity and failed the same way). It is a usage error
// (exit 2) before anything is written, saying what the workload needs,
// what the device holds and which flags to change, and the emu file the
// run created is gone. Workloads that overwrite what fits, and random
// writes whose draws land within the room though the files' size is
// beyond it, still run.
func TestH45dBenchRunRefusesWhatTheDeviceCannotHoldUpFront(t *testing.T) {
	benchRunRefusesAndRuns(t, []benchRefusal{
		// 12 MiB + 8 KiB: between the room and the 14 MiB of data
		// zones, which the former check let through.
		{[]string{"--files", "2", "--size", "6148K", "--bs", "4K"}, "2 files x 6148 KiB (12296 KiB) need more than the 12 MiB the device holds for files (14 MiB of data zones"},
		{[]string{"--preset", "4k-qd128"}, "1 file of 256 MiB, whose random writes land on more than 12 MiB of it, needs more than the 12 MiB"},
		{[]string{"--rw", "read", "--size", "13M"}, "1 file of 13 MiB needs"},
	}, [][]string{
		{"--size", "4M", "--loops", "4"},                     // 16 MiB written over 4 MiB held
		{"--rw", "randwrite", "--size", "16M", "--bs", "8K"}, // the draws hit ~63% of 16 MiB
	})
}
