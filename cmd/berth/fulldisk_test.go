package main

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fullDiskDir mounts a small tmpfs on a new directory and returns it and a
// function that fills it; the test is skipped where mounting is not
// permitted.
func fullDiskDir(t *testing.T) (dir string, fill func() (free func())) {
	t.Helper()
	dir = t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("needs a small tmpfs to fill, and this machine cannot mount one (%v: %s)", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir, func() func() {
		p := filepath.Join(dir, "filler")
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for chunk := make([]byte, 4096); ; {
			if _, err := f.Write(chunk); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatal(err)
				}
				break
			}
		}
		return func() {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestFullDiskAcknowledgesNothingAndTheServerComesBack fills the disk of
// the data dir (the audit log's; the store is elsewhere): a submission
// fails and is not stored, the audit log stays whole, and once space
// returns the server starts again on the same data dir, takes
// submissions, and berth audit verify passes and reports the cut.
func TestFullDiskAcknowledgesNothingAndTheServerComesBack(t *testing.T) {
	dir, fill := fullDiskDir(t)
	db := filepath.Join(t.TempDir(), "berth.db")
	start := func() *runningServer {
		t.Helper()
		rs, err := startServer(context.Background(), &serverConfig{DataDir: dir, Store: db, Listen: "127.0.0.1:0"})
		if err != nil {
			t.Fatalf("start on %s: %v", dir, err)
		}
		return rs
	}
	rs := start()
	c := &cli{t: t, url: rs.URL}
	if code, _, errOut := c.run("submit", "--", "true"); code != 0 {
		t.Fatalf("submit: exit %d: %s", code, errOut)
	}
	free := fill()
	code, out, errOut := c.run("submit", "--array", "50", "--", "true")
	if code == 0 || strings.TrimSpace(out) != "" || !strings.Contains(errOut, "unavailable") {
		t.Fatalf("submit on a full disk: exit %d, %q, %q; want an unavailable error and no ids", code, out, errOut)
	}
	select {
	case <-rs.Ctl.Failed():
	case <-time.After(10 * time.Second):
		t.Fatal("the controller did not stop on the failed audit append")
	}
	if !strings.Contains(rs.Ctl.Err().Error(), "no space left") {
		t.Fatalf("controller stopped with %v, want the audit log's ENOSPC", rs.Ctl.Err())
	}
	if code, _, errOut := (&cli{t: t}).run("audit", "verify", "--data-dir", dir); code != 0 {
		t.Fatalf("verify of the full disk's log: exit %d: %s", code, errOut)
	}
	free()
	_ = rs.Close(context.Background()) // as serve does when the controller stops; it reports the failure
	rs = start()
	defer rs.Close(context.Background())
	c = &cli{t: t, url: rs.URL}
	if code, _, errOut := c.run("submit", "--", "true"); code != 0 {
		t.Fatalf("submit after the restart: exit %d: %s", code, errOut)
	}
	if jobs := c.listJobs(); len(jobs) != 2 {
		t.Fatalf("%d jobs stored, want the 2 acknowledged", len(jobs))
	}
	if err := rs.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = (&cli{t: t}).run("audit", "verify", "--data-dir", dir)
	if code != 0 || !strings.Contains(out, "audit log OK") || !strings.Contains(out, "repaired: record") || !strings.Contains(out, "no space left") {
		t.Fatalf("verify after the restart: exit %d, %q, %q; want OK and the repair", code, out, errOut)
	}
}

// TestServerStartsOnATornAuditLog is the start that used to be refused: a
// crash or a full disk left the audit log's last line torn. The server
// cuts it off, records the cut, and starts.
func TestServerStartsOnATornAuditLog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rs, err := startServer(context.Background(), &serverConfig{DataDir: dir, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "audit.log"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"seq":9,"time":"2026-`); err != nil {
		t.Fatal(err)
	}
	f.Close()
	rs, err = startServer(context.Background(), &serverConfig{DataDir: dir, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatalf("start on a torn audit log: %v", err)
	}
	if err := rs.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := (&cli{t: t}).run("audit", "verify", "--data-dir", dir)
	if code != 0 || !strings.Contains(out, "repaired: record") || !strings.Contains(out, "cut back by 22 bytes") {
		t.Fatalf("verify: exit %d, %q, %q; want OK and the 22-byte repair", code, out, errOut)
	}
}

// TestServerComesBackByItselfAfterAFullDisk runs berth server as a user
// does, with no supervisor: filling its data dir stops it (the submission
// in flight is refused), and once space returns it starts again by itself
// on the same address and takes submissions.
func TestServerComesBackByItselfAfterAFullDisk(t *testing.T) {
	dir, fill := fullDiskDir(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	exited := make(chan int, 1)
	go func() {
		m := &Main{Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" }}
		exited <- m.Run(ctx, []string{"server", "--data-dir", dir, "--store", filepath.Join(t.TempDir(), "berth.db"), "--listen", addr})
	}()
	c := &cli{t: t, url: "http://" + addr}
	submitted := func(what string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			code, _, errOut := c.run("submit", "--", "true")
			if code == 0 {
				return
			}
			select {
			case code := <-exited:
				t.Fatalf("%s: the server exited (%d): %s", what, code, errOut)
			case <-time.After(100 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no submission taken in 30 s: %s", what, errOut)
			}
		}
	}
	submitted("first start")
	free := fill()
	if code, out, _ := c.run("submit", "--array", "50", "--", "true"); code == 0 || strings.TrimSpace(out) != "" {
		t.Fatalf("submit on a full disk: exit %d, %q; want an error and no ids", code, out)
	}
	free()
	submitted("after the full disk")
	if jobs := c.listJobs(); len(jobs) != 2 {
		t.Fatalf("%d jobs stored, want the 2 acknowledged", len(jobs))
	}
	cancel()
	if code := <-exited; code != 0 {
		t.Fatalf("berth server exited %d on its context's end", code)
	}
	if code, out, errOut := (&cli{t: t}).run("audit", "verify", "--data-dir", dir); code != 0 || !strings.Contains(out, "audit log OK") {
		t.Fatalf("verify: exit %d, %q, %q", code, out, errOut)
	}
}
