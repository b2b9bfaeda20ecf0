package zns

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/big"
	"os"
	"strconv"
	"strings"
)

// Device strings name a backend and its parameters:
//
//	emu:PATH?zone_size=64M&zones=N[&zone_cap=..&max_open=..&max_active=..&block_size=4096&max_append=..&conv=N&strict_open=1&format=1]
//	null:?size=16G&zone_size=256M[&zone_cap=..&max_open=..&max_active=..&block_size=..&max_append=..&conv=N&strict_open=1&zone_serial=1&completion_nsec=N]
//	/dev/nullb0, /dev/nvme0n1   Linux zoned block device
//	/dev/ng0n1                  NVMe passthrough (generic character device)
//
// Sizes (zone_size, zone_cap, size, block_size, max_append) take an
// optional binary suffix: K, M, G, T (also KiB, MiB, ...; see ParseSize).
// Counts (zones, max_open, max_active, conv, completion_nsec) are whole
// numbers.

// Kinds of device string.
const (
	kindEmu  = "emu"
	kindNull = "null"
	kindPath = "path" // a real device node; the backend depends on what it is
)

// spec is a parsed device string. Zero means "not given".
type spec struct {
	kind       string
	path       string
	zoneSize   int64
	zoneCap    int64
	size       int64
	zones      int
	maxOpen    int
	maxActive  int
	blockSize  int
	maxAppend  int
	conv       int
	strictOpen bool
	format     bool
	// zoneSerial (null only): each sequential zone takes one write at a
	// time, as a zoned block device does (see Null).
	zoneSerial bool
	// completionNsec (null only): every data operation completes this
	// many nanoseconds after submission, as null_blk's completion_nsec
	// (see Null); 0: at once.
	completionNsec int
}

// params each backend accepts.
var specParams = map[string][]string{
	kindEmu:  {"zone_size", "zones", "zone_cap", "max_open", "max_active", "block_size", "max_append", "conv", "strict_open", "format"},
	kindNull: {"size", "zone_size", "zones", "zone_cap", "max_open", "max_active", "block_size", "max_append", "conv", "strict_open", "zone_serial", "completion_nsec"},
}

// parseSpec parses a device string. It checks syntax and ranges only; the
// backend checks that the geometry is consistent.
func parseSpec(s string) (spec, error) {
	var sp spec
	if s == "" {
		return sp, fmt.Errorf("zns: empty device string (want /dev/..., emu:PATH?zone_size=..&zones=.. or null:?size=..&zone_size=..)")
	}
	rest, query, hasQuery := strings.Cut(s, "?")
	switch {
	case strings.HasPrefix(rest, "emu:"):
		sp.kind, sp.path = kindEmu, strings.TrimPrefix(rest, "emu:")
		if sp.path == "" {
			return sp, fmt.Errorf("zns: device %q: emu needs a file or device path (emu:PATH?zone_size=..&zones=..)", s)
		}
	case strings.HasPrefix(rest, "null:"):
		sp.kind = kindNull
		if p := strings.TrimPrefix(rest, "null:"); p != "" {
			return sp, fmt.Errorf("zns: device %q: null takes no path (null:?size=..&zone_size=..)", s)
		}
	default:
		if hasQuery {
			return sp, fmt.Errorf("zns: device %q: parameters are only for emu: and null: devices", s)
		}
		if i := strings.Index(rest, ":"); i > 0 && !strings.Contains(rest[:i], "/") {
			return sp, fmt.Errorf("zns: device %q: unknown backend %q (want emu:, null: or a /dev path)", s, rest[:i])
		}
		sp.kind, sp.path = kindPath, rest
		return sp, nil
	}
	if !hasQuery || query == "" {
		return sp, nil
	}
	allowed := specParams[sp.kind]
	seen := map[string]bool{}
	for _, kv := range strings.Split(query, "&") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return sp, fmt.Errorf("zns: device %q: parameter %q is not key=value", s, kv)
		}
		if !contains(allowed, k) {
			return sp, fmt.Errorf("zns: device %q: unknown parameter %q for %s (known: %s)", s, k, sp.kind, strings.Join(allowed, ", "))
		}
		if seen[k] {
			return sp, fmt.Errorf("zns: device %q: parameter %q given twice", s, k)
		}
		seen[k] = true
		if err := sp.set(k, v); err != nil {
			return sp, fmt.Errorf("zns: device %q: %s: %w", s, k, err)
		}
	}
	return sp, nil
}

