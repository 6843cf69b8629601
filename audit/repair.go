package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
)

// RepairedAction is the action of the record that says a file of the log
// was cut back to its last whole line: a torn tail found on Open, or what
// a failed write left. Its fields are file ("log" or "checkpoints"),
// bytes_dropped, dropped_sha256 (of the bytes cut off) and reason.
const RepairedAction = "audit.repaired"

// repair is a cut-back awaiting its RepairedAction record.
type repair struct {
	file    string // "log" or "checkpoints"
	dropped []byte
	reason  string
}

// entry returns the RepairedAction entry recording r.
func (r *repair) entry() Entry {
	sum := sha256.Sum256(r.dropped)
	return Entry{Action: RepairedAction, Target: "audit/" + r.file, Fields: map[string]string{
		"file":           r.file,
		"bytes_dropped":  strconv.Itoa(len(r.dropped)),
		"dropped_sha256": hex.EncodeToString(sum[:]),
		"reason":         r.reason,
	}}
}

// cutBack truncates f to size and syncs it, returning the bytes it cut
// off (nil if none).
func cutBack(f *os.File, size int64) ([]byte, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() <= size {
		return nil, nil
	}
	dropped := make([]byte, st.Size()-size)
	if _, err := f.ReadAt(dropped, size); err != nil {
		return nil, err
	}
	if err := f.Truncate(size); err != nil {
		return nil, err
	}
	if err := f.Sync(); err != nil {
		return nil, err
	}
	return dropped, nil
}

// wholeSize returns the size of f up to and including its last newline:
// the file without a torn last line. A torn line longer than MaxLine is
// not what a failed write leaves, so wholeSize returns errTorn for it.
func wholeSize(f *os.File) (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := st.Size()
	var last [1]byte
	if size == 0 {
		return 0, nil
	}
	if _, err := f.ReadAt(last[:], size-1); err != nil {
		return 0, err
	}
	if last[0] == '\n' { // whole: the usual case, one byte read
		return size, nil
	}
	start := max(0, size-(MaxLine+1))
	tail := make([]byte, size-start)
	if _, err := f.ReadAt(tail, start); err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(tail, '\n')
	switch {
	case i >= 0:
		return start + int64(i) + 1, nil
	case start == 0:
		return 0, nil
	}
	return 0, fmt.Errorf("%w, and its last %d bytes hold no newline", errTorn, len(tail))
}
