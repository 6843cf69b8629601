package agent

import (
	"maps"
	"slices"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/redact"
	"github.com/berth-dev/berth/wire"
)

// expandSecrets returns m with the {{SECRET:NAME}} references of its
// command, env values and workdir replaced by the values it carries (m
// itself when it has none); an unknown name is an error naming it.
func expandSecrets(m *wire.JobAssign) (*wire.JobAssign, error) {
	if !slices.ContainsFunc(jobTexts(m), berth.HasSecretRefs) {
		return m, nil
	}
	out := *m
	var err error
	expand := func(s string) string {
		if err != nil || !berth.HasSecretRefs(s) {
			return s
		}
		var v string
		v, err = berth.ExpandSecrets(s, m.Secrets)
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

// jobTexts returns the parts of m that may reference secrets.
func jobTexts(m *wire.JobAssign) []string {
	return append(append([]string{m.Workdir}, m.Command...), slices.Collect(maps.Values(m.Env))...)
}

// secretRedactor returns the redactor of an assignment's secrets; nil (which
// redacts nothing) when it carries none.
func secretRedactor(m *wire.JobAssign) *redact.Redactor {
	if len(m.Secrets) == 0 {
		return nil
	}
	return redact.NewRedactor(slices.Collect(maps.Values(m.Secrets)))
}
