package engine

import (
	"fmt"
	"sync/atomic"
)

// WriteLife is how long a file's data is expected to live, the way Linux's
// F_SET_RW_HINT says it for an inode: a client that knows (a log-structured
// store knows its WAL dies soon and its bottom level lives long) tells the
// engine, and placement keeps data of one class together, so that the
// zones it fills die together: under mru a hinted file needing a zone
// starts in a finished file's tail of its class before a fresh zone;
// under hinted every file of a class appends to the class's one stream.
// The hint is a placement input only: it is kept in memory, never on the
// device, and a file without one is placed as under mru without hints.
type WriteLife uint8

// Write-life classes, from Linux's RWH_WRITE_LIFE_*.
const (
	LifeNotSet  WriteLife = iota // no hint: placed by its own MRU zone
	LifeNone                     // hinted as having no particular lifetime
	LifeShort                    // e.g. a write-ahead log
	LifeMedium                   // e.g. young sorted runs
	LifeLong                     // e.g. middle levels
	LifeExtreme                  // e.g. the bottom level
	numLives
)

var lifeNames = [numLives]string{"not-set", "none", "short", "medium", "long", "extreme"}

func (l WriteLife) String() string {
	if l < numLives {
		return lifeNames[l]
	}
	return fmt.Sprintf("life(%d)", int(l))
}

// ParseWriteLife reads a class name as String prints it.
func ParseWriteLife(s string) (WriteLife, error) {
	for l, name := range lifeNames {
		if name == s {
			return WriteLife(l), nil
		}
	}
	return 0, fmt.Errorf("engine: unknown write-life class %q (want one of %v)", s, lifeNames)
}

// SetWriteLife sets the file's write-life hint; it applies to data written
// back from then on. Out-of-range classes are refused.
func (h *File) SetWriteLife(l WriteLife) error {
	if l >= numLives {
		return fmt.Errorf("engine: file %q: write-life class %d out of range", h.Name(), l)
	}
	h.f.life.Store(uint32(l))
	return nil
}

// WriteLife is the file's write-life hint.
func (h *File) WriteLife() WriteLife { return WriteLife(h.f.life.Load()) }

// lifeStreams are the hinted policy's per-class zone pointers: every
// hinted file of one class appends where its class appended last, as the
// files of one stream under none do, while unhinted files keep their own
// MRU zone.
type lifeStreams [numLives]atomic.Pointer[zone]

// stream is the zone pointer a client append of f reserves through: the
// file's own MRU zone, or under the hinted policy its class's stream.
func (p *placer) stream(f *file) *atomic.Pointer[zone] {
	if p.policy == PolicyHinted {
		if l := WriteLife(f.life.Load()); l != LifeNotSet && l < numLives {
			return &p.lives[l]
		}
	}
	return &f.mru
}
