package zns

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/zonefold/zonefold/uring"
)

// mgmt is what the real-device backends share: geometry, ring, and the
// zone-management half of Device, as they differ only in how they report
// zones and run one request.
type mgmt struct {
	geo    Geometry
	ring   *uring.Ring
	report func(first int, out []Zone) error
	manage func(a zoneAction, zone int) error
}

// Geometry implements Device.
func (m *mgmt) Geometry() Geometry { return m.geo }

// Ring implements Device.
func (m *mgmt) Ring() *uring.Ring { return m.ring }

// zoneAt is zone's entry in a backend's zone table.
func zoneAt[T any](zones []T, zone int) (*T, error) {
	if zone < 0 || zone >= len(zones) {
		return nil, fmt.Errorf("zns: zone %d of %d: %w", zone, len(zones), ErrOutOfRange)
	}
	return &zones[zone], nil
}

// Report implements Device.
func (m *mgmt) Report(first int, zones []Zone) (int, error) {
	if first < 0 || first > m.geo.Zones {
		return 0, fmt.Errorf("zns: report from zone %d of %d: %w", first, m.geo.Zones, ErrOutOfRange)
	}
	n := min(len(zones), m.geo.Zones-first)
	if err := m.report(first, zones[:n]); err != nil {
		return 0, err
	}
	return n, nil
}

// ResetZone implements Device.
func (m *mgmt) ResetZone(zone int) error { return m.manage(actReset, zone) }

// OpenZone implements Device.
func (m *mgmt) OpenZone(zone int) error { return m.manage(actOpen, zone) }

// CloseZone implements Device.
func (m *mgmt) CloseZone(zone int) error { return m.manage(actClose, zone) }

// FinishZone implements Device.
func (m *mgmt) FinishZone(zone int) error { return m.manage(actFinish, zone) }

// ResetAll implements Device: every sequential zone that is not empty.
func (m *mgmt) ResetAll() error {
	zs := make([]Zone, m.geo.Zones)
	if err := m.report(0, zs); err != nil {
		return err
	}
	for i, z := range zs {
		if z.Type == TypeConventional || z.Cond == CondEmpty || z.Cond == CondReadOnly || z.Cond == CondOffline {
			continue
		}
		if err := m.manage(actReset, i); err != nil {
			return err
		}
	}
	return nil
}

// openFD opens a device node and hands the descriptor to a backend's
// constructor, closing it if that fails.
func openFD[T any](path string, flags int, opts Options, newDev func(fd int, path string, opts Options) (T, error)) (T, error) {
	var zero T
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC|flags, 0)
	if err != nil {
		return zero, fmt.Errorf("zns: open %s: %w", path, err)
	}
	d, err := newDev(fd, path, opts)
	if err != nil {
		unix.Close(fd)
		return zero, err
	}
	return d, nil
}
