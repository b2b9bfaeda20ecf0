package server_test

// h25a: kill -9 cycles of the real daemon under concurrent fsyncing
// clients, renames over files another handle holds open, removes of
// open files, and kills during the next daemon's recovery itself. After
// each cycle fsck must say clean and every acknowledged byte must read
// back. The daemon, the clients and the model of what they had
// acknowledged are kill9_helpers_test.go's.

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"
)

// TestH25aKill9Checkpoints is TestH25aKill9Cycles with two more clients
// churning small files (create, write, fsync, remove), so that the
// metadata log fills and checkpoints switch halves while the daemon is
// killed.
func TestH25aKill9Checkpoints(t *testing.T) {
	for _, seed := range h25aSeeds(7) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { h25aRunChurn(t, seed, 4, 2) })
	}
}

func TestH25aKill9Cycles(t *testing.T) {
	for _, seed := range h25aSeeds(1, 2) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { h25aRun(t, seed, 4) })
	}
}

// h25aSeeds is def, or ZONEFOLD_H25A_SEEDS=FIRST-LAST for a longer hunt.
func h25aSeeds(def ...uint64) []uint64 {
	var a, b uint64
	if _, err := fmt.Sscanf(os.Getenv("ZONEFOLD_H25A_SEEDS"), "%d-%d", &a, &b); err != nil {
		return def
	}
	var seeds []uint64
	for s := a; s <= b; s++ {
		seeds = append(seeds, s)
	}
	return seeds
}

func h25aRun(t *testing.T, seed uint64, cycles int) { h25aRunChurn(t, seed, cycles, 0) }

func h25aRunChurn(t *testing.T, seed uint64, cycles, churners int) {
	rng := rand.New(rand.NewPCG(seed, 25))
	dev, sock := kill9Device(t)
	m := newKill9Model()
	p := serveKill9(t, dev, sock)
	m.create(t, sock)
	recoveryKills := 0
	defer func() { t.Logf("seed %d: %d kills before the daemon served", seed, recoveryKills) }()
	for cycle := range cycles {
		cl := m.startClients(sock, rng, cycle, churners)
		run := 100 + rng.IntN(400)
		if churners > 0 {
			run = 300 + rng.IntN(1200) // long enough to fill the metadata log
		}
		time.Sleep(time.Duration(run) * time.Millisecond)
		if st, ok := kill9Stats(sock); ok {
			t.Logf("cycle %d before kill: checkpoints %d, flushes %d, gc resets %d, gc written %d, meta %d creates %d", cycle,
				st.Checkpoints, st.Flushes, st.GCResets, st.GCWritten, st.DevMeta, st.DevMetaCreates)
		}
		p.kill()
		cl.stop()
		// Kill the next daemons during their start (recovery) too.
		recoveryKills += killDuringRecovery(t, dev, sock, rng, 1+rng.IntN(3))
		fsckClean(t, dev, fmt.Sprintf("after cycle %d", cycle))
		p = serveKill9(t, dev, sock)
		m.check(t, sock, cycle)
	}
	p.interrupt()
	fsckClean(t, dev, "after a clean stop")
}
