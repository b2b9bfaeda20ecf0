//go:build race

package engine

// raceEnabled: the race detector slows the engine several times over.
const raceEnabled = true
