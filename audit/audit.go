// Package audit keeps Berth's tamper-evident audit log: an append-only file
// of JSON records, one a line, each carrying the SHA-256 of the line before
// it, so that editing, deleting, inserting or reordering a line breaks the
// chain. A separate checkpoint file records the head of the chain every so
// often, which also catches a log cut short after a checkpoint and an edit
// to a checkpointed record at the end of the log. The files never keep a
// torn last line: a failed write is cut back, a torn tail found on Open is
// cut off, and each cut is recorded (RepairedAction).
//
// Log appends records durably; Verify checks a whole log offline; Read and
// Tail stream records out of a log for export and display. The package
// depends on the standard library only.
package audit

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// ZeroHash is the Prev of the first record of a log: 64 zeros.
const ZeroHash = "0000000000000000000000000000000000000000000000000000000000000000"

// MaxLine is the longest line, in bytes without its newline, that Append
// writes and Verify, Read and Tail accept.
const MaxLine = 1 << 20

// DefaultCheckpointEvery is the number of records between automatic
// checkpoints when Options.CheckpointEvery is not set.
const DefaultCheckpointEvery = 1000

// Entry is one event a caller appends: what happened (Action, such as
// "job.submitted"), who did it (Actor, the identity's name, and its Role),
// to what (Target, such as "job/01J…" or "worker/gpu-1"), and any details.
type Entry struct {
	Time   time.Time // zero means Options.Now()
	Action string    // required
	Actor  string
	Role   string
	Target string
	Fields map[string]string
}

// Record is one line of the log file. Prev is the lowercase hex SHA-256 of
// the exact bytes of the previous line without its newline, or ZeroHash for
// the first record; Seq starts at 1 and increases by 1.
type Record struct {
	Seq    uint64            `json:"seq"`
	Time   time.Time         `json:"time"`
	Action string            `json:"action"`
	Actor  string            `json:"actor,omitempty"`
	Role   string            `json:"role,omitempty"`
	Target string            `json:"target,omitempty"`
	Fields map[string]string `json:"fields,omitempty"`
	Prev   string            `json:"prev"`
}

// checkpoint is one line of the checkpoint file: the seq and line hash of
// a record.
type checkpoint struct {
	Seq  uint64    `json:"seq"`
	Hash string    `json:"hash"`
	Time time.Time `json:"time"`
	Sig  string    `json:"sig,omitempty"` // signature (see Options.Key)
}

// signCheckpoint returns the hex HMAC-SHA256, under key, of a checkpoint
// of the record with seq and line hash.
func signCheckpoint(key []byte, seq uint64, hash string) string {
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "berth audit checkpoint\n%d\n%s", seq, hash)
	return hex.EncodeToString(m.Sum(nil))
}

// Options configures a Log. The zero value is usable.
type Options struct {
	// CheckpointEvery is the number of records appended between automatic
	// checkpoints; 0 or less means DefaultCheckpointEvery.
	CheckpointEvery int
	// CheckpointPath is the checkpoint file; "" means the log's path plus
	// ".head".
	CheckpointPath string
	// Now is the clock for entries without a time and for checkpoints;
	// nil means time.Now.
	Now func() time.Time
	// Key, when set, signs each checkpoint (its sig: HMAC-SHA256 of its
	// seq and hash), so that only its holder can write one VerifyAgainst
	// accepts. The server uses auth.Keys.AuditKey.
	Key []byte
}

// ErrClosed is returned by the methods of a closed Log.
var ErrClosed = errors.New("audit: log is closed")

// Log appends records to one audit log file. Its methods are safe for
// concurrent use. Only one Log, in one process, may append to a file at a
// time.
type Log struct {
	path, cpPath string
	key          []byte
	every        int
	now          func() time.Time

	mu           sync.Mutex
	f, cp        *os.File
	size, cpSize int64    // of the files' whole lines: what a failed write is cut back to
	repairs      []repair // cut-backs whose records the next append writes first
	seq          uint64   // of the last record
	hash         string   // of the last record's line
	cpSeq        uint64   // of the last checkpoint
	err          error    // sticky: set when a failed write could not be cut back
	closed       bool
	buf          []byte // the encoding buffer, kept for the next append
}

