package audit

import (
	"crypto/hmac"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// Report sums up a verified log.
type Report struct {
	Records     uint64 // records whose chain checked out
	Head        string // line hash of the last record, ZeroHash for an empty log
	Checkpoints int    // checkpoints matched against their records
	// Signed and Unsigned count the checkpoints whose signature
	// VerifyAgainst checked with its key and those without one; both are
	// 0 without a key.
	Signed, Unsigned int
	// Repairs are the log's RepairedAction records, oldest first: where
	// the log or its checkpoint file was cut back to its last whole line.
	Repairs []Repair
}

// Anchor is the head of a log as recorded apart from it (the store's
// audit head): the seq and line hash of a record the log must hold.
type Anchor struct {
	Seq  uint64
	Hash string
}

// Repair is one RepairedAction record of a verified log: at record Seq
// (Time), File ("log" or "checkpoints") was cut back by Bytes bytes, for
// Reason.
type Repair struct {
	Seq    uint64
	Time   time.Time
	File   string
	Bytes  string
	Reason string
}

// ChainError says where and how a log fails verification. Line is the
// 1-based line of the log file, 0 when the failure is not at a line of the
// log (a checkpoint past its end, or a bad checkpoint file); Seq is the
// record's seq, 0 if unknown; CheckpointLine is the line of the checkpoint
// file involved, 0 if none.
type ChainError struct {
	Line           int
	Seq            uint64
	CheckpointLine int
	Reason         string
}

// Error returns "line L (seq S): reason", or "checkpoint line C (seq S):
// reason" when no log line is involved.
func (e *ChainError) Error() string {
	var b strings.Builder
	switch {
	case e.Line > 0:
		b.WriteString("line " + strconv.Itoa(e.Line))
	case e.CheckpointLine > 0:
		b.WriteString("checkpoint line " + strconv.Itoa(e.CheckpointLine))
	}
	if e.Seq > 0 {
		if b.Len() > 0 {
			b.WriteString(" ")
		}
		b.WriteString("(seq " + strconv.FormatUint(e.Seq, 10) + ")")
	}
	if b.Len() > 0 {
		b.WriteString(": ")
	}
	b.WriteString(e.Reason)
	return b.String()
}

// Verify checks the whole log at logPath offline, streaming it: every line
// must be a record, seqs must run 1, 2, 3… and each record's prev must be
// the hash of the line before it (ZeroHash for the first), and the file
// must end in a newline. If checkpointPath is not "" and the file exists,
// each of its checkpoints, in increasing seq order, must name a record of
// the log and match that record's line hash. A missing checkpoint file is
// not an error: Report.Checkpoints is then 0, and a log cut short, or its
// last records edited, cannot be detected.
//
// On the first failure Verify returns a *ChainError (with a Report of what
// checked out before it). It returns other, wrapped errors when a file
// cannot be opened or read.
func Verify(logPath, checkpointPath string) (Report, error) {
	return verify(logPath, checkpointPath, Anchor{}, nil)
}

// VerifyAgainst verifies the log like Verify, and also that it holds
// head's record: a record with seq head.Seq whose line hashes to
// head.Hash. A log that ends before it was shortened; one whose record
// differs was edited or replaced; either is a *ChainError. A zero head
// checks nothing more than Verify. With a key (Options.Key), a signed
// checkpoint whose signature does not match is a *ChainError too (it was
// forged or edited); checkpoints without one (written without a key) are
// counted in Report.Unsigned.
func VerifyAgainst(logPath, checkpointPath string, head Anchor, key []byte) (Report, error) {
	return verify(logPath, checkpointPath, head, key)
}

// verify does Verify's and VerifyAgainst's work.
func verify(logPath, checkpointPath string, head Anchor, key []byte) (Report, error) {
	rep := Report{Head: ZeroHash}
	f, err := os.Open(logPath)
	if err != nil {
		return rep, fmt.Errorf("audit: verify: %w", err)
	}
	defer f.Close()
	cps, err := openCheckpoints(checkpointPath, key)
	if err != nil {
		return rep, err
	}
	if cps != nil {
		defer cps.f.Close()
	}
	lr := newLineReader(f)
	var prevSeq uint64
	for n := 1; ; n++ {
		line, complete, err := lr.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if errors.Is(err, errLong) {
			return rep, &ChainError{Line: n, Reason: fmt.Sprintf("longer than %d bytes: not a record", MaxLine)}
		}
		if err != nil {
			return rep, fmt.Errorf("audit: verify: read %s: %w", logPath, err)
		}
		rec, perr := parseRecord(line)
		if !complete {
			return rep, &ChainError{Line: n, Seq: rec.Seq, Reason: errTorn.Error()}
		}
		if len(line) == 0 {
			return rep, &ChainError{Line: n, Reason: "empty line: not a record"}
		}
		if perr != nil {
			return rep, &ChainError{Line: n, Seq: rec.Seq, Reason: strings.TrimPrefix(perr.Error(), "is ")}
		}
		if reason := chainBreak(n, prevSeq, rep.Head, rec); reason != "" {
			return rep, &ChainError{Line: n, Seq: rec.Seq, Reason: reason}
		}
		hash := lineHash(line)
		if head.Seq > 0 && rec.Seq == head.Seq && hash != head.Hash {
			return rep, &ChainError{Line: n, Seq: rec.Seq, Reason: "does not match the store's audit head: the record was edited, or the log replaced"}
		}
		if cps != nil {
			if err := cps.match(n, rec.Seq, hash); err != nil {
				return rep, err
			}
		}
		prevSeq, rep.Head = rec.Seq, hash
		rep.Records++
		if rec.Action == RepairedAction {
			rep.Repairs = append(rep.Repairs, Repair{Seq: rec.Seq, Time: rec.Time, File: rec.Fields["file"],
				Bytes: rec.Fields["bytes_dropped"], Reason: rec.Fields["reason"]})
		}
	}
	if head.Seq > prevSeq {
		return rep, &ChainError{Seq: head.Seq, Reason: fmt.Sprintf("the log ends at seq %d but the store's audit head is seq %d: the log was shortened (%s deleted)",
			prevSeq, head.Seq, records(prevSeq+1, head.Seq))}
	}
	if cps != nil {
		if err := cps.rest(prevSeq); err != nil {
			return rep, err
		}
		rep.Checkpoints, rep.Signed, rep.Unsigned = cps.matched, cps.signed, cps.unsigned
	}
	return rep, nil
}

// chainBreak returns why rec, at line n after a record with prevSeq whose
// line hashed to prevHash, breaks the chain, or "".
func chainBreak(n int, prevSeq uint64, prevHash string, rec Record) string {
	want := prevSeq + 1
	switch {
	case rec.Seq > want && n == 1:
		return fmt.Sprintf("the log starts at seq %d, not 1: %s deleted", rec.Seq, records(1, rec.Seq-1))
	case rec.Seq > want:
		return fmt.Sprintf("seq %d follows %d (line %d): %s deleted, or lines were reordered", rec.Seq, prevSeq, n-1, records(want, rec.Seq-1))
	case rec.Seq == prevSeq:
		return fmt.Sprintf("seq %d repeats (line %d has it too): a line was inserted or duplicated", rec.Seq, n-1)
	case rec.Seq < prevSeq:
		return fmt.Sprintf("seq %d follows %d (line %d): lines were reordered or inserted", rec.Seq, prevSeq, n-1)
	case rec.Prev != prevHash && n == 1:
		return "prev is not the start-of-log hash (64 zeros): earlier records were deleted, or this line was edited"
	case rec.Prev != prevHash:
		return fmt.Sprintf("prev hash does not match line %d: line %d was edited, or lines were deleted, inserted or reordered between lines %d and %d", n-1, n-1, n-1, n)
	}
	return ""
}

// records names the seqs from..to: "record 5 was" or "records 5–9 were".
func records(from, to uint64) string {
	if from == to {
		return fmt.Sprintf("record %d was", from)
	}
	return fmt.Sprintf("records %d–%d were", from, to)
}

// checkpoints streams a checkpoint file alongside the log.
type checkpoints struct {
	path     string
	f        *os.File
	lr       *lineReader
	line     int        // of cur
	cur      checkpoint // the next checkpoint to match; Seq 0 at the end
	matched  int
	key      []byte // checks signatures when set
	signed   int    // checkpoints whose signature checked out
	unsigned int
}

// openCheckpoints opens the checkpoint file at path and reads its first
// checkpoint, checking signatures with key if set; it returns nil for ""
// or a missing file.
func openCheckpoints(path string, key []byte) (*checkpoints, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("audit: verify: %w", err)
	}
	c := &checkpoints{path: path, f: f, lr: newLineReader(f), key: key}
	if err := c.advance(); err != nil {
		f.Close()
		return nil, err
	}
	return c, nil
}

