package engine

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/zonefold/zonefold/uring"
	"github.com/zonefold/zonefold/zns"
)

// tableInferred reports whether dev's zone table was inferred from its
// data (zns.TableInferrer: an emu file whose table was lost, opened for
// a salvage).
func tableInferred(dev zns.Device) bool {
	t, ok := dev.(zns.TableInferrer)
	return ok && t.InferredZoneTable()
}

// wholePastInferredWP reports whether the record at off of data zone z,
// whose header h is whole but whose data runs past the zone's write
// pointer, is whole all the same: on a device whose zone table was
// inferred, that write pointer is only where the file's data ends
// (zns.Emu.inferZones), and a record whose last blocks are zeros that
// became holes (a copy made with cp --sparse=always, rsync -S, a file
// system that stores zero blocks as holes) ends past it. Its bytes
// there read as zeros, which is what the file holds; it is whole if it
// fits in the zone and every block passes its checksum. Anywhere else a
// record past the write pointer is torn. (The metadata log's records,
// whose last block can be zeros too: halfEnd and scanMetaHalf.)
func (e *Engine) wholePastInferredWP(z *zone, rz zns.Zone, off int64, h *RecordHeader, buf *scanBuf, w *uring.Waiter) (bool, error) {
	if !tableInferred(e.dev) || h.Kind == KindPad || off+BlockSize+int64(h.DataLen) > z.cap ||
		int64(len(buf.mem)) < int64(h.DataLen) {
		return false, nil
	}
	data := buf.mem[:h.DataLen]
	if err := e.readDev(rz.Start+off+BlockSize, data, w); err != nil {
		if errors.Is(err, syscall.EIO) {
			return false, nil
		}
		return false, fmt.Errorf("engine: recover: read zone %d at %d: %w", z.idx, off, err)
	}
	return badBlock(data, h.Sums) < 0, nil
}