// Open opens the audit log at path for appending, creating it (mode 0600,
// its directory 0700) if it does not exist, and continues the chain from
// its last line. It reads only the end of the file and of the checkpoint
// file. A torn last line (the file does not end in a newline: a crash or a
// full disk during a write) of either file is cut off, and the next append
// records the cut first, as an audit.repaired record (RepairedAction) with
// the bytes dropped. Open returns an error, and repairs nothing, when the
// log's last whole line is not a record, when the checkpoint file's is not
// a checkpoint, when a torn tail is longer than MaxLine, or when the last
// checkpoint names a record past the end of the log or hashes the last
// record differently; the error tells the user to run berth audit verify.
// Errors opening, reading or cutting back either file are returned
// wrapped.
func Open(path string, opt Options) (*Log, error) {
	l := &Log{path: path, cpPath: opt.CheckpointPath, key: opt.Key, every: opt.CheckpointEvery, now: opt.Now, hash: ZeroHash}
	if l.cpPath == "" {
		l.cpPath = path + ".head"
	}
	if l.every <= 0 {
		l.every = DefaultCheckpointEvery
	}
	if l.now == nil {
		l.now = time.Now
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("audit: open %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit: open %s: %w", path, err)
	}
	cp, err := os.OpenFile(l.cpPath, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("audit: open %s: %w", l.cpPath, err)
	}
	l.f, l.cp = f, cp
	if err := l.cutTornTails(); err != nil {
		f.Close()
		cp.Close()
		return nil, err
	}
	if err := l.resume(); err != nil {
		f.Close()
		cp.Close()
		return nil, err
	}
	return l, nil
}

// cutTornTails cuts each file back to its last whole line, noting the
// cuts for the next append to record, and sets the sizes.
func (l *Log) cutTornTails() error {
	for _, c := range []struct {
		f          *os.File
		path, name string
		size       *int64
	}{{l.f, l.path, "log", &l.size}, {l.cp, l.cpPath, "checkpoints", &l.cpSize}} {
		size, err := wholeSize(c.f)
		if err != nil {
			return fmt.Errorf("audit: open %s: %w; run `berth audit verify --file %s` to check it; nothing was repaired", c.path, err, l.path)
		}
		dropped, err := cutBack(c.f, size)
		if err != nil {
			return fmt.Errorf("audit: open %s: cut back its torn last line: %w", c.path, err)
		}
		if len(dropped) > 0 {
			l.repairs = append(l.repairs, repair{file: c.name, dropped: dropped, reason: "torn last line found on open"})
		}
		*c.size = size
	}
	return nil
}

// resume reads the last record and the last checkpoint.
func (l *Log) resume() error {
	verify := fmt.Sprintf("run `berth audit verify --file %s` to check it; nothing was repaired", l.path)
	lines, err := lastLines(l.f, 1)
	if err != nil {
		return fmt.Errorf("audit: open %s: %w; %s", l.path, err, verify)
	}
	if len(lines) == 1 {
		rec, err := parseRecord(lines[0])
		if err != nil {
			return fmt.Errorf("audit: open %s: the last line %w; %s", l.path, err, verify)
		}
		l.seq, l.hash = rec.Seq, lineHash(lines[0])
	}
	lines, err = lastLines(l.cp, 1)
	if err != nil {
		return fmt.Errorf("audit: open %s: %w; %s", l.cpPath, err, verify)
	}
	if len(lines) == 1 {
		c, err := parseCheckpoint(lines[0])
		if err != nil {
			return fmt.Errorf("audit: open %s: the last line %w; %s", l.cpPath, err, verify)
		}
		switch {
		case c.Seq > l.seq:
			return fmt.Errorf("audit: open %s: checkpoint says record %d exists; the log ends at record %d (truncated); %s", l.path, c.Seq, l.seq, verify)
		case c.Seq == l.seq && c.Hash != l.hash:
			return fmt.Errorf("audit: open %s: the last record (seq %d) does not match its checkpoint: it was edited; %s", l.path, c.Seq, verify)
		}
		l.cpSeq = c.Seq
	}
	return nil
}

