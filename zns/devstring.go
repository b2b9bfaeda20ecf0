package zns

import (
	"errors"
	"io/fs"
	"os"
)

// The accepted forms of a device string (see spec.go), as a command line
// shows them to a user who typed one wrong.
const (
	EmuForm  = "emu:PATH?zone_size=SIZE&zones=N[&zone_cap=SIZE&max_open=N&max_active=N&block_size=SIZE&max_append=SIZE&conv=N&strict_open=1&format=1]"
	NullForm = "null:?size=SIZE&zone_size=SIZE[&zones=N&zone_cap=SIZE&max_open=N&max_active=N&block_size=SIZE&max_append=SIZE&conv=N&strict_open=1&zone_serial=1&completion_nsec=N]"
	PathForm = "/dev/nullb0, /dev/nvme0n1 (a zoned block device) or /dev/ng0n1 (NVMe passthrough)"
)

// DeviceStringError is a device string that is malformed (its syntax, a
// parameter's value) or whose parameters describe no device (zone_size
// not a multiple of the block size, conv leaving no sequential zone):
// wrong as typed, whatever is on the machine. Form is the accepted form
// of the backend it names, or of every backend when it names none.
type DeviceStringError struct {
	Device string
	Form   string
	Err    error
}

func (e *DeviceStringError) Error() string { return e.Err.Error() }
func (e *DeviceStringError) Unwrap() error { return e.Err }

// CheckDeviceString refuses a device string that Open would refuse as
// typed, opening and creating nothing: a *DeviceStringError. An emu
// string's geometry is checked where Open takes it from the string: with
// format=1, and for a PATH that does not exist yet when zone_size is
// given (an existing file's own table gives what the string leaves out). A well-formed string
// naming what cannot be opened (a missing /dev node, a directory) passes:
// that is the machine's state, for Open to report.
func CheckDeviceString(device string) error {
	sp, err := parseSpec(device)
	form := EmuForm + ", " + NullForm + " or " + PathForm
	switch sp.kind {
	case kindEmu:
		form = EmuForm
	case kindNull:
		form = NullForm
	case kindPath:
		form = PathForm
	}
	if err == nil {
		err = checkSpecGeometry(sp)
	}
	if err != nil {
		return &DeviceStringError{Device: device, Form: form, Err: err}
	}
	return nil
}

// checkSpecGeometry is softGeometry's verdict on sp where Open builds the
// device's geometry from it (openNull always; openEmu for a new device).
func checkSpecGeometry(sp spec) error {
	switch sp.kind {
	case kindNull:
	case kindEmu:
		if sp.format {
			break // a new device whatever the file holds
		}
		if _, err := os.Stat(sp.path); sp.zoneSize == 0 || !errors.Is(err, fs.ErrNotExist) {
			return nil
		}
	default:
		return nil
	}
	_, err := softGeometry(sp)
	return err
}
