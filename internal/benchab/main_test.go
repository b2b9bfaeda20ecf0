package main

import (
	"math"
	"testing"
)

func TestParseBenchFio(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want sample
		bad  bool
	}{
		{`{"in_process_mib_per_s": 100, "daemon_mib_per_s": 90, "ratio": 0.9}`, sample{100, 90}, false},
		{`{"in_process_mbps": 104.8576, "daemon_mbps": 52.4288}`, sample{100, 50}, false},
		{`{"ratio": 1}`, sample{}, true},
		{`not json`, sample{}, true},
	} {
		got, err := parseBenchFio([]byte(tc.in))
		if (err != nil) != tc.bad || math.Abs(got.inProcess-tc.want.inProcess) > 1e-9 || math.Abs(got.daemon-tc.want.daemon) > 1e-9 {
			t.Errorf("parseBenchFio(%s) = %+v, %v", tc.in, got, err)
		}
	}
}
