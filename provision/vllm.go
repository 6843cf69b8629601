package provision

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/cloud"
	"github.com/berth-dev/berth/service"
)

// A bare vLLM node (a pool whose Workload is berth.WorkloadVLLM) runs
// vllm serve from its onstart instead of berth agent, and its last phase,
// the workload's warm-up, is checked over SSH: vLLM's log (the startup
// markers reached, its fatal lines) and then its /v1/models, which must
// list the pool's model. The markers and fatal patterns are the vllm
// service template's (service.Builtin), so a service job and a node are
// judged alike (docs/pools.md, "A bare vLLM node").

// VLLMLog is where a vLLM node's onstart writes vllm serve's output:
// relative to the instance's home directory ($HOME; /root on Vast), which
// its SSH sessions share.
const VLLMLog = "vllm.log"

// DefaultVLLMImage is the container image of a vLLM pool that names none:
// vLLM's official OpenAI-compatible server image, whose vllm command the
// onstart runs.
const DefaultVLLMImage = "vllm/vllm-openai:v0.10.1"

// noVLLM is what a vLLM node's onstart writes to its log when the image
// has no vllm command: the image's fault (workload-fatal).
const noVLLM = "berth: the image has no vllm command on its PATH"

// VLLMOnstart is the onstart script of an instance of vLLM pool: from the
// home directory, vllm serve of the pool's model on its port, on every
// interface, served under the model's name, over the instance's GPUs
// (tensor parallel), with the pool's max_model_len when set, its output
// appended to VLLMLog. It is plain sh.
func VLLMOnstart(pool *berth.Pool) string {
	m := berth.ShellQuote(pool.Model)
	args := fmt.Sprintf("serve %s --port %d --host 0.0.0.0 --served-model-name %s --tensor-parallel-size %d", m, pool.Port, m, max(pool.GPUs, 1))
	if pool.MaxModelLen > 0 {
		args += " --max-model-len " + strconv.Itoa(pool.MaxModelLen)
	}
	return fmt.Sprintf(`cd "${HOME:-/root}" || exit 1
command -v vllm >/dev/null || { echo %s >>%s; exit 127; }
exec vllm %s >>%s 2>&1
`, berth.ShellQuote(noVLLM), VLLMLog, args, VLLMLog)
}

// VLLMEnv is the environment an instance of vLLM pool is created with: the
// docker flag that exposes its port ("-p 8000:8000").
func VLLMEnv(pool *berth.Pool) map[string]string {
	return map[string]string{fmt.Sprintf("-p %d:%d", pool.Port, pool.Port): "1"}
}

// vllmLogProbe reads the last maxLogRead bytes of the node's log; a log
// not written yet is no output.
var vllmLogProbe = fmt.Sprintf(`f="$HOME/%s"; if [ -f "$f" ]; then tail -c %d "$f"; fi`, VLLMLog, maxLogRead)

// maxLogRead is how much of the end of a vLLM node's log one check reads:
// the markers and fatal lines written since the check before, a poll
// apart.
const maxLogRead = 256 << 10

// modelsProbe is the readiness probe of a vLLM node listening on port:
// its /v1/models, with curl, else python3 (which vLLM's images have).
func modelsProbe(port int) string {
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/models", port)
	return fmt.Sprintf(`if command -v curl >/dev/null; then curl -fsS --max-time 5 %s; else python3 -c 'import sys,urllib.request as u; sys.stdout.write(u.urlopen(sys.argv[1], timeout=5).read().decode())' %s; fi`, url, url)
}

// processPrefix is the process tag vLLM starts its lines with:
// "(EngineCore_0 pid=123) ", "(APIServer pid=1) ".
var processPrefix = regexp.MustCompile(`^\s*\([^()]*\bpid=\d+\)\s*`)

// vllmLine is one line of vLLM's log as matched and shown: without ANSI
// codes and process prefix, trimmed.
func vllmLine(line string) string {
	return strings.TrimSpace(processPrefix.ReplaceAllString(berth.StripANSI(line), ""))
}

// vllmWatch is what the checks of one drive have seen of a node's log.
type vllmWatch struct {
	spec  service.Readiness
	seen  map[string]bool // markers reached
	last  string          // the last marker reached, in the markers' order
	count int             // markers reached
}

func newVLLMWatch() *vllmWatch {
	return &vllmWatch{spec: service.Builtin()[berth.WorkloadVLLM].Readiness, seen: map[string]bool{}}
}

// scan matches log against the markers and fatal patterns: it returns
// how many markers were reached for the first time, and the first fatal
// line with its class ("" for none). Lines end at '\n' or '\r' (progress
// bars).
func (w *vllmWatch) scan(log string) (advanced int, fatal, class string) {
	for _, raw := range strings.FieldsFunc(log, func(r rune) bool { return r == '\n' || r == '\r' }) {
		line := vllmLine(raw)
		lower := strings.ToLower(line)
		if class == "" {
			if strings.Contains(line, noVLLM) {
				fatal, class = line, berth.FailureWorkloadFatal
			}
			for _, f := range w.spec.Fatal {
				if class == "" && strings.Contains(lower, strings.ToLower(f.Substring)) {
					fatal, class = berth.Clip(line, 300), f.Class
				}
			}
		}
		for _, m := range w.spec.Markers {
			if !w.seen[m] && strings.Contains(lower, strings.ToLower(m)) {
				w.seen[m] = true
				w.count++
				advanced++
			}
		}
	}
	for _, m := range w.spec.Markers {
		if w.seen[m] {
			w.last = m
		}
	}
	return advanced, fatal, class
}

