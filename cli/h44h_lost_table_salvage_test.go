package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fsck --copy-to salvages an emu device whose zone table is lost (both
// header slots zeros, its zones holding a file system), which every
// other command refuses: it infers the table from the data, in memory,
// copies every file byte for byte, says first that the table was
// inferred, exits 1 (the device is damaged) and leaves the file as it
// was. Plain fsck refuses it and points at --copy-to.
func TestLostZoneTableFsckCopyTo(t *testing.T) {
	want := bytes.Repeat([]byte("lost table"), 3000) // lostTableDevice's file f
	for _, asJSON := range []bool{false, true} {
		name := "text"
		if asJSON {
			name = "json"
		}
		t.Run(name, func(t *testing.T) {
			path, devName := lostTableDevice(t)
			before, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			code, out := copyToRun("fsck", devName)
			if code != exitNotChecked || !strings.Contains(out, "its zone table is lost") || !strings.Contains(out, "`zonefold fsck DEVICE --copy-to DIR` copies its files off") {
				t.Errorf("plain fsck: exit %d, want %d and a refusal naming --copy-to:\n%s", code, exitNotChecked, out)
			}
			dir := filepath.Join(t.TempDir(), "copy")
			args := []string{"fsck", devName, "--copy-to", dir}
			if asJSON {
				args = append(args, "--json")
			}
			code, out = copyToRun(args...)
			if code != exitDamaged {
				t.Errorf("%q: exit %d, want %d (the device is damaged, its file copied whole)\n%s", args, code, exitDamaged, out)
			}
			if !strings.Contains(out, "zone table is lost") || !strings.Contains(out, "inferred each zone's write pointer") {
				t.Errorf("%q: the report does not say the zone table was inferred:\n%s", args, out)
			}
			if !asJSON && (!strings.Contains(out, "DAMAGE: the device's zone table is lost") || !strings.Contains(out, "copied 1 file (")) {
				t.Errorf("%q: report:\n%s", args, out)
			}
			got, err := os.ReadFile(filepath.Join(dir, "f"))
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("%q: copy of f: %d bytes, err %v; want its %d bytes", args, len(got), err, len(want))
			}
			after, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(after, before) {
				t.Errorf("%q wrote the device", args)
			}
		})
	}
}
