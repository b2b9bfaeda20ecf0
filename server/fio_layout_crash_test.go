package server_test

import (
	"bytes"
	"context"
	"testing"
)

// TestFioLayoutAnewSurvivesKill9: a file fsynced before a fio job lays
// it out anew must still have its name after a kill -9 once fio has
// ended (old bytes, or the new file), never neither. The layout's
// remove is durable when answered; its create was deferred (durable
// from the next flush), and with fallocate=none/keep or create_fsync=0
// nothing flushed it: the name was gone after the crash (found in
// review, h38f).
func TestFioLayoutAnewSurvivesKill9(t *testing.T) {
	_, engine := fioEnv(t)
	cases := []struct {
		name string
		args []string
	}{
		{"write-fallocate-none", []string{"--rw=write", "--size=2m", "--fallocate=none"}},
		{"write-fallocate-keep", []string{"--rw=write", "--size=2m", "--fallocate=keep"}},
		{"write-default", []string{"--rw=write", "--size=2m"}},
		{"read-create_fsync0", []string{"--rw=read", "--size=2m", "--create_fsync=0"}},
		{"read", []string{"--rw=read", "--size=2m"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := newServe(t)
			ctx := context.Background()
			c := dialServe(t, d)
			old := bytes.Repeat([]byte{0xab}, 1<<20)
			h := writeFile(t, c, "f", 0, old, true)
			c.CloseFile(ctx, h)
			out, err := runFioWatched(t, d, append([]string{"--name=j", "--ioengine=external:" + engine,
				"--sock=" + d.socket, "--filename=f", "--bs=64k"}, tc.args...)...)
			checkFio(t, tc.name, out, err, false)
			st, err := c.Stat(ctx, "f")
			t.Logf("before kill -9: %+v %v", st, err)
			d, c = d.crashRestart(c)
			defer c.Close()
			st, err = c.Stat(ctx, "f")
			if err != nil {
				t.Errorf("after fio laid out f (fsynced before) and kill -9: stat f: %v: the old file is gone and the new one never became durable", err)
			} else {
				t.Logf("after kill -9: %+v", st)
			}
			d.stop()
		})
	}
}