// StartsOver says whether opening device erases what it holds: an emu
// device string with format=1, which makes a blank device of the file
// whatever is on it, naming a file that holds something. An absent or
// empty regular file holds nothing to erase (format=1 there only creates
// a device); anything else that is not a regular file (a block device's
// node, whose size stat does not give) is taken to hold data. A command
// that otherwise only reads a device (zones report) claims it first when
// this is true, as format does.
func StartsOver(device string) bool {
	sp, err := parseSpec(device)
	if err != nil || sp.kind != kindEmu || !sp.format {
		return false
	}
	fi, err := os.Stat(sp.path)
	if errors.Is(err, fs.ErrNotExist) {
		return false
	}
	return err != nil || !fi.Mode().IsRegular() || fi.Size() > 0
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (sp *spec) set(k, v string) error {
	switch k {
	case "strict_open", "format", "zone_serial":
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("want 0 or 1, got %q", v)
		}
		switch k {
		case "format":
			sp.format = b
		case "zone_serial":
			sp.zoneSerial = b
		default:
			sp.strictOpen = b
		}
		return nil
	case "zone_size", "zone_cap", "size", "block_size", "max_append":
		n, err := ParseSize(v)
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("must be positive")
		}
		switch k {
		case "zone_size":
			sp.zoneSize = n
		case "zone_cap":
			sp.zoneCap = n
		case "size":
			sp.size = n
		case "block_size", "max_append":
			if n > math.MaxInt32 {
				return fmt.Errorf("%d bytes is too large", n)
			}
			if k == "block_size" {
				sp.blockSize = int(n)
			} else {
				sp.maxAppend = int(n)
			}
		}
		return nil
	}
	n, err := ParseCount(v)
	if err != nil {
		return err
	}
	switch k {
	case "zones":
		if n == 0 {
			return fmt.Errorf("must be positive")
		}
		if n > MaxSoftZones {
			return fmt.Errorf("%d zones: an emulated device has at most %d", n, MaxSoftZones)
		}
		sp.zones = n
	case "max_open":
		sp.maxOpen = n
	case "max_active":
		sp.maxActive = n
	case "conv":
		sp.conv = n
	case "completion_nsec":
		sp.completionNsec = n
	}
	return nil
}

// MaxSoftZones bounds the zones of an emulated or null device, so that
// its per-zone tables (the device's, the emu header, the engine's) are
// bounded before anything is allocated: a few hundred bytes per zone.
const MaxSoftZones = 1 << 20

// ParseCount parses a count: a whole decimal number, at most MaxInt32.
func ParseCount(v string) (int, error) {
	n, err := strconv.ParseUint(v, 10, 31)
	if err != nil || !isDigits(v) {
		if errors.Is(err, strconv.ErrRange) {
			return 0, fmt.Errorf("count %q is too large (at most %d)", v, math.MaxInt32)
		}
		return 0, fmt.Errorf("bad count %q (want a whole number: 0, 1, 2, ...)", v)
	}
	return int(n), nil
}

func isDigits(v string) bool {
	for _, c := range v {
		if c < '0' || c > '9' {
			return false
		}
	}
	return v != ""
}

// sizeShifts are the binary suffixes a size may carry, upper-cased: K is
// KiB, as in fio, dd and the kernel's own parameters.
var sizeShifts = map[string]uint{"": 0, "B": 0,
	"K": 10, "KB": 10, "KIB": 10, "M": 20, "MB": 20, "MIB": 20,
	"G": 30, "GB": 30, "GIB": 30, "T": 40, "TB": 40, "TIB": 40,
	"P": 50, "PB": 50, "PIB": 50, "E": 60, "EB": 60, "EIB": 60}

// ParseSize parses a byte count: a decimal number, possibly with a
// fraction, and an optional binary suffix (K, M, G, T, P, E; also KiB,
// KB, ... all powers of 1024), e.g. 4096, 64K, 1.5M, 2GiB. It must come to
// a whole number of bytes that fits in an int64; signs, exponents, nan and
// inf are refused.
func ParseSize(v string) (int64, error) {
	i := 0
	for i < len(v) && (v[i] >= '0' && v[i] <= '9' || v[i] == '.') {
		i++
	}
	num, suffix := v[:i], strings.ToUpper(v[i:])
	shift, ok := sizeShifts[suffix]
	intPart, frac, _ := strings.Cut(num, ".")
	if !ok || !isDigits(intPart) || strings.Contains(frac, ".") || (frac != "" && !isDigits(frac)) ||
		(frac == "" && strings.HasSuffix(num, ".")) {
		return 0, fmt.Errorf("bad size %q (want a number of bytes with an optional K, M, G or T suffix: 4096, 64K, 1.5M, 2G)", v)
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, fmt.Errorf("bad size %q", v)
	}
	r.Mul(r, new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), shift)))
	if !r.IsInt() {
		return 0, fmt.Errorf("size %q is not a whole number of bytes", v)
	}
	n := r.Num()
	if !n.IsInt64() {
		return 0, fmt.Errorf("size %q is too large (at most 8 EiB)", v)
	}
	return n.Int64(), nil
}
