package agent

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"
	"syscall"
)

// Run-as policies (Config.RunAs, berth agent --run-as): which Unix
// account an attempt's processes run as.
const (
	RunAsAgent = "agent" // the agent's own account (the default)
	RunAsMap   = "map"   // the account mapped from the job's Berth user (Config.UserMap; default: the account of the same name)
)

// account is the Unix account an attempt runs as.
type account struct {
	name     string
	uid, gid uint32
	groups   []uint32 // supplementary groups
	home     string
}

// credential is what the child takes on before it runs the command:
// setgroups, setgid, setuid.
func (a *account) credential() *syscall.Credential {
	return &syscall.Credential{Uid: a.uid, Gid: a.gid, Groups: a.groups}
}

// env is HOME, USER and LOGNAME of the account.
func (a *account) env() []string {
	return []string{"HOME=" + a.home, "USER=" + a.name, "LOGNAME=" + a.name}
}

// chown gives the account the files at paths.
func (a *account) chown(paths ...string) error {
	for _, p := range paths {
		if err := os.Lchown(p, int(a.uid), int(a.gid)); err != nil {
			return fmt.Errorf("run as %s: %w", a.name, err)
		}
	}
	return nil
}

// checkRunAs checks the run-as settings of cfg: a known policy, and root
// for the map policy (only root can run a process as another account).
func checkRunAs(cfg *Config) error {
	switch cfg.RunAs {
	case "", RunAsAgent:
		if len(cfg.UserMap) > 0 {
			return errors.New("agent: a user map needs --run-as map")
		}
		return nil
	case RunAsMap:
		if os.Geteuid() != 0 {
			return fmt.Errorf("agent: --run-as map needs the agent to run as root (it runs as uid %d)", os.Geteuid())
		}
		return nil
	}
	return fmt.Errorf("agent: --run-as %q: want %s or %s", cfg.RunAs, RunAsMap, RunAsAgent)
}

// accountOf returns the account the attempts of Berth user name run as
// under cfg: nil to run as the agent; under the map policy, the account
// cfg.UserMap names for the user, or the account of the same name. It
// refuses, saying why, a user without an account and, unless
// cfg.AllowRootJobs, an account of uid 0.
func accountOf(cfg *Config, name string) (*account, error) {
	if cfg.RunAs != RunAsMap {
		return nil, nil
	}
	if name == "" {
		return nil, errors.New("run as: the job has no Berth user to map to a Unix account (--run-as map)")
	}
	unix, mapped := cfg.UserMap[name]
	if !mapped {
		unix = name
	}
	how := "the account of the same name"
	if mapped {
		how = "mapped by --user-map"
	}
	u, err := user.Lookup(unix)
	if err != nil {
		return nil, fmt.Errorf("run as: Berth user %q: no Unix account %q (%s): %w", name, unix, how, err)
	}
	uid, uerr := strconv.ParseUint(u.Uid, 10, 32)
	gid, gerr := strconv.ParseUint(u.Gid, 10, 32)
	if uerr != nil || gerr != nil {
		return nil, fmt.Errorf("run as: account %q: uid %q, gid %q are not numbers", unix, u.Uid, u.Gid)
	}
	if uid == 0 && !cfg.AllowRootJobs {
		return nil, fmt.Errorf("run as: Berth user %q maps to %q, which is uid 0; jobs run as root only with --allow-root-jobs", name, unix)
	}
	gids, err := u.GroupIds()
	if err != nil {
		return nil, fmt.Errorf("run as: groups of %q: %w", unix, err)
	}
	a := &account{name: u.Username, uid: uint32(uid), gid: uint32(gid), home: u.HomeDir}
	for _, g := range gids {
		if n, err := strconv.ParseUint(g, 10, 32); err == nil {
			a.groups = append(a.groups, uint32(n))
		}
	}
	return a, nil
}

// ReadUserMap reads a user map file (berth agent --user-map): one mapping
// a line, "BERTHUSER UNIXACCOUNT", with blank lines and lines starting
// with # ignored. A line that is not two words, or a Berth user named
// twice, is an error naming the line.
func ReadUserMap(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("user map: %w", err)
	}
	m := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("user map %s:%d: %q: want BERTHUSER UNIXACCOUNT", path, n, line)
		}
		if _, dup := m[f[0]]; dup {
			return nil, fmt.Errorf("user map %s:%d: Berth user %q is mapped twice", path, n, f[0])
		}
		m[f[0]] = f[1]
	}
	return m, sc.Err()
}
