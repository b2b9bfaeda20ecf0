package zns

import (
	"fmt"
	"syscall"

	"github.com/zonefold/zonefold/uring"
)

// CompletionErr turns the Result of a Write or Read into an error, or nil.
// Real devices report zone-resource refusals asynchronously as errnos (the
// kernel's BLK_STS_ZONE_OPEN_RESOURCE and BLK_STS_ZONE_ACTIVE_RESOURCE);
// those come back wrapping ErrTooManyOpen or ErrTooManyActive as well as
// the errno, so callers can use errors.Is with the zone errors on every
// backend.
func CompletionErr(op string, res uring.Result) error {
	err := res.Err(op)
	if err == nil {
		return nil
	}
	if typed := errnoZoneErr(syscall.Errno(-res.Res)); typed != nil {
		return fmt.Errorf("%w: %w", typed, err)
	}
	return err
}

// errnoZoneErr is the zone error an errno from a zoned device stands for.
func errnoZoneErr(e syscall.Errno) error {
	switch e {
	case syscall.ETOOMANYREFS:
		return ErrTooManyOpen
	case syscall.EOVERFLOW:
		return ErrTooManyActive
	}
	return nil
}
