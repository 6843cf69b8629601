package agent

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/wire"
)

// scanAll feeds output to a fresh scanner in the pieces given and returns
// what it found, in order (the last value of each piece that had any).
func scanAll(pieces ...string) []string {
	var s progressScanner
	var found []string
	for _, p := range pieces {
		if v, ok := s.scan([]byte(p)); ok {
			found = append(found, v)
		}
	}
	return found
}

func TestProgressLines(t *testing.T) {
	t.Parallel()
	out := "epoch 1\nBERTH_PROGRESS 0.25\r\n  BERTH_PROGRESS \tstep 3/10, loss 0.1 \n" +
		"not BERTH_PROGRESS 0.9\nBERTH_PROGRESS\nBERTH_PROGRESS   \nBERTH_PROGRESSIVE 1\n" +
		"BERTH_PROGRESS 0.75\rBERTH_PROGRESS 1" // the last line has not ended yet
	want := []string{"0.25", "step 3/10, loss 0.1", "0.75"}

	bytewise := make([]string, len(out))
	for i := range out {
		bytewise[i] = out[i : i+1]
	}
	if got := scanAll(bytewise...); !slices.Equal(got, want) {
		t.Fatalf("fed byte by byte: found %q, want %q", got, want)
	}
	// Cut in three anywhere: what is found is in order and ends with the
	// latest value.
	for i := 0; i <= len(out); i++ {
		for j := i; j <= len(out); j++ {
			got := scanAll(out[:i], out[i:j], out[j:])
			if len(got) == 0 || got[len(got)-1] != "0.75" || !inOrder(got, want) {
				t.Fatalf("cut at %d and %d: found %q, want values of %q in order, ending with the last", i, j, got, want)
			}
		}
	}
}

// inOrder reports whether got is a subsequence of want.
func inOrder(got, want []string) bool {
	for _, g := range got {
		i := slices.Index(want, g)
		if i < 0 {
			return false
		}
		want = want[i+1:]
	}
	return true
}

