package cli

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
)

// TestH45lJSONSaysWhereTheCopyWasInterrupted: fsck --copy-to --json
// stopped by a signal printed its report with no word of the stop: the
// text report's "interrupted:" line had no JSON counterpart, so a script
// reading the JSON (exit 130) could not tell which file the copy stopped
// in and did not keep. It says so now (interrupted_in), and only then.
// (Real files in a real DIR; the signal is the context's cancel, as
// Main's loop does it.)
func TestH45lJSONSaysWhereTheCopyWasInterrupted(t *testing.T) {
	for _, stop := range []bool{true, false} {
		_, devName, e := copyToDevice(t)
		copyToWrite(t, e, "a", []byte("data of a"))
		copyToWrite(t, e, "b", []byte("data of b"))
		dev, root, dirs, dir := copyToOpen(t, e, devName)
		stopIn := ""
		if stop {
			stopIn = "b" // the signal, between a and b
		}
		out, err := copyStoppedIn(devName, dev, root, dirs, dir, stopIn, true)
		var j struct {
			Copied        int     `json:"copied"`
			InterruptedIn *string `json:"interrupted_in"`
		}
		if jerr := json.Unmarshal([]byte(out), &j); jerr != nil {
			t.Fatalf("stop %v: %v\n%s", stop, jerr, out)
		}
		switch {
		case stop && (!errors.Is(err, context.Canceled) || j.Copied != 1 || j.InterruptedIn == nil || *j.InterruptedIn != "b"):
			t.Errorf("copy interrupted before b, --json: err %v, report\n%s\nwant context.Canceled, copied 1, interrupted_in \"b\"", err, out)
		case !stop && (err != nil || j.Copied != 2 || j.InterruptedIn != nil):
			t.Errorf("copy not interrupted, --json: err %v, report\n%s\nwant no error, copied 2, no interrupted_in", err, out)
		}
		if stop {
			copyToCheck(t, dir, map[string][]byte{"a": []byte("data of a")})
		}
	}
}
