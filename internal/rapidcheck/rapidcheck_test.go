package rapidcheck

import (
	"flag"
	"testing"

	"pgregory.net/rapid"
)

func TestUniformInRange(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 1<<16).Draw(t, "n")
		if v := Uniform(t, n); v < 0 || v >= n {
			t.Fatalf("Uniform(%d) = %d", n, v)
		}
	})
}

// TestUniformMix: 4000 draws in [0, 5) come out about even (rapid's own
// IntRange(0, 4) favours 0); the bounds, +-30%, are some 7 standard
// deviations wide, so a fair draw misses them with negligible odds.
func TestUniformMix(t *testing.T) {
	var counts [5]int
	const draws = 4000
	i := 0
	rapid.Check(t, func(rt *rapid.T) {
		if i++; i > 1 {
			return
		}
		for range draws {
			counts[Uniform(rt, 5)]++
		}
	})
	t.Logf("counts %v", counts)
	for v, c := range counts {
		if c < draws/5*7/10 || c > draws/5*13/10 {
			t.Errorf("value %d drawn %d times of %d, want about %d: %v", v, c, draws, draws/5, counts)
		}
	}
}

func TestChecksSetsAndRestores(t *testing.T) {
	f := flag.Lookup("rapid.checks")
	before := f.Value.String()
	t.Run("inner", func(t *testing.T) {
		Checks(t, 7)
		if got := f.Value.String(); got != "7" && got != before {
			t.Errorf("-rapid.checks = %s, want 7", got)
		}
	})
	if got := f.Value.String(); got != before {
		t.Errorf("-rapid.checks = %s after the test, want %s back", got, before)
	}
}
