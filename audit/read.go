package audit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
)

// errTorn says a file does not end in a newline.
var errTorn = errors.New("the file does not end in a newline: its last line is torn (a crash during a write) or was added by hand")

// errLong says a line exceeds MaxLine.
var errLong = fmt.Errorf("a line is longer than %d bytes", MaxLine)

// lineReader reads newline-terminated lines of at most MaxLine bytes.
type lineReader struct {
	r   *bufio.Reader
	buf []byte
}

func newLineReader(r io.Reader) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, 64<<10)}
}

// next returns the next line without its newline, valid until the next
// call. complete is false for a last line without a newline; the error is
// io.EOF when no bytes are left, errLong for a line over MaxLine, or a read
// error.
func (lr *lineReader) next() (line []byte, complete bool, err error) {
	lr.buf = lr.buf[:0]
	for {
		frag, err := lr.r.ReadSlice('\n')
		lr.buf = append(lr.buf, frag...)
		if len(lr.buf) > MaxLine+1 {
			return nil, false, errLong
		}
		switch {
		case err == nil:
			return lr.buf[:len(lr.buf)-1], true, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if len(lr.buf) == 0 {
				return nil, false, io.EOF
			}
			return lr.buf, false, nil
		default:
			return nil, false, err
		}
	}
}

// lastLines returns up to the last n lines of f, oldest first, without
// their newlines, reading backwards from the end so that only those lines
// are read. It returns errTorn if f does not end in a newline and errLong
// if the lines it needs are longer than MaxLine each on average.
func lastLines(f *os.File, n int) ([][]byte, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := st.Size()
	if size == 0 || n <= 0 {
		return nil, nil
	}
	var last [1]byte
	if _, err := f.ReadAt(last[:], size-1); err != nil {
		return nil, err
	}
	if last[0] != '\n' {
		return nil, errTorn
	}
	const chunk = 64 << 10
	limit := int64(n) * (MaxLine + 1)
	var buf []byte // the file's bytes from start to size-1 (without the final newline)
	start, newlines := size-1, 0
	for start > 0 && newlines < n {
		if size-1-start >= limit {
			return nil, errLong
		}
		k := min(start, chunk)
		start -= k
		b := make([]byte, k, int(k)+len(buf))
		if _, err := f.ReadAt(b, start); err != nil {
			return nil, err
		}
		newlines += bytes.Count(b, []byte{'\n'})
		buf = append(b, buf...)
	}
	lines := bytes.Split(buf, []byte{'\n'})
	if newlines >= n {
		// The first piece may be cut in the middle of a line; the last n
		// pieces follow a newline and are whole.
		lines = lines[len(lines)-n:]
	}
	return lines, nil
}

// Tail returns up to the last n lines of the log at path, oldest first and
// without their newlines, reading backwards from the end rather than the
// whole file. It does not parse or verify them. It returns an error if the
// file cannot be read, does not end in a newline (a torn last line), or if
// the lines are longer than MaxLine.
func Tail(path string, n int) ([][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("audit: tail: %w", err)
	}
	defer f.Close()
	lines, err := lastLines(f, n)
	if err != nil {
		return nil, fmt.Errorf("audit: tail %s: %w", path, err)
	}
	return lines, nil
}

// Read streams the records of the log at path whose seq is greater than
// after, in file order, calling fn with each record and its exact line
// (without the newline; the slice is reused after fn returns). For after >
// 0 it finds the first such record by binary search over the file, assuming
// seqs increase as they do in an intact log, so it reads little more than
// the records it returns. Read does not verify the chain (use Verify). It
// stops at and returns fn's error unwrapped; it returns an error naming the
// byte offset of a line that is not a record or is too long, or of a torn
// last line (after calling fn for every record before it), and wrapped
// errors opening or reading the file.
func Read(path string, after uint64, fn func(rec Record, line []byte) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("audit: read: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("audit: read: %w", err)
	}
	off := int64(0)
	if after > 0 {
		if off, err = seekAfter(f, st.Size(), after); err != nil {
			return fmt.Errorf("audit: read %s: %w", path, err)
		}
	}
	lr := newLineReader(io.NewSectionReader(f, off, st.Size()-off))
	for {
		line, complete, err := lr.next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("audit: read %s at byte %d: %w", path, off, err)
		}
		if !complete {
			return fmt.Errorf("audit: read %s at byte %d: %w", path, off, errTorn)
		}
		rec, err := parseRecord(line)
		if err != nil {
			return fmt.Errorf("audit: read %s: the line at byte %d %w", path, off, err)
		}
		off += int64(len(line)) + 1
		if rec.Seq <= after {
			continue
		}
		if err := fn(rec, line); err != nil {
			return err
		}
	}
}

// seekAfter returns the offset of a line start before which every record
// has a seq of at most after, by binary search over byte offsets. A line it
// cannot parse makes it give up and return 0, so the caller scans the whole
// file and reports the line.
func seekAfter(f *os.File, size int64, after uint64) (int64, error) {
	// lineAt returns the start of the first line at or after off, and
	// whether the record there has a seq greater than after (or off is at
	// the end).
	lineAt := func(off int64) (start int64, past bool, ok bool, err error) {
		start = off
		if off > 0 {
			lr := newLineReader(io.NewSectionReader(f, off-1, size-off+1))
			skip, complete, err := lr.next()
			if errors.Is(err, io.EOF) || (err == nil && !complete) {
				return size, true, true, nil
			}
			if err != nil {
				return 0, false, false, err
			}
			start = off - 1 + int64(len(skip)) + 1
		}
		if start >= size {
			return size, true, true, nil
		}
		lr := newLineReader(io.NewSectionReader(f, start, size-start))
		line, _, err := lr.next()
		if err != nil {
			return 0, false, false, err
		}
		rec, err := parseRecord(line)
		if err != nil {
			return 0, false, false, nil
		}
		return start, rec.Seq > after, true, nil
	}
	lo, hi := int64(0), size // the answer lies in lineAt(lo..hi)
	for lo < hi {
		mid := lo + (hi-lo)/2
		_, past, ok, err := lineAt(mid)
		if errors.Is(err, errLong) || (err == nil && !ok) {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
		if past {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	start, _, ok, err := lineAt(lo)
	if errors.Is(err, errLong) || (err == nil && !ok) {
		return 0, nil
	}
	return start, err
}
