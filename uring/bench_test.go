package uring

import "testing"

// BenchmarkNopQD128 compares plugged and unplugged rounds of 128 NOPs.
func BenchmarkNopQD128(b *testing.B) {
	for _, plugged := range []bool{true, false} {
		name := "unplugged"
		if plugged {
			name = "plugged"
		}
		b.Run(name, func(b *testing.B) {
			r, err := New(Options{Entries: 128})
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			var g Group
			b.ReportAllocs()
			for b.Loop() {
				if plugged {
					r.Plug()
				}
				g.Add(128)
				for range 128 {
					if err := r.Nop(&g); err != nil {
						b.Fatal(err)
					}
				}
				if plugged {
					if err := r.Unplug(); err != nil {
						b.Fatal(err)
					}
				}
				if _, err := r.WaitGroup(&g, "nop"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
