package berth

import (
	"crypto/rand"
	"encoding/binary"
	"strings"
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

// ParseCursor decodes the cursor query parameter of a paged listing (GET
// /api/v1/jobs, the dashboard's job list): the next_cursor of an earlier
// page, which is the id the next page starts after. It returns that id, or
// "" for an empty cursor (the first page). Anything but an id of the shape
// IDGen makes is an ECodeInvalid *Error naming the field "cursor": left
// unchecked it would be compared with ids as a string and answer some other
// page, usually the first.
func ParseCursor(cursor string) (string, error) {
	if cursor != "" && !validID(cursor) {
		return "", Invalidf("cursor", "not a cursor this server issued: give the next_cursor of the page before, or none for the first page")
	}
	return cursor, nil
}

// validID reports whether s has the shape of the ids IDGen makes: 26
// upper-case Crockford base32 digits whose 48-bit time leaves the top two
// bits zero.
func validID(s string) bool {
	if len(s) != 26 || s[0] > '7' {
		return false
	}
	for i := range len(s) {
		if strings.IndexByte(crockford, s[i]) < 0 {
			return false
		}
	}
	return true
}
