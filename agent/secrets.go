package agent

import (
	"bytes"
	"maps"
	"slices"

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
		if err != nil {
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

// secretMask hides the values of an attempt's secrets in what the agent
// ships: its output, progress and result reason.
type secretMask struct {
	values   [][]byte // longest first
	longest  int
	redactor *auth.Redactor
}

// newSecretMask returns the mask of values, or nil when there are none.
func newSecretMask(values map[string]string) *secretMask {
	m := &secretMask{}
	var list []string
	for _, v := range values {
		if v != "" {
			list = append(list, v)
			m.values = append(m.values, []byte(v))
			m.longest = max(m.longest, len(v))
		}
	}
	if len(list) == 0 {
		return nil
	}
	slices.SortFunc(m.values, func(a, b []byte) int { return len(b) - len(a) })
	m.redactor = auth.NewRedactor(list)
	return m
}

// mask overwrites with '*', in place, every byte of every occurrence of a
// secret value in output, keeping its length so that shipped offsets stay
// those of the file. It returns how many leading bytes may be shipped: all
// of them when final (no more output follows), else none past where a
// value could begin that continues beyond output.
func (m *secretMask) mask(output []byte, final bool) int {
	if m == nil {
		return len(output)
	}
	cut := len(output)
	if !final {
		cut = max(0, len(output)-(m.longest-1))
	}
	for _, v := range m.values {
		for at := 0; ; {
			i := bytes.Index(output[at:], v)
			if i < 0 {
				break
			}
			start, end := at+i, at+i+len(v)
			for k := start; k < end; k++ {
				output[k] = '*'
			}
			if start < cut && end > cut {
				cut = end // masked whole: ship it whole
			}
			at = end
		}
	}
	return cut
}

// redact replaces every secret value in s with "***".
func (m *secretMask) redact(s string) string {
	if m == nil {
		return s
	}
	return m.redactor.Redact(s)
}
