package cli

import (
	"strings"
	"testing"
)

// TestBenchGCPlacementsHelpIsTrue: bench gc --help said "--placements
// ... (default [mru,none,round-robin])" and "--gc-policies ... (default
// [greedy])", yet a run given neither compares --configs' default
// (mru/greedy, none/greedy, mru/cost-benefit); those lists are only what
// one of the two flags combines with when given alone. The help says
// so now, and --configs given beside them, which they silently replaced,
// is a usage error.
func TestBenchGCPlacementsHelpIsTrue(t *testing.T) {
	help := strings.Join(strings.Fields(runBinary(t, "bench", "gc", "--help").stdout), " ")
	for _, want := range []string{
		"--placements strings placements to combine with --gc-policies, every pair compared instead of --configs' (with --gc-policies alone: mru, none, round-robin)",
		"--gc-policies strings GC policies to combine with --placements, every pair compared instead of --configs' (with --placements alone: greedy)",
	} {
		if !strings.Contains(help, want) {
			t.Errorf("bench gc --help lacks %q", want)
		}
	}
	for _, bad := range []string{"(default [mru,none,round-robin])", "(default [greedy])"} {
		if strings.Contains(help, bad) {
			t.Errorf("bench gc --help still says %q of a run given neither flag", bad)
		}
	}
	for _, args := range [][]string{
		{"bench", "gc", "--configs", "mru/greedy", "--placements", "none"},
		{"bench", "gc", "--configs", "mru/greedy", "--gc-policies", "cost-benefit"},
	} {
		// --out: a run that is not refused writes no folder here.
		args = append(args, "--workload", "seed", "--out", t.TempDir())
		r := runBinary(t, args...)
		if r.status != 2 || !strings.Contains(r.stderr, "--configs and --placements/--gc-policies both name the configurations") {
			t.Errorf("%v: exit %d, stderr %q; want 2 and both flags named", args, r.status, r.stderr)
		}
	}
}
