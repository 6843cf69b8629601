package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"

	"github.com/berth-dev/berth"
)

// TestCLIHabits runs the habits people bring from kubectl, Slurm and the
// shell, each against one server: the exit status and what stdout and
// stderr must hold. BERTH_SERVER names a dead address, so a command that
// reaches the server got --server from before or after its name.
func TestCLIHabits(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	_, out, _ := c.run("submit", "--name", "sweep", "--array", "3", "--", "sleep", "1000")
	sweep := strings.Fields(out)
	_, out, _ = c.run("submit", "--name", "single", "--", "sleep", "1000")
	single := strings.TrimSpace(out)
	if len(sweep) != 3 || single == "" {
		t.Fatalf("submit: %q, %q", sweep, single)
	}
	srv := "--server=" + c.url
	for _, tc := range []struct {
		args             []string
		code             int
		stdout, stderr   []string // each must appear
		noStdout, noLine string   // must not appear in stdout / stderr
		token            string   // $BERTH_TOKEN
	}{
		// Client flags before the command, as after it; one definition.
		{args: []string{"--server", c.url, "-o", "json", "jobs"}, stdout: []string{`"id": "` + single}},
		{args: []string{"-o", "yaml", srv, "jobs", "--name", "single"}, stdout: []string{"- id: " + single, "name: single"}, noStdout: "sweep"},
		{args: []string{srv, "quota", "list", "-o", "json"}, stdout: []string{"[]"}},
		{args: []string{"-o", "json", srv, "quota", "list"}, stdout: []string{"[]"}},
		{args: []string{"jobs", srv}, stdout: []string{"ID", single}},
		{args: []string{"jobs"}, code: exitUsage, stderr: []string{"cannot reach the server at http://127.0.0.1:1"}},
		{args: []string{srv}, code: exitUsage, stderr: []string{"command: give a command"}},
		{args: []string{"--sever", c.url, "jobs"}, code: exitUsage, stderr: []string{"--sever: no such flag (did you mean --server?); berth -h lists"}, noStdout: "Usage"},
		{args: []string{srv, "up"}, code: exitUsage, stderr: []string{"--server: no such flag", "berth up -h"}},
		// A repeated single-value flag is an error naming it; a repeatable one is not.
		{args: []string{srv, "jobs", "--server", c.url}, code: exitUsage, stderr: []string{"--server: given more than once"}},
		{args: []string{srv, "jobs", "--limit", "1", "--limit=2"}, code: exitUsage, stderr: []string{"--limit: given more than once"}},
		{args: []string{srv, "submit", "--gpus", "1", "--name", "twice", "--gpus", "2", "--", "true"}, code: exitUsage,
			stderr: []string{"--gpus: given more than once"}},
		{args: []string{srv, "cancel", "--name", "a", "--name", "b"}, code: exitUsage, stderr: []string{"--name: given more than once"}},
		{args: []string{srv, "submit", "--name", "envs", "--env", "A=1", "--env", "B=2", "--", "sleep", "1000"}, stdout: []string{"0"}},
		// berth jobs: arrays as one row, --expand, -q, -o name, -o wide.
		{args: []string{srv, "jobs", "--name", "sweep"}, stdout: []string{"ID ", "HOST", sweep[0] + "_[0-2]", "3 pending"}, noStdout: sweep[1]},
		{args: []string{srv, "jobs", "--name", "sweep", "--expand"}, stdout: []string{sweep[0] + " ", sweep[1] + " ", sweep[2] + " "}, noStdout: "_["},
		{args: []string{srv, "jobs", "--name", "sweep", "-q"}, stdout: []string{sweep[2] + "\n" + sweep[1] + "\n" + sweep[0] + "\n"}, noStdout: "ID"},
		{args: []string{srv, "jobs", "--name", "single", "-o", "name"}, stdout: []string{"job/" + single + "\n"}},
		{args: []string{srv, "jobs", "--name", "single", "-o", "wide"}, stdout: []string{"COMMAND", "sleep 1000", "ATTEMPTS"}},
		{args: []string{srv, "jobs", "-o", "xml"}, code: exitUsage, stderr: []string{`-o: "xml": must be table, json, yaml, wide, name`}},
		{args: []string{srv, "jobs", "-o", "yml"}, code: exitUsage, stderr: []string{"(did you mean yaml?)"}},
		{args: []string{srv, "jobs", "-q", "-o", "json"}, code: exitUsage, stderr: []string{"-q: prints only ids"}},
		{args: []string{srv, "jobs", "extra"}, code: exitUsage, stderr: []string{"takes no arguments"}},
		// Help, version, completion, did you mean.
		{args: []string{"help", "jobs"}, stdout: []string{"Usage: berth jobs", "--expand", "--name", "-q"}},
		{args: []string{"help", "quota", "set"}, stdout: []string{"Usage: berth quota set", "--server"}},
		{args: []string{"help", "quota"}, stdout: []string{"Usage: berth quota set|list|rm"}},
		{args: []string{"help", "version"}, stdout: []string{"Usage: berth version"}},
		{args: []string{"help", "jbos"}, code: exitUsage, stderr: []string{"did you mean jobs?"}},
		{args: []string{"jbos"}, code: exitUsage, stderr: []string{`unknown command "jbos" (did you mean jobs?)`}},
		{args: []string{"frobnicate"}, code: exitUsage, stderr: []string{`unknown command "frobnicate" (see berth help)`}, noLine: "did you mean"},
		{args: []string{srv, "quota", "lst"}, code: exitUsage, stderr: []string{`unknown subcommand "lst" (did you mean list?)`}},
		{args: []string{srv, "jobs", "--nmae", "x"}, code: exitUsage, stderr: []string{"--nmae: no such flag (did you mean --name?)"}},
		{args: []string{"version"}, stdout: []string{"berth dev (module "}},
		{args: []string{"--version"}, stdout: []string{"berth dev (module "}},
		{args: []string{"completion", "bash"}, stdout: []string{"complete -F _berth berth", `"jobs") words="`}},
		{args: []string{"completion", "fish"}, stdout: []string{"complete -c berth -n __fish_use_subcommand -a jobs -d 'list jobs'"}},
		{args: []string{"completion", "zsh"}, stdout: []string{"#compdef berth", "bashcompinit"}},
		{args: []string{"completion", "bsh"}, code: exitUsage, stderr: []string{"shell: \"bsh\": must be bash, zsh or fish (did you mean bash?)"}},
		{args: []string{"completion"}, code: exitUsage, stderr: []string{"shell: give one shell"}},
		// Cancelling is idempotent: nothing matching and an ended job both exit 0 with a note.
		{args: []string{srv, "cancel", "--name", "nothing-has-this-name"}, stderr: []string{"no active job matches"}},
		{args: []string{srv, "cancel", "01NOSUCHJOB"}, code: exitUsage, stderr: []string{"not_found"}},
		// Webhook event names are checked by the server, which names the field.
		{args: []string{srv, "webhook", "add", "http://127.0.0.1:1/hook", "--events", "job.,job.finishd"}, code: exitUsage,
			stderr: []string{`events: entry 1 "job.finishd": no such event type`, "job.succeeded"}},
		// A refused token: the hint names the variable that sent it.
		{args: []string{srv, "jobs"}, token: "not-a-token", code: exitUsage,
			stderr: []string{"(unauthorized)", "the server refused the token in $BERTH_TOKEN"}},
	} {
		name := strings.Join(tc.args, " ")
		env := map[string]string{"BERTH_SERVER": "http://127.0.0.1:1", "BERTH_TOKEN": tc.token,
			"BERTH_CREDENTIALS": filepath.Join(t.TempDir(), "none.json")}
		var stdout, stderr bytes.Buffer
		m := &Main{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr, Getenv: func(k string) string { return env[k] }}
		code := m.Run(context.Background(), tc.args)
		if code != tc.code {
			t.Errorf("berth %s: exit %d, want %d\nstdout: %s\nstderr: %s", name, code, tc.code, stdout.String(), stderr.String())
			continue
		}
		for _, want := range tc.stdout {
			if !strings.Contains(stdout.String(), want) {
				t.Errorf("berth %s: stdout lacks %q:\n%s", name, want, stdout.String())
			}
		}
		for _, want := range tc.stderr {
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("berth %s: stderr lacks %q:\n%s", name, want, stderr.String())
			}
		}
		if tc.noStdout != "" && strings.Contains(stdout.String(), tc.noStdout) {
			t.Errorf("berth %s: stdout holds %q:\n%s", name, tc.noStdout, stdout.String())
		}
		if tc.noLine != "" && strings.Contains(stderr.String(), tc.noLine) {
			t.Errorf("berth %s: stderr holds %q:\n%s", name, tc.noLine, stderr.String())
		}
		if tc.code != 0 && strings.Count(stderr.String(), "\n") != 1 {
			t.Errorf("berth %s: stderr %q, want one line", name, stderr.String())
		}
	}
	// Refused input stored nothing.
	for _, j := range c.listJobs() {
		if j.Name == "twice" {
			t.Errorf("a submit with --gpus twice stored job %s", j.ID)
		}
	}
	var list []berth.Job
	_, out, _ = c.run("jobs", "-o", "yaml", "--name", "sweep")
	if err := yaml.Unmarshal([]byte(out), &list); err != nil || len(list) != 3 || list[0].ID != sweep[2] || list[0].State != berth.JobPending {
		t.Errorf("jobs -o yaml: %v, %+v; want the 3 jobs of the array, newest first", err, list)
	}
}

