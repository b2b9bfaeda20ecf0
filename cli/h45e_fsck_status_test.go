package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zonefold/zonefold/engine"
)

// TestFsckExitStatuses: fsck --copy-to exited 1 both when the device had
// damage but every file came back whole and when a file was not copied
// or left a hole, so a script salvaging a device could not tell whether
// everything came back. Each status, from the built binary (the real
// process status) on real emu devices: 0 clean and all copied, 1 damage
// but all copied, 2 usage, 4 a file not copied (a flat-name clash) or a
// range not recovered (a block whose checksum fails), 8 not checked (a
// missing device, a DIR that is not empty).
func TestFsckExitStatuses(t *testing.T) {
	copyTo := func(t *testing.T, dev string) (result, string) {
		dir := filepath.Join(t.TempDir(), "copy")
		return runBinary(t, "fsck", dev, "--copy-to", dir), dir
	}
	wantStatus := func(t *testing.T, what string, r result, status int, says ...string) {
		t.Helper()
		if r.status != status {
			t.Errorf("%s: exit %d, want %d\nstdout %s\nstderr %s", what, r.status, status, r.stdout, r.stderr)
		}
		for _, s := range says {
			if !strings.Contains(r.stdout+r.stderr, s) {
				t.Errorf("%s: does not say %q\nstdout %s\nstderr %s", what, s, r.stdout, r.stderr)
			}
		}
	}
	t.Run("0_clean_all_copied", func(t *testing.T) {
		_, dev, e := copyToDevice(t)
		copyToWrite(t, e, "a", []byte("data of a"))
		copyToWrite(t, e, "d/b", []byte("data of d/b"))
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, "fsck", runBinary(t, "fsck", dev), exitOK, "clean")
		r, dir := copyTo(t, dev)
		wantStatus(t, "fsck --copy-to", r, exitOK, "clean", "copied 2 files")
		if r.stderr != "" {
			t.Errorf("fsck --copy-to of a clean device: stderr %q", r.stderr)
		}
		copyToCheck(t, dir, map[string][]byte{"a": []byte("data of a"), "d/b": []byte("data of d/b")})
	})
	t.Run("1_damage_all_copied", func(t *testing.T) {
		// A lost zone table: damage (the report's first DAMAGE),
		// but the table inferred from the data gives f back whole.
		_, dev := lostTableDevice(t)
		r, dir := copyTo(t, dev)
		wantStatus(t, "fsck --copy-to", r, exitDamaged, "DAMAGE: the device's zone table is lost", "copied 1 file (",
			": file system is damaged (1 problem); every file it recovered was copied whole to "+dir+"\n")
		if strings.Contains(r.stdout, "NOT ") {
			t.Errorf("fsck --copy-to exited %d but lists something not copied:\n%s", r.status, r.stdout)
		}
		copyToCheck(t, dir, map[string][]byte{"f": bytes.Repeat([]byte("lost table"), 3000)})
		checkErrorLine(t, []string{"fsck", dev, "--copy-to", dir}, r.stderr)
	})
	t.Run("2_usage", func(t *testing.T) {
		_, dev, e := copyToDevice(t)
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, "fsck --copy-to ''", runBinary(t, "fsck", dev, "--copy-to", ""), exitUsage, "--copy-to takes a directory")
		wantStatus(t, "fsck --no-such-flag", runBinary(t, "fsck", dev, "--no-such-flag"), exitUsage)
		wantStatus(t, "fsck", runBinary(t, "fsck"), exitUsage)
	})
	t.Run("4_flat_name_clash", func(t *testing.T) {
		// 'a' and 'a/b' both files: a directory cannot hold both;
		// no damage at all, yet not everything came back.
		_, dev, e := copyToDevice(t)
		copyToWrite(t, e, "a", []byte("data of a"))
		copyToWrite(t, e, "a/b", []byte("data of a/b"))
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, "fsck", runBinary(t, "fsck", dev), exitOK, "clean")
		r, dir := copyTo(t, dev)
		wantStatus(t, "fsck --copy-to", r, exitCopyIncomplete, "clean", `NOT COPIED: file "a/b"`,
			": copy incomplete: 0 ranges not recovered, 1 file not copied, 0 problems (see the report)\n")
		copyToCheck(t, dir, map[string][]byte{"a": []byte("data of a")})
	})
	t.Run("4_bad_checksum", func(t *testing.T) {
		path, dev, e := copyToDevice(t)
		data := bytes.Repeat([]byte("rotting."), 8<<10)
		copyToWrite(t, e, "f", data)
		copyToWrite(t, e, "g", []byte("data of g"))
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		// f's record starts the first data zone: its header, then
		// its data; damage its third block.
		g := zoneGeometry(t, dev)
		copyToPatch(t, dev, path, 2*g.ZoneSize+engine.BlockSize+2*engine.BlockSize+7, []byte("garbage"))
		wantStatus(t, "fsck", runBinary(t, "fsck", dev), exitDamaged, "DAMAGE:", "file system is damaged (1 problem)")
		r, dir := copyTo(t, dev)
		wantStatus(t, "fsck --copy-to", r, exitCopyIncomplete, `NOT RECOVERED: file "f": bytes 8192..12288`,
			": copy incomplete: 1 range not recovered, 0 files not copied, 1 problem (see the report)\n")
		want := append([]byte(nil), data...)
		clear(want[2*engine.BlockSize : 3*engine.BlockSize])
		copyToCheck(t, dir, map[string][]byte{"f": want, "g": []byte("data of g")})
	})
	t.Run("8_not_checked", func(t *testing.T) {
		missing := "emu:" + filepath.Join(t.TempDir(), "none", "dev") + "?zone_size=1M&zones=16"
		wantStatus(t, "fsck of a missing device", runBinary(t, "fsck", missing), exitNotChecked)
		dir := filepath.Join(t.TempDir(), "copy")
		wantStatus(t, "fsck --copy-to of a missing device", runBinary(t, "fsck", missing, "--copy-to", dir), exitNotChecked)
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("fsck --copy-to of a missing device left %s (%v)", dir, err)
		}
		_, dev, e := copyToDevice(t)
		copyToWrite(t, e, "a", []byte("data of a"))
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "there"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, "fsck --copy-to a DIR not empty", runBinary(t, "fsck", dev, "--copy-to", dir), exitNotChecked, "not empty")
	})
}
