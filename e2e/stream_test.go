package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/client"
)

// TestExecAndPortForwardThroughTheServer runs a server that trusts no one
// on loopback and an agent joined with a token. alice's job serves HTTP on
// a port of its worker: berth exec runs commands in it (its env, its
// working directory, stdin in, stdout and stderr apart, its exit code
// out), berth port-forward carries connections to its port and stops when
// the job ends. bob (another user) and a viewer get 403 for both; a job
// that has ended is 409; bad ports and ranks are refused naming them.
func TestExecAndPortForwardThroughTheServer(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, "--trust-loopback", "none")
	admin := readToken(t, filepath.Join(cl.dir, "server", "admin.token"))
	cl.c = client.New(cl.url, admin, nil)
	cl.addAgent("a1", "--join-token", cl.issue("rack", "agent").Secret)
	alice := cl.issue("alice", "user").Secret
	bob := cl.issue("bob", "user").Secret
	viewer := cl.issue("vera", "viewer").Secret
	asAlice := client.New(cl.url, alice, nil)

	workdir := t.TempDir()
	if err := os.WriteFile(filepath.Join(workdir, "hello.txt"), []byte("served from the job\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, jobPort, _ := net.SplitHostPort(freeAddr(t))
	req := &berth.SubmitRequest{JobSpec: berth.DefaultJobSpec()}
	req.Command = berth.Argv{"python3", "-m", "http.server", jobPort, "--bind", "127.0.0.1"}
	req.Workdir = workdir
	req.Env = map[string]string{"GREETING": "hello from the job env"}
	jobs, err := asAlice.Submit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	id := jobs[0].ID
	cl.awaitState(id, 30*time.Second, berth.JobRunning)
	cl.eventually(30*time.Second, "the job's HTTP server listening", func() bool {
		c, err := net.Dial("tcp", "127.0.0.1:"+jobPort)
		if err == nil {
			c.Close()
		}
		return err == nil
	})

	// exec: the job's env and working directory; stdin in; stdout and
	// stderr apart; the exit code out.
	script := `echo "$BERTH_JOB_ID|$GREETING"; pwd; read line; echo "stdin:$line"; echo "to stderr" >&2; exit 7`
	out, errOut, err := runCLI(t, alice, "a line of input\n", "exec", "--server", cl.url, id, "--", "sh", "-c", script)
	if code := exitCode(err); code != 7 {
		t.Fatalf("berth exec exited %d, want the command's 7\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	want := id + "|hello from the job env\n" + workdir + "\nstdin:a line of input\n"
	if out != want {
		t.Fatalf("berth exec stdout:\n%q\nwant\n%q (stderr %q)", out, want, errOut)
	}
	if errOut != "to stderr\n" {
		t.Fatalf("berth exec stderr: %q, want only the command's", errOut)
	}
	// A command that does not exist exits as a shell's does.
	_, errOut, err = runCLI(t, alice, "", "exec", "--server", cl.url, id, "--", "no-such-command-here")
	if code := exitCode(err); code != 127 || !strings.Contains(errOut, "no-such-command-here") {
		t.Fatalf("exec of a missing command: exit %d, stderr %q; want 127 naming it", code, errOut)
	}
	// An admin may exec into anyone's job.
	if out := mustCLI(t, admin, "", "exec", "--server", cl.url, id, "--", "printenv", "BERTH_USER"); out != "alice\n" {
		t.Fatalf("admin's exec printed %q, want alice", out)
	}

	// port-forward: each connection to the local port reaches the job's.
	local := freeAddr(t)
	_, localPort, _ := net.SplitHostPort(local)
	pf := startAs(t, alice, "port-forward", "port-forward", "--server", cl.url, id, localPort+":"+jobPort)
	if _, ok := pf.out.await("Forwarding from "+local, 30*time.Second); !ok {
		t.Fatalf("port-forward did not say it listens on %s:\n%s", local, pf.out)
	}
	for i := range 3 {
		resp, err := http.Get("http://" + local + "/hello.txt")
		if err != nil {
			t.Fatalf("fetch %d through port-forward: %v", i, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || string(body) != "served from the job\n" {
			t.Fatalf("fetch %d through port-forward: %s %q %v", i, resp.Status, body, err)
		}
	}

	// Others may do neither; nothing listens for them.
	for _, who := range []struct{ name, token string }{{"bob", bob}, {"a viewer", viewer}} {
		_, errOut, err := runCLI(t, who.token, "", "exec", "--server", cl.url, id, "--", "true")
		if code := exitCode(err); code != 2 || !strings.Contains(errOut, "(forbidden)") {
			t.Fatalf("%s's exec: exit %d, stderr %q; want 2 and forbidden", who.name, code, errOut)
		}
		theirs := freeAddr(t)
		_, port, _ := net.SplitHostPort(theirs)
		_, errOut, err = runCLI(t, who.token, "", "port-forward", "--server", cl.url, id, port+":"+jobPort)
		if code := exitCode(err); code != 2 || !strings.Contains(errOut, "(forbidden)") {
			t.Fatalf("%s's port-forward: exit %d, stderr %q; want 2 and forbidden", who.name, code, errOut)
		}
	}
	// Bad input is refused, naming what is wrong.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"port-forward", id, "0:" + jobPort}, "LOCAL:REMOTE: \"0:" + jobPort + "\": LOCAL must be"},
		{[]string{"port-forward", id, localPort + ":http"}, "REMOTE must be a port number"},
		{[]string{"port-forward", id, "70000"}, "LOCAL must be a port number"},
		{[]string{"exec", id, "--"}, "command:"},
		{[]string{"exec", "--rank", "1", id, "--", "true"}, "rank: job " + id + " has 1 node(s)"},
		{[]string{"exec", "no-such-job", "--", "true"}, "(not_found)"},
	} {
		args := append(tc.args[:1:1], append([]string{"--server", cl.url}, tc.args[1:]...)...)
		_, errOut, err := runCLI(t, alice, "", args...)
		if code := exitCode(err); code != 2 || !strings.Contains(errOut, tc.want) {
			t.Fatalf("berth %s: exit %d, stderr %q; want 2 and %q", strings.Join(tc.args, " "), code, errOut, tc.want)
		}
	}

	// The job's end ends port-forward; an ended job is 409 for both.
	if _, err := asAlice.Cancel(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	select {
	case <-pf.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("port-forward still runs after its job ended:\n%s", pf.out)
	}
	if code := pf.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("port-forward exited %d when its job ended, want 0:\n%s", code, pf.out)
	}
	cl.awaitState(id, 30*time.Second, berth.JobCancelled)

	// The audit log holds each exec and each forwarded connection, by
	// whom, and nothing of the refused ones.
	counts := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(mustCLI(t, "", "", "audit", "export", "--data-dir", filepath.Join(cl.dir, "server"))), "\n") {
		var rec struct{ Action, Actor, Target string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("audit record %q: %v", line, err)
		}
		if strings.HasPrefix(rec.Action, "job.") && rec.Target == "job/"+id {
			counts[rec.Action+" by "+rec.Actor]++
		}
	}
	if counts["job.exec by alice"] != 2 || counts["job.exec by admin"] != 1 || counts["job.port_forward by alice"] < 1 ||
		counts["job.exec by bob"]+counts["job.exec by vera"]+counts["job.port_forward by bob"]+counts["job.port_forward by vera"] != 0 {
		t.Fatalf("audit records of the job: %v; want alice's 2 execs and her forwarded connections, admin's exec, none of the refused", counts)
	}
	for _, args := range [][]string{
		{"exec", "--server", cl.url, id, "--", "true"},
		{"port-forward", "--server", cl.url, id, fmt.Sprint(jobPort)},
	} {
		_, errOut, err := runCLI(t, alice, "", args...)
		if code := exitCode(err); code != 2 || !strings.Contains(errOut, "is cancelled, not running (conflict)") {
			t.Fatalf("berth %s on an ended job: exit %d, stderr %q; want 2 and a conflict naming its state", args[0], code, errOut)
		}
	}
}

// TestExecAndPortForwardReachAGangMember: --rank picks the member of a
// 2-node gang, on its own worker; a forwarded connection to a port
// nothing listens on is closed, and berth port-forward says why and goes
// on serving.
func TestExecAndPortForwardReachAGangMember(t *testing.T) {
	t.Parallel()
	cl := newCluster(t)
	cl.addAgent("n1")
	cl.addAgent("n2")
	gate := filepath.Join(t.TempDir(), "go")
	t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o644) })
	req := shellJob(`while [ ! -e ` + gate + ` ]; do sleep 0.05; done`)
	req.Nodes = 2
	req.Resources.GPUs = 2 // a whole worker each
	id := cl.submit(req)[0].ID
	d := cl.awaitState(id, time.Minute, berth.JobRunning)
	cl.eventually(30*time.Second, "both members running", func() bool {
		d = cl.job(id)
		running := 0
		for _, a := range d.AttemptList {
			if a.State == berth.AttemptRunning {
				running++
			}
		}
		return running == 2
	})
	hosts := map[int]string{}
	for _, a := range d.AttemptList {
		hosts[a.TaskIndex] = a.Host
	}
	for rank := range 2 {
		out := mustCLI(t, "", "", "exec", "--server", cl.url, "--rank", fmt.Sprint(rank), id, "--", "sh", "-c", `echo "$BERTH_TASK_INDEX $BERTH_HOST"`)
		if want := fmt.Sprintf("%d %s\n", rank, hosts[rank]); out != want {
			t.Fatalf("exec --rank %d printed %q, want %q", rank, out, want)
		}
	}
	_, errOut, err := runCLI(t, "", "", "exec", "--server", cl.url, "--rank", "2", id, "--", "true")
	if code := exitCode(err); code != 2 || !strings.Contains(errOut, "rank: job "+id+" has 2 node(s): rank must be 0 to 1") {
		t.Fatalf("exec --rank 2 of a 2-node gang: exit %d, stderr %q; want 2 naming rank", code, errOut)
	}

	// Nothing listens on the member's port: the connection is closed and
	// port-forward says so.
	_, closedPort, _ := net.SplitHostPort(freeAddr(t))
	local := freeAddr(t)
	_, localPort, _ := net.SplitHostPort(local)
	pf := start(t, "port-forward", "port-forward", "--server", cl.url, "--rank", "1", id, localPort+":"+closedPort)
	if _, ok := pf.out.await("Forwarding from "+local, 30*time.Second); !ok {
		t.Fatalf("port-forward did not start:\n%s", pf.out)
	}
	for range 2 { // each connection is tried on its own
		conn, err := net.Dial("tcp", local)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		if n, err := conn.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("read from a forwarded connection to a closed port: %d bytes, %v; want it closed", n, err)
		}
		conn.Close()
	}
	if _, ok := pf.out.await("port "+closedPort+" on "+hosts[1]+": dial tcp 127.0.0.1:"+closedPort+": connect: connection refused", 30*time.Second); !ok {
		t.Fatalf("port-forward did not say why the connection closed:\n%s", pf.out)
	}
	select {
	case <-pf.done:
		t.Fatalf("port-forward stopped after a refused connection:\n%s", pf.out)
	default:
	}
}
