package zns

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Options tune how a device is opened.
type Options struct {
	// RingEntries is the submission queue size of the device's ring
	// (default 256; twice that many operations can be in flight).
	RingEntries uint32
	// Existing opens only a device already made: an emu file that is
	// missing, or blank (its zone table reads as zeros), is refused
	// rather than given a new, empty zone table, which would write over
	// what a damaged one left (fsck, which never writes the device).
	Existing bool
	// ReplaceLostTable makes a new device of an emu file whose zone
	// table is lost though its zones hold data (ErrLostZoneTable),
	// which Open otherwise refuses: `zonefold format --force`, which
	// erases the device anyway.
	ReplaceLostTable bool
	// InferLostTable opens an emu file whose zone table is lost though
	// its zones hold data (ErrLostZoneTable) with a table inferred from
	// the data, in memory only, every sequential zone read-only (see
	// Emu.inferZones, TableInferrer): a read-only salvage (`zonefold
	// fsck --copy-to`), which checks what it reads. Nothing is written
	// to the file.
	InferLostTable bool
}

// Open opens the zoned device named by a device string (see spec.go):
//
//	emu:PATH?zone_size=64M&zones=N[&zone_cap=..&max_open=..&max_active=..&block_size=..&max_append=..&conv=N&strict_open=1&format=1]
//	null:?size=16G&zone_size=256M[&zones=N&zone_cap=..&max_open=..&max_active=..&block_size=..&max_append=..&conv=N&strict_open=1]
//	/dev/nullb0, /dev/nvme0n1   a Linux zoned block device
//	/dev/ng0n1                  an NVMe namespace through passthrough
//
// Each device owns its ring. The concrete types are *Emu, *Null, *Block
// and *Passthrough; tests reach Emu's fault injection by type assertion.
func Open(device string, opts Options) (Device, error) {
	sp, err := parseSpec(device)
	if err != nil {
		return nil, err
	}
	switch sp.kind {
	case kindEmu:
		return asDevice(openEmu(sp, opts))
	case kindNull:
		return asDevice(openNull(sp, opts))
	}
	st, err := os.Stat(sp.path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("zns: no such device %s: %w", sp.path, err)
		}
		return nil, fmt.Errorf("zns: %w", err)
	}
	switch m := st.Mode(); {
	case m&os.ModeDevice != 0 && m&os.ModeCharDevice == 0:
		// O_DIRECT: zone writes must reach the device in submission order,
		// not through the page cache.
		return asDevice(openFD(sp.path, unix.O_DIRECT, opts, newBlock))
	case m&os.ModeCharDevice != 0:
		return asDevice(openFD(sp.path, 0, opts, newPassthrough))
	}
	return nil, fmt.Errorf("zns: %s is not a device (for an emulated zoned device on a file use emu:%s?zone_size=..&zones=..): %w", sp.path, sp.path, ErrNotZoned)
}

// asDevice returns a backend as a Device, and a nil Device (not a typed nil
// pointer) with an error.
func asDevice[T Device](d T, err error) (Device, error) {
	if err != nil {
		return nil, err
	}
	return d, nil
}