// summary says how far the warm-up got: the markers reached.
func (w *vllmWatch) summary() string {
	if w.count == 0 {
		return "no startup marker yet"
	}
	return fmt.Sprintf("%d of %d startup markers; last %q", w.count, len(w.spec.Markers), w.last)
}

// vllmServing is a vLLM node's ready phase's check: over SSH, its log
// (a fatal line fails it with its class: CUDA out of memory or a dead
// engine blame the workload, a missing libcuda the machine), then its
// /v1/models, which must list the pool's model. Until then a new marker
// is progress (warm-up), none is unknown: both wait within the phase's
// budget. An instance that vanishes or goes offline meanwhile is
// infra-fatal (vanished: the *Failure show returns). Once it serves, inst's Endpoint is its public address for
// the port, when the provider maps one.
func (d *driver) vllmServing(ctx context.Context) (bool, string, string, error) {
	if ok, class, why := d.connect(ctx); !ok {
		return false, class, why, nil
	}
	if d.vllm == nil {
		d.vllm = newVLLMWatch()
	}
	w := d.vllm
	code, out, err := run(ctx, d.ssh, vllmLogProbe, d.p.DialTimeout)
	if err != nil {
		why := "reading the vLLM log: " + err.Error()
		d.p.probe(d.inst, d.r, vllmLogProbe, nil, why, berth.FailureWarmup)
		d.closeSSH()
		return false, berth.FailureWarmup, why, nil
	}
	advanced, fatal, class := w.scan(out)
	if class != "" {
		d.p.probe(d.inst, d.r, vllmLogProbe, &code, w.summary()+"\n"+fatal, class)
		return false, class, "vLLM log: " + fatal, nil
	}
	logClass := berth.FailureUnknown
	if advanced > 0 {
		logClass = berth.FailureWarmup
	}
	d.p.probe(d.inst, d.r, vllmLogProbe, &code, w.summary(), logClass)

	why := "vllm not serving yet: " + w.summary()
	probe := modelsProbe(d.pool.Port)
	code, out, err = run(ctx, d.ssh, probe, d.p.DialTimeout)
	switch {
	case err != nil:
		d.p.probe(d.inst, d.r, probe, nil, err.Error(), berth.FailureWarmup)
		d.closeSSH()
		return false, berth.FailureWarmup, "the /v1/models probe: " + err.Error(), nil
	case code != 0:
		d.p.probe(d.inst, d.r, probe, &code, out, berth.FailureWarmup)
	default:
		listed, served := servedModels(out, d.pool.Model)
		if served {
			d.p.probe(d.inst, d.r, probe, &code, out, "")
			pi, class, why, err := d.show(ctx)
			if err != nil || pi == nil || class != "" && class != berth.FailureWarmup {
				return false, class, why, err
			}
			d.inst.Endpoint = endpoint(pi, d.pool.Port)
			where := "its port " + strconv.Itoa(d.pool.Port) + " reached over SSH only (the provider maps no public port)"
			if d.inst.Endpoint != "" {
				where = "http://" + d.inst.Endpoint
			}
			return true, "", fmt.Sprintf("vllm serves %s at %s (%s)", d.pool.Model, where, w.summary()), nil
		}
		d.p.probe(d.inst, d.r, probe, &code, out, berth.FailureWarmup)
		logClass = berth.FailureWarmup
		why = fmt.Sprintf("/v1/models lists %s, not %q", listed, d.pool.Model)
	}
	_, class, swhy, err := d.show(ctx)
	if err != nil || class == berth.FailureInfraFatal || class == berth.FailureWorkloadFatal {
		return false, class, swhy, err
	}
	return false, logClass, why, nil
}

// servedModels reads a /v1/models answer: the ids it lists, and whether
// model is among them.
func servedModels(out, model string) (listed string, served bool) {
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &list); err != nil {
		return "no model list (" + err.Error() + ")", false
	}
	ids := make([]string, 0, len(list.Data))
	for _, m := range list.Data {
		if m.ID == model {
			return "", true
		}
		ids = append(ids, strconv.Quote(m.ID))
	}
	return "[" + strings.Join(ids, ", ") + "]", false
}

// endpoint is where a node's port is reached from outside: the
// instance's public address and the public port the provider maps to
// it; "" when it maps none.
func endpoint(pi *cloud.ProviderInstance, port int) string {
	if pi.PublicIP == "" || pi.Ports[port] == 0 {
		return ""
	}
	return net.JoinHostPort(pi.PublicIP, strconv.Itoa(pi.Ports[port]))
}