// TestHelpIsAligned: the summaries of berth help start in one column,
// the longest command's name and two spaces in.
func TestHelpIsAligned(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	m := &Main{Stdout: &out, Stderr: &out, Getenv: func(string) string { return "" }}
	if code := m.Run(context.Background(), []string{"help"}); code != 0 {
		t.Fatalf("berth help: exit %d", code)
	}
	_, list, _ := strings.Cut(out.String(), "Commands:\n")
	list, _, _ = strings.Cut(list, "\n\n")
	lines := strings.Split(list, "\n")
	for _, line := range lines {
		name := strings.Fields(line)[0]
		at := strings.Index(line, summary(name))
		if want := len("  ") + len(slices.MaxFunc(commandNames(), func(a, b string) int { return len(a) - len(b) })) + len("  "); at != want {
			t.Errorf("berth help: %q starts its summary at %d, want %d", line, at, want)
		}
	}
	if len(lines) != len(commands)+len(builtins) {
		t.Errorf("berth help lists %d commands, want %d", len(lines), len(commands)+len(builtins))
	}
}

// TestVersionLine: berth version names the module version and the commit
// the build info holds, and says when the tree was modified.
func TestVersionLine(t *testing.T) {
	t.Parallel()
	info := &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}}
	for _, tc := range []struct {
		version string
		info    *debug.BuildInfo
		want    string
	}{
		{"1.0", info, "berth 1.0 (module v1.2.3, commit 0123456789ab, modified)"},
		{"dev", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "berth dev (module (devel), commit unknown)"},
		{"dev", nil, "berth dev (module unknown, commit unknown)"},
	} {
		if got := versionLine(tc.version, tc.info); got != tc.want {
			t.Errorf("versionLine(%q, …) = %q, want %q", tc.version, got, tc.want)
		}
	}
}