// advance reads the next checkpoint into c.cur, checking it follows the
// one before.
func (c *checkpoints) advance() error {
	prev := c.cur.Seq
	c.line++
	line, complete, err := c.lr.next()
	switch {
	case errors.Is(err, io.EOF):
		c.cur = checkpoint{}
		return nil
	case errors.Is(err, errLong):
		return &ChainError{CheckpointLine: c.line, Reason: fmt.Sprintf("longer than %d bytes: not a checkpoint", MaxLine)}
	case err != nil:
		return fmt.Errorf("audit: verify: read %s: %w", c.path, err)
	case !complete:
		return &ChainError{CheckpointLine: c.line, Reason: "in the checkpoint file: " + errTorn.Error()}
	}
	cp, err := parseCheckpoint(line)
	if err != nil {
		return &ChainError{CheckpointLine: c.line, Reason: "the line " + err.Error()}
	}
	if cp.Seq <= prev {
		return &ChainError{CheckpointLine: c.line, Seq: cp.Seq, Reason: fmt.Sprintf("checkpoint seq %d does not follow %d of checkpoint line %d: checkpoints must increase (the checkpoint file was edited)", cp.Seq, prev, c.line-1)}
	}
	if c.key != nil {
		switch {
		case cp.Sig == "":
			c.unsigned++
		case !hmac.Equal([]byte(cp.Sig), []byte(signCheckpoint(c.key, cp.Seq, cp.Hash))):
			return &ChainError{CheckpointLine: c.line, Seq: cp.Seq, Reason: "its signature does not match the server's key: the checkpoint was forged or edited"}
		default:
			c.signed++
		}
	}
	c.cur = cp
	return nil
}

// match checks the record with seq, at log line n, whose line hashed to
// hash against the checkpoint naming it, if any.
func (c *checkpoints) match(n int, seq uint64, hash string) error {
	if c.cur.Seq != seq {
		return nil
	}
	if c.cur.Hash != hash {
		return &ChainError{Line: n, Seq: seq, CheckpointLine: c.line, Reason: fmt.Sprintf("does not match checkpoint line %d: the record was edited after it was checkpointed", c.line)}
	}
	c.matched++
	return c.advance()
}

// rest fails if a checkpoint is left once the log ended at lastSeq.
func (c *checkpoints) rest(lastSeq uint64) error {
	if c.cur.Seq == 0 {
		return nil
	}
	return &ChainError{CheckpointLine: c.line, Seq: c.cur.Seq, Reason: fmt.Sprintf("checkpoint says record %d exists; the log ends at record %d (truncated)", c.cur.Seq, lastSeq)}
}