// Append writes entries as the next records of the chain with one write and
// syncs the file to stable storage before returning: when Append returns
// nil the records are durable. Records of repairs (RepairedAction) not yet
// recorded go first. An entry with a zero Time gets Options.Now(). An
// entry without an Action, or whose line would exceed MaxLine, makes
// Append return an error having written nothing. A failed write or sync
// (a full disk) returns an error having kept none of the records: the file
// is cut back to its last whole record, and the next append records the
// cut. If cutting back fails too, the Log is broken: every later call
// returns that error (Open cuts the torn tail off). When CheckpointEvery
// records have been appended since the last checkpoint, Append then writes
// one; if that fails the records are still durable and Append returns nil
// (the checkpoint file is cut back likewise, and the checkpoint written
// with a later append). Append on a closed Log returns ErrClosed.
func (l *Log) Append(entries ...Entry) error {
	return l.append(len(entries), l.entryRecords(func(i int) *Entry { return &entries[i] }))
}

// maxKeptBuffer caps the encoding buffer a Log keeps between appends: a
// busy server's group commits append a few thousand records each, and a
// buffer grown afresh for each was most of the cost of writing them.
const maxKeptBuffer = 8 << 20

// recordRoom is the room an append makes in its buffer for each record
// before writing any (about a job event's record), so that the buffer of
// a large append grows once rather than step by step.
const recordRoom = 320

// recordFunc appends record i of an append to buf, numbered seq, with
// ZeroHash as its prev (appendLocked puts the chain's hash in its place),
// and returns its action, or "" (and buf as it was) for an entry without
// one.
type recordFunc func(buf []byte, i int, seq uint64) ([]byte, string)

// entryRecords returns the recordFunc of entries, entry(i) returning the
// i-th; the entry is read before the next call of entry.
func (l *Log) entryRecords(entry func(i int) *Entry) recordFunc {
	return func(buf []byte, i int, seq uint64) ([]byte, string) {
		e := entry(i)
		if e.Action == "" {
			return buf, ""
		}
		t := e.Time
		if t.IsZero() {
			t = l.now()
		}
		return appendRecord(buf, &Record{
			Seq: seq, Time: t.UTC(), Action: e.Action, Actor: e.Actor, Role: e.Role,
			Target: e.Target, Fields: e.Fields, Prev: ZeroHash,
		}), e.Action
	}
}

// append does Append's work for n records, each appended by record.
func (l *Log) append(n int, record recordFunc) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	if l.err != nil {
		return l.err
	}
	if n == 0 {
		return nil
	}
	return l.appendLocked(n, record)
}

// appendLocked does append's work with l.mu held, on an open, unbroken
// Log.
func (l *Log) appendLocked(n int, record recordFunc) error {
	repairs := make([]Entry, len(l.repairs))
	for i := range l.repairs {
		repairs[i] = l.repairs[i].entry()
	}
	repair := l.entryRecords(func(i int) *Entry { return &repairs[i] })
	buf := slices.Grow(l.buf[:0], (len(repairs)+n)*recordRoom)
	defer func() {
		if cap(buf) <= maxKeptBuffer {
			l.buf = buf[:0]
		}
	}()
	seq := l.seq
	var hash [len(ZeroHash)]byte // the hex of the chain's last hash
	copy(hash[:], l.hash)
	for i := range len(repairs) + n {
		seq++
		start := len(buf)
		var action string
		if i < len(repairs) {
			buf, action = repair(buf, i, seq)
		} else {
			i -= len(repairs)
			buf, action = record(buf, i, seq)
		}
		if action == "" {
			return fmt.Errorf("audit: append: entry %d has no action", i)
		}
		line := buf[start:]
		if len(line) > MaxLine {
			return fmt.Errorf("audit: append: entry %d (%s) is %d bytes, over the %d-byte line limit", i, action, len(line), MaxLine)
		}
		// A record ends in its prev, a string of hex digits written as
		// they are: "…"} (appendRecordWith).
		copy(line[len(line)-2-len(hash):], hash[:])
		sum := sha256.Sum256(line)
		hex.Encode(hash[:], sum[:])
		buf = append(buf, '\n')
	}
	if err := l.write(l.f, l.path, "log", &l.size, buf); err != nil {
		return err
	}
	l.repairs = l.repairs[len(repairs):]
	l.seq, l.hash = seq, string(hash[:])
	if l.seq-l.cpSeq >= uint64(l.every) {
		l.checkpoint() // a failure is sticky in l.err; these records are durable
	}
	return nil
}