// TestSuggest: a typo gets the nearest name; a word unlike any gets none.
func TestSuggest(t *testing.T) {
	t.Parallel()
	names := commandNames()
	for _, tc := range []struct{ typed, want string }{
		{"jbos", " (did you mean jobs?)"},
		{"wrokers", " (did you mean workers?)"},
		{"scheduel", " (did you mean schedule?)"},
		{"xyz", ""},
		{"nope", ""},
		{"", ""},
	} {
		if got := suggest(tc.typed, names); got != tc.want {
			t.Errorf("suggest(%q) = %q, want %q", tc.typed, got, tc.want)
		}
	}
}

// TestBashCompletion sources berth completion bash in a real bash and
// completes commands, subcommands after client flags, and flags.
func TestBashCompletion(t *testing.T) {
	t.Parallel()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash on this machine:", err)
	}
	var script bytes.Buffer
	m := &Main{Stdout: &script, Stderr: &script, Getenv: func(string) string { return "" }}
	if code := m.Run(context.Background(), []string{"completion", "bash"}); code != 0 {
		t.Fatalf("berth completion bash: exit %d: %s", code, script.String())
	}
	file := filepath.Join(t.TempDir(), "berth.bash")
	if err := os.WriteFile(file, script.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	complete := func(words ...string) string {
		// COMP_WORDS as bash sets them; the last word is the one completed.
		cmd := exec.Command(bash, "--norc", "-c", `source "$1"; shift; complete -p berth; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _berth; echo "${COMPREPLY[*]}"`,
			"bash", file)
		cmd.Args = append(cmd.Args, words...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("bash completing %q: %v\n%s", words, err, out)
		}
		return string(out)
	}
	for _, tc := range []struct {
		words []string
		want  string
	}{
		{[]string{"berth", "jo"}, "complete -F _berth berth\njob jobs\n"},
		{[]string{"berth", "--server", "http://127.0.0.1:7070", "quota", "s"}, "set\n"},
		{[]string{"berth", "-o", "json", "schedule", "list", "--ser"}, "--server\n"},
		{[]string{"berth", "jobs", "--ex"}, "--expand\n"},
		{[]string{"berth", "completion", "f"}, "fish\n"},
		{[]string{"berth", "--ca-f"}, "--ca-fingerprint\n"},
	} {
		got := complete(tc.words...)
		if !strings.HasSuffix(got, tc.want) || !strings.HasPrefix(got, "complete -F _berth berth\n") {
			t.Errorf("completing %q: %q, want %q after complete -p's line", tc.words, got, tc.want)
		}
	}
}

