package berth

import (
	"crypto/rand"
	"encoding/binary"
	"sync"
	"time"
)

const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// IDGen makes ULID-shaped identifiers: 26 Crockford base32 characters, a
// 48-bit millisecond timestamp followed by 80 bits that are random for the
// first id of each millisecond and incremented after that, so ids sort in
// creation order. It is safe for concurrent use.
type IDGen struct {
	mu     sync.Mutex
	lastMS uint64
	hi     uint16 // top 16 of the 80 entropy bits
	lo     uint64 // low 64
}

// New returns the next id for time now.
func (g *IDGen) New(now time.Time) string {
	ms := uint64(now.UnixMilli())
	g.mu.Lock()
	if ms <= g.lastMS {
		ms = g.lastMS
		g.lo++
		if g.lo == 0 {
			g.hi++
		}
	} else {
		var b [10]byte
		_, _ = rand.Read(b[:])
		g.lastMS = ms
		g.hi = binary.BigEndian.Uint16(b[:2]) & 0x7fff // leave room to increment
		g.lo = binary.BigEndian.Uint64(b[2:])
	}
	hi, lo := g.hi, g.lo
	g.mu.Unlock()

	var id [26]byte
	// 48-bit time in 10 characters (50 bits, top two zero).
	for i := 9; i >= 0; i-- {
		id[i] = crockford[ms&31]
		ms >>= 5
	}
	// 80-bit entropy in 16 characters.
	for i := 25; i >= 10; i-- {
		id[i] = crockford[lo&31]
		lo = lo>>5 | uint64(hi&31)<<59
		hi >>= 5
	}
	return string(id[:])
}