// Checkpoint writes the head of the chain (the last record's seq and line
// hash) to the checkpoint file and syncs it, unless nothing was appended
// since the last checkpoint. A failed write or sync breaks the Log like a
// failed Append and is returned; a broken Log returns its error and a
// closed one ErrClosed.
func (l *Log) Checkpoint() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	if l.err != nil {
		return l.err
	}
	return l.checkpoint()
}

// checkpoint does Checkpoint's work with l.mu held.
func (l *Log) checkpoint() error {
	if l.seq == l.cpSeq {
		return nil
	}
	c := checkpoint{Seq: l.seq, Hash: l.hash, Time: l.now().UTC()}
	if l.key != nil {
		c.Sig = signCheckpoint(l.key, c.Seq, c.Hash)
	}
	line, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("audit: checkpoint: %w", err)
	}
	if err := l.write(l.cp, l.cpPath, "checkpoints", &l.cpSize, append(line, '\n')); err != nil {
		return err
	}
	l.cpSeq = l.seq
	return nil
}

// write appends b to f, whose whole lines end at *size, and syncs it. If
// that fails it cuts f back to *size, so that the file ends in a whole
// line, notes the cut for the next append to record, and returns the
// error; if cutting back fails too, the Log is broken.
func (l *Log) write(f *os.File, path, name string, size *int64, b []byte) error {
	_, err := f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		*size += int64(len(b))
		return nil
	}
	dropped, cerr := cutBack(f, *size)
	if cerr != nil {
		l.err = fmt.Errorf("audit: write %s: %w; cutting it back to its last whole line failed: %w (the log is broken; reopen it)", path, err, cerr)
		return l.err
	}
	if len(dropped) > 0 {
		l.repairs = append(l.repairs, repair{file: name, dropped: dropped, reason: "a failed write: " + err.Error()})
	}
	return fmt.Errorf("audit: write %s: %w (cut back to its last whole line: nothing of this write was kept)", path, err)
}

// Head returns the seq and line hash of the last record, or 0 and ZeroHash
// for an empty log.
func (l *Log) Head() (seq uint64, hash string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seq, l.hash
}

// Close records repairs not yet recorded, writes a checkpoint if records
// were appended since the last one and closes the files. It returns the
// Log's sticky error if it is broken, else the first error appending,
// checkpointing or closing; closing twice returns nil.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	err := l.err
	if err == nil && len(l.repairs) > 0 {
		err = l.appendLocked(0, nil)
	}
	if err == nil {
		err = l.checkpoint()
	}
	if cerr := l.f.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("audit: close %s: %w", l.path, cerr)
	}
	if cerr := l.cp.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("audit: close %s: %w", l.cpPath, cerr)
	}
	return err
}

// lineHash returns the lowercase hex SHA-256 of line.
func lineHash(line []byte) string {
	sum := sha256.Sum256(line)
	return hex.EncodeToString(sum[:])
}

// isHash reports whether s is a lowercase hex SHA-256.
func isHash(s string) bool {
	if len(s) != 64 {
		return false
	}
	return strings.Trim(s, "0123456789abcdef") == ""
}

// parseRecord decodes one log line; its error reads after "the line".
func parseRecord(line []byte) (Record, error) {
	var r Record
	if err := json.Unmarshal(line, &r); err != nil {
		return r, fmt.Errorf("is not a JSON record: %w", err)
	}
	switch {
	case r.Seq == 0:
		return r, errors.New("is not a record: no seq")
	case r.Action == "":
		return r, errors.New("is not a record: no action")
	case !isHash(r.Prev):
		return r, errors.New("is not a record: prev is not a hex SHA-256")
	}
	return r, nil
}

// parseCheckpoint decodes one checkpoint line; its error reads after "the
// line".
func parseCheckpoint(line []byte) (checkpoint, error) {
	var c checkpoint
	if err := json.Unmarshal(line, &c); err != nil {
		return c, fmt.Errorf("is not a JSON checkpoint: %w", err)
	}
	if c.Seq == 0 || !isHash(c.Hash) {
		return c, errors.New("is not a checkpoint: it needs a seq and a hex SHA-256 hash")
	}
	return c, nil
}
