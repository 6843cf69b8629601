package agent

import (
	"cmp"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"sync"
	"time"
)

// Streams tells a job's stdout and stderr apart in its one log file: the
// agent reads the two from pipes and appends what it reads to the file,
// in the order it reads it, noting where each run of one stream begins.
// The file thus holds the job's output interleaved as it arrived, as
// before, and the shipper tags each chunk with its stream (StreamAt). The
// zero value is ready; ProcessExecutor.Start starts it (Spec.Streams).
type Streams struct {
	mu      sync.Mutex
	started bool
	end     int64       // the file's size as far as the copiers wrote it
	runs    []streamRun // where the stream changes, ascending
	pipes   [2]*os.File // the read ends: stdout, stderr
	copied  sync.WaitGroup
}

// streamRun is where a run of one stream's output begins in the file.
type streamRun struct {
	off    int64
	stderr bool
}

// drainAfterExit is how long the copiers go on reading once the job's
// process group is gone: output still in the pipes is read at once; a
// process that left the group and holds a pipe open is not waited for.
const drainAfterExit = 100 * time.Millisecond

// start appends what the job writes to stdout and stderr to log, which
// is open for appending, size bytes long, and which it closes once both
// pipes are drained.
func (s *Streams) start(log *os.File, size int64, stdout, stderr *os.File) {
	s.mu.Lock()
	s.started, s.end, s.pipes = true, size, [2]*os.File{stdout, stderr}
	s.mu.Unlock()
	for i, r := range s.pipes {
		s.copied.Go(func() { s.copy(log, r, i == 1) })
	}
	go func() {
		s.copied.Wait()
		_ = log.Close()
	}()
}

// copyBuffers are the copiers' read buffers, kept between jobs: most
// jobs print little, and a buffer made for each would cost more than
// starting it.
var copyBuffers = sync.Pool{New: func() any { return new([32 << 10]byte) }}

// copy appends what it reads from r to log until r ends.
func (s *Streams) copy(log, r *os.File, stderr bool) {
	defer r.Close()
	b := copyBuffers.Get().(*[32 << 10]byte)
	defer copyBuffers.Put(b)
	buf := b[:]
	for {
		n, err := r.Read(buf)
		if n > 0 {
			s.write(log, buf[:n], stderr)
		}
		if err != nil {
			return // io.EOF: every writer closed it; or the deadline of drain
		}
	}
}

// write appends data, read from one stream, to log.
func (s *Streams) write(log *os.File, data []byte, stderr bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.runs) == 0 || s.runs[len(s.runs)-1].stderr != stderr {
		s.runs = append(s.runs, streamRun{off: s.end, stderr: stderr})
	}
	n, _ := log.Write(data) // a full disk loses output, as it does when the job writes the file itself
	s.end += int64(n)
}

// note appends the agent's own line about a job that did not start to
// log, as stderr's.
func (s *Streams) note(log *os.File, text string) {
	info, err := log.Stat()
	if err != nil {
		_, _ = log.WriteString(text) // told apart or not, the line is kept
		return
	}
	s.mu.Lock()
	s.started, s.end = true, info.Size()
	s.mu.Unlock()
	s.write(log, []byte(text), true)
}

// drain waits until the pipes are read to their end, at most
// drainAfterExit, then stops reading them. It is called once the job's
// process group has ended.
func (s *Streams) drain() {
	s.mu.Lock()
	started := s.started
	s.mu.Unlock()
	if !started {
		return
	}
	done := make(chan struct{})
	go func() {
		s.copied.Wait()
		close(done)
	}()
	t := time.NewTimer(drainAfterExit)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	for _, r := range s.pipes {
		_ = r.SetReadDeadline(time.Now()) // a read blocked on it returns
	}
	<-done
}

// StreamAt says which stream wrote the byte at off in the log file
// (stderr or not) and how far from off the output is told apart: up to
// where the stream next changes (changes is true) or, past the last
// change, up to what is written so far. Until they start (a job that
// writes its log itself), all output is stdout's, with no limit.
func (s *Streams) StreamAt(off int64) (stderr bool, limit int64, changes bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started {
		return false, math.MaxInt64, false
	}
	// The first run that begins past off, and the one before it, which
	// holds off.
	i := sort.Search(len(s.runs), func(i int) bool { return s.runs[i].off > off })
	if i < len(s.runs) {
		return i > 0 && s.runs[i-1].stderr, s.runs[i].off, true
	}
	return i > 0 && s.runs[i-1].stderr, s.end, false
}

// forget drops what it noted of the output before off, which the server
// has: it is never shipped again.
func (s *Streams) forget(off int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i, _ := slices.BinarySearchFunc(s.runs, off, func(r streamRun, off int64) int { return cmp.Compare(r.off, off) })
	if i > 1 {
		s.runs = slices.Delete(s.runs, 0, i-1) // the run holding off stays
	}
}

// streamPipes makes the pipes of a job's stdout and stderr: their read
// ends, then their write ends.
func streamPipes() ([]*os.File, error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("stdout pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll([]*os.File{outR, outW})
		return nil, fmt.Errorf("stderr pipe: %w", err)
	}
	return []*os.File{outR, errR, outW, errW}, nil
}

// closeAll closes files.
func closeAll(files []*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}
