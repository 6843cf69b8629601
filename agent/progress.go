package agent

import (
	"bytes"
	"crypto/subtle"
	"errors"
	"io"
	"net/http"
	"sync"
)

// A job reports progress, a fraction such as "0.42" or a short message, in
// one of two ways: a line "BERTH_PROGRESS VALUE" in its output, or a POST
// of VALUE to $BERTH_PROGRESS_URL, an endpoint the agent serves on
// loopback with a secret per attempt. The agent sends the latest value to
// the server; a report through the endpoint also tells the stall watchdog
// that the attempt is alive (a progress line does as output).

// progressLinePrefix starts a progress line.
const progressLinePrefix = "BERTH_PROGRESS"

const (
	// maxProgress is the most bytes of a progress value, trimmed.
	maxProgress = 1 << 10
	// maxProgressRead is the most bytes read of a progress report: a
	// longer line, or request body, is no progress report.
	maxProgressRead = 2 << 10
)

// progressValue returns v without surrounding blanks, or an error when
// that is empty or longer than maxProgress.
func progressValue(v []byte) (string, error) {
	v = bytes.TrimSpace(v)
	switch {
	case len(v) == 0:
		return "", errors.New("progress is empty")
	case len(v) > maxProgress:
		return "", errors.New("progress is longer than 1 KiB")
	}
	return string(v), nil
}

// progressLine returns the value of a line "BERTH_PROGRESS VALUE" (blanks
// around allowed), and whether line is one.
func progressLine(line []byte) (string, bool) {
	rest, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte(progressLinePrefix))
	if !ok || len(rest) == 0 || (rest[0] != ' ' && rest[0] != '\t') {
		return "", false
	}
	v, err := progressValue(rest)
	return v, err == nil
}

// progressScanner finds progress lines in output fed to it in pieces of any
// size; a line ends at '\n' or '\r'.
type progressScanner struct {
	line []byte // the current line so far
	long bool   // the current line is longer than maxProgressRead
}

// scan reads the next piece of output and returns the value of its last
// complete progress line, and whether there was one. Only a line split
// across pieces is copied.
func (s *progressScanner) scan(data []byte) (value string, found bool) {
	for len(data) > 0 {
		end := bytes.IndexAny(data, "\r\n")
		if end < 0 {
			s.keep(data)
			return value, found
		}
		line := data[:end]
		if len(s.line) > 0 || s.long {
			s.keep(line)
			line = s.line
		}
		if v, ok := progressLine(line); ok && len(line) <= maxProgressRead {
			value, found = v, true
		}
		s.line, s.long = s.line[:0], false
		data = data[end+1:]
	}
	return value, found
}

// keep adds part of the current line to those kept, dropping a line once
// it is longer than maxProgressRead.
func (s *progressScanner) keep(part []byte) {
	if s.long || len(s.line)+len(part) > maxProgressRead {
		s.line, s.long = s.line[:0], true
		return
	}
	s.line = append(s.line, part...)
}

// progress is an attempt's latest progress and whether the server has it.
// It is safe for concurrent use.
type progress struct {
	mu     sync.Mutex
	value  string
	unsent bool
}

// set records v as the latest progress.
func (p *progress) set(v string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if v != p.value {
		p.value, p.unsent = v, true
	}
}

// pending returns the latest progress if the server does not have it.
func (p *progress) pending() (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.value, p.unsent
}

// sent records that the server has v.
func (p *progress) sent(v string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if v == p.value {
		p.unsent = false
	}
}

// progressPath is where attempt id's reports go, under the agent's
// progress endpoint; token is the attempt's secret.
const progressPath = "/v1/progress/"

// progressHandler serves the progress endpoint: POST
// /v1/progress/ATTEMPT/TOKEN with the value as body answers 204; 404 for
// an unknown attempt or a wrong token, 400 for an empty or too long value,
// 405 for another method.
func (s *supervisor) progressHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+progressPath+"{attempt}/{token}", func(w http.ResponseWriter, r *http.Request) {
		at := s.get(r.PathValue("attempt"))
		if at == nil || subtle.ConstantTimeCompare([]byte(r.PathValue("token")), []byte(at.token)) != 1 {
			http.Error(w, "no such attempt", http.StatusNotFound)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxProgressRead))
		var tooLong *http.MaxBytesError
		if errors.As(err, &tooLong) {
			http.Error(w, "progress is longer than 1 KiB", http.StatusBadRequest)
			return
		}
		if err != nil {
			http.Error(w, "read progress: "+err.Error(), http.StatusBadRequest)
			return
		}
		v, err := progressValue(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		at.progress.set(v)
		at.proc.Progressed()
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}
