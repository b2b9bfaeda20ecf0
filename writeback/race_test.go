//go:build race

package writeback

const raceEnabled = true
