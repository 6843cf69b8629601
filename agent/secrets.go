package agent

import (
	"maps"
	"slices"
	"strings"

	"github.com/berth-dev/berth/auth"
	"github.com/berth-dev/berth/wire"
)

// expandSecrets returns m with the {{SECRET:NAME}} references of its
// command, env values and workdir replaced by the values it carries; an
// unknown name is an error naming it.
func expandSecrets(m *wire.JobAssign) (*wire.JobAssign, error) {
	out := *m
	var err error
	expand := func(s string) string {
		if err != nil || !strings.Contains(s, "{{SECRET:") {
			return s
		}
		var v string
		v, err = auth.ExpandSecrets(s, m.Secrets)
		return v
	}
	out.Command = make([]string, len(m.Command))
	for i, arg := range m.Command {
		out.Command[i] = expand(arg)
	}
	out.Env = maps.Clone(m.Env)
	for k, v := range out.Env {
		out.Env[k] = expand(v)
	}
	out.Workdir = expand(m.Workdir)
	return &out, err
}

// secretValues returns the values of an assignment's secrets.
func secretValues(m *wire.JobAssign) []string {
	return slices.Collect(maps.Values(m.Secrets))
}