// TestZshAndFishCompletion loads berth's zsh and fish scripts into the
// real shells (CI installs both): fish completes as a user's Tab would
// (complete -C); zsh registers the function through bashcompinit and it
// answers with a command's subcommands and flags (zsh's own matching then
// keeps those that fit the word typed).
func TestZshAndFishCompletion(t *testing.T) {
	t.Parallel()
	shell := func(name string) string {
		path, err := exec.LookPath(name)
		if err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("no %s on PATH: .ci/run installs it", name)
			}
			t.Skipf("no %s on this machine: %v", name, err)
		}
		return path
	}
	zsh, fish := shell("zsh"), shell("fish")
	script := func(sh string) string {
		var out bytes.Buffer
		m := &Main{Stdout: &out, Stderr: &out, Getenv: func(string) string { return "" }}
		if code := m.Run(context.Background(), []string{"completion", sh}); code != 0 {
			t.Fatalf("berth completion %s: exit %d: %s", sh, code, out.String())
		}
		file := filepath.Join(t.TempDir(), "berth."+sh)
		if err := os.WriteFile(file, out.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		return file
	}
	run := func(name string, args ...string) string {
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %q: %v\n%s", name, args, err, out)
		}
		return string(out)
	}
	fishFile := script("fish")
	for line, want := range map[string][]string{
		"berth jo":                    {"job\t", "jobs\t"},
		"berth jobs --ex":             {"--expand"},
		"berth --server x quota s":    {"set"},
		"berth completion f":          {"fish"},
		"berth -o json workers --ser": {"--server"},
	} {
		got := run(fish, "--no-config", "-c", `source $argv[1]; complete -C $argv[2]`, fishFile, line)
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("fish completing %q: %q, want %q in it", line, got, w)
			}
		}
	}
	got := run(zsh, "-f", "-c", `autoload -U compinit && compinit -u; source $1; print -r -- "$_comps[berth]"; `+
		`setopt ksharrays; COMP_WORDS=(berth --server x quota s); COMP_CWORD=4; _berth; print -r -- "${COMPREPLY[*]}"; `+
		`COMP_WORDS=(berth jobs --ex); COMP_CWORD=2; _berth; print -r -- "${COMPREPLY[*]}"`, "zsh", script("zsh"))
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "_berth") || lines[1] != "list rm set" || !strings.Contains(lines[2], "--expand") {
		t.Errorf("zsh: %q; want berth registered to _berth, quota's subcommands, and jobs' flags with --expand", got)
	}
}

// TestNoTokenHint: a server that trusts no client without a token answers
// 401 in HTTP's words; berth adds the variable that sends one.
func TestNoTokenHint(t *testing.T) {
	t.Parallel()
	rs, err := startServer(context.Background(), &serverConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0",
		Security: securityConfig{TrustLoopback: "none"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close(context.Background()) })
	var stdout, stderr bytes.Buffer
	env := map[string]string{"BERTH_CREDENTIALS": filepath.Join(t.TempDir(), "none.json")}
	m := &Main{Stdout: &stdout, Stderr: &stderr, Getenv: func(k string) string { return env[k] }}
	code := m.Run(context.Background(), []string{"--server", rs.URL, "jobs"})
	if line := stderr.String(); code != exitUsage || !strings.Contains(line, "send Authorization: Bearer TOKEN") ||
		!strings.Contains(line, "(unauthorized); set BERTH_TOKEN to a token of this server") || strings.Count(line, "\n") != 1 {
		t.Errorf("berth jobs without a token: exit %d, %q; want the API's message and the CLI's hint, one line", code, line)
	}
}