func TestProgressLineLimits(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", maxProgress)
	for _, tc := range []struct {
		name   string
		pieces []string
		want   []string
	}{
		{"value of 1 KiB", []string{"BERTH_PROGRESS " + long + "\n"}, []string{long}},
		{"value over 1 KiB", []string{"BERTH_PROGRESS " + long + "y\n"}, nil},
		{"after a long line cut in pieces", []string{strings.Repeat("z", 3*maxProgressRead), strings.Repeat("z", maxProgressRead),
			"BERTH_PROGRESS 0.1\nBERTH_", "PROGRESS 0.2\n"}, []string{"0.2"}},
		{"a long line that ends like one", []string{strings.Repeat("z", 3*maxProgressRead), "\nBERTH_PROGRESS 0.3\n"}, []string{"0.3"}},
		{"line over the read limit", []string{"BERTH_PROGRESS" + strings.Repeat(" ", maxProgressRead), "0.4\n"}, nil},
	} {
		if got := scanAll(tc.pieces...); !slices.Equal(got, tc.want) {
			t.Errorf("%s: found %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestProgressValue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want, err string }{
		{"0.5", "0.5", ""},
		{" \tstep 3/10\r\n", "step 3/10", ""},
		{"", "", "progress is empty"},
		{" \n", "", "progress is empty"},
		{strings.Repeat("x", maxProgress) + "\n", strings.Repeat("x", maxProgress), ""},
		{strings.Repeat("x", maxProgress+1), "", "progress is longer than 1 KiB"},
	} {
		got, err := progressValue([]byte(tc.in))
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && err.Error() != tc.err) {
			t.Errorf("progressValue(%.20q) = %.20q, %v; want %.20q, %q", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestProgressSentOncePerChange(t *testing.T) {
	t.Parallel()
	var p progress
	if _, ok := p.pending(); ok {
		t.Fatal("pending before any progress")
	}
	p.set("0.1")
	p.set("0.2")
	v, ok := p.pending()
	if !ok || v != "0.2" {
		t.Fatalf("pending = %q, %v; want the latest, 0.2", v, ok)
	}
	p.set("0.3") // while 0.2 is being sent
	p.sent("0.2")
	if v, ok := p.pending(); !ok || v != "0.3" {
		t.Fatalf("pending after sending an older value = %q, %v; want 0.3", v, ok)
	}
	p.sent("0.3")
	p.set("0.3")
	if v, ok := p.pending(); ok {
		t.Fatalf("pending = %q after the same value again; want nothing", v)
	}
}

// progressURL returns the BERTH_PROGRESS_URL an attempt printed as
// "url=URL.".
func progressURL(t *testing.T, fs *fakeServer, id string) string {
	t.Helper()
	out := fs.output(id, "url=")
	return out[strings.Index(out, "url=")+4 : strings.Index(out, ".\n")]
}

func TestAgentProgressEndpointKeepsStallAway(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	startAgent(t, fs, nil)
	done := filepath.Join(t.TempDir(), "done")
	// Silent after printing its URL, with a 2s stall timeout: only the
	// reports posted to the URL over 3s keep it from stalling. (The first
	// report waits for the URL line to be shipped and read: the timeout
	// leaves a loaded machine room for that.)
	fs.assign(&wire.JobAssign{AttemptID: "a1", StallTimeout: 2 * time.Second, Command: []string{"sh", "-c",
		`echo "url=$BERTH_PROGRESS_URL."; while [ ! -e ` + done + ` ]; do sleep 0.05; done`}})
	u := progressURL(t, fs, "a1")
	for i := range 10 {
		resp, err := http.Post(u, "text/plain", strings.NewReader("0."+strconv.Itoa(i)))
		if err != nil || resp.StatusCode != http.StatusNoContent {
			t.Fatalf("report %d: %v %v", i, resp, err)
		}
		resp.Body.Close()
		time.Sleep(300 * time.Millisecond) // the pace of a slow job's reports
	}
	if err := os.WriteFile(done, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	checkResult(t, fs.result("a1"), berth.AttemptSucceeded, "", intp(0), "")
	fs.await("progress 0.9", func(m wire.Message) bool {
		p, ok := m.Body.(*wire.Progress)
		return ok && p.AttemptID == "a1" && p.Progress == "0.9"
	})
}

func TestAgentProgressEndpoint(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	startAgent(t, fs, nil)
	fs.assign(&wire.JobAssign{AttemptID: "a1", Command: []string{"sh", "-c", `echo "url=$BERTH_PROGRESS_URL."; sleep 1000`}})
	u := progressURL(t, fs, "a1")
	if !strings.HasPrefix(u, "http://127.0.0.1:") || !strings.Contains(u, "/v1/progress/a1/") {
		t.Fatalf("BERTH_PROGRESS_URL = %q, want http://127.0.0.1:PORT/v1/progress/a1/TOKEN", u)
	}
	base, token := u[:strings.LastIndex(u, "/a1/")], u[strings.LastIndex(u, "/")+1:]
	for _, tc := range []struct {
		name, method, url, body string
		want                    int
	}{
		{"report", "POST", u, "0.5", http.StatusNoContent},
		{"trimmed 1 KiB", "POST", u, strings.Repeat("x", maxProgress) + "\n", http.StatusNoContent},
		{"empty", "POST", u, "", http.StatusBadRequest},
		{"blank", "POST", u, " \n", http.StatusBadRequest},
		{"over 1 KiB", "POST", u, strings.Repeat("x", maxProgress+1), http.StatusBadRequest},
		{"far over 1 KiB", "POST", u, strings.Repeat("x", 1<<20), http.StatusBadRequest},
		{"GET", "GET", u, "", http.StatusMethodNotAllowed},
		{"PUT", "PUT", u, "0.6", http.StatusMethodNotAllowed},
		{"wrong token", "POST", base + "/a1/" + strings.ToLower(token), "0.7", http.StatusNotFound},
		{"no token", "POST", base + "/a1/", "0.7", http.StatusNotFound},
		{"unknown attempt", "POST", base + "/a2/" + token, "0.7", http.StatusNotFound},
		{"last", "POST", u, "step 9/10", http.StatusNoContent},
	} {
		req, err := http.NewRequest(tc.method, tc.url, strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: %s = %d, want %d", tc.name, tc.method, resp.StatusCode, tc.want)
		}
	}
	fs.await("progress from the last report", func(m wire.Message) bool {
		p, ok := m.Body.(*wire.Progress)
		return ok && p.AttemptID == "a1" && p.Progress == "step 9/10"
	})
}
