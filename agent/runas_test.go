package agent

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestReadUserMap reads a map file's mappings and refuses a malformed line
// or a user mapped twice, naming the line.
func TestReadUserMap(t *testing.T) {
	dir := t.TempDir()
	write := func(content string) string {
		path := filepath.Join(dir, "map")
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	m, err := ReadUserMap(write("# Berth user, Unix account\nalice  alice_l\n\n  bob bob2 \n"))
	if err != nil || !reflect.DeepEqual(m, map[string]string{"alice": "alice_l", "bob": "bob2"}) {
		t.Fatalf("ReadUserMap = %v, %v", m, err)
	}
	for content, want := range map[string]string{
		"alice\n":              `map:1: "alice": want BERTHUSER UNIXACCOUNT`,
		"a b\nc d e\n":         `map:2: "c d e"`,
		"a b\na c\n":           `map:2: Berth user "a" is mapped twice`,
		"# only comments\na\n": `map:2`,
	} {
		if _, err := ReadUserMap(write(content)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ReadUserMap(%q) = %v, want an error with %q", content, err, want)
		}
	}
	if _, err := ReadUserMap(filepath.Join(dir, "missing")); err == nil {
		t.Error("ReadUserMap of a missing file succeeded")
	}
}

// TestAccountOf maps Berth users to accounts under the map policy (the
// map's account, else the same name), refuses a missing account and uid
// 0 unless allowed, and maps nothing under the agent policy.
func TestAccountOf(t *testing.T) {
	cfg := &Config{RunAs: RunAsMap, UserMap: map[string]string{"boss": "root", "ghost": "no-such-account-berth"}}
	for user, want := range map[string]string{
		"boss":                  `Berth user "boss" maps to "root", which is uid 0; jobs run as root only with --allow-root-jobs`,
		"root":                  `which is uid 0`,
		"ghost":                 `no Unix account "no-such-account-berth" (mapped by --user-map)`,
		"no-such-account-berth": `no Unix account "no-such-account-berth" (the account of the same name)`,
		"":                      `the job has no Berth user`,
	} {
		if a, err := accountOf(cfg, user); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("accountOf(%q) = %+v, %v; want an error with %q", user, a, err, want)
		}
	}
	cfg.AllowRootJobs = true
	a, err := accountOf(cfg, "boss")
	if err != nil || a.name != "root" || a.uid != 0 || a.gid != 0 || !strings.Contains(strings.Join(a.env(), " "), "USER=root LOGNAME=root") {
		t.Fatalf("accountOf(boss) with root allowed = %+v, %v", a, err)
	}
	if a, err := accountOf(&Config{}, "alice"); a != nil || err != nil {
		t.Fatalf("accountOf under the agent policy = %+v, %v; want nothing", a, err)
	}
}

// TestCheckRunAs refuses an unknown policy and a user map without the map
// policy.
func TestCheckRunAs(t *testing.T) {
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{Config{RunAs: "nobody"}, `--run-as "nobody": want map or agent`},
		{Config{UserMap: map[string]string{"a": "b"}}, "a user map needs --run-as map"},
		{Config{RunAs: RunAsAgent}, ""},
		{Config{}, ""},
	} {
		err := checkRunAs(&tt.cfg)
		if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("checkRunAs(%+v) = %v, want %q", tt.cfg, err, tt.want)
		}
	}
}
