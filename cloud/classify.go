package cloud

import (
	"slices"
	"strings"

	"github.com/berth-dev/berth"
)

// Where a piece of failure text came from, for Classify: the same words
// mean different things in different places (a status_msg's
// "unauthorized" is a bad image credential; an SSH error's timeout is a
// machine still booting).
const (
	WhereStatus    = "actual_status" // the provider's actual_status of an instance
	WhereStatusMsg = "status_msg"    // the provider's status_msg (docker errors)
	WhereSSH       = "ssh"           // an SSH probe's error
	WhereGPU       = "gpu"           // the GPU sanity probe's output (nvidia-smi, the libcuda check)
	WhereProbe     = "probe"         // an HTTP readiness probe's error or status
)

// signature is one line of the failure-signature table: text from one of
// wheres containing every one of all (case-insensitive) is of class.
type signature struct {
	wheres []string
	all    []string
	class  string
}

// signatures is the table of docs/pools.md ("Failure classes") but its
// warm-up log rows, which are the vllm service template's fatal patterns
// (package service, read by provision for a vLLM node); first match wins: infra-fatal lines come before the warm-up ones they would
// otherwise overlap ("ssh: handshake failed: ssh: unable to
// authenticate" is a refused key, not a daemon still starting).
var signatures = []signature{
	{[]string{WhereStatusMsg}, []string{"unresolvable cdi device"}, berth.FailureInfraFatal},
	{[]string{WhereStatusMsg}, []string{"failed to inject cdi devices"}, berth.FailureInfraFatal},
	{[]string{WhereStatusMsg}, []string{`could not select device driver "cdi"`}, berth.FailureInfraFatal},
	{[]string{WhereStatusMsg}, []string{"oci runtime create failed"}, berth.FailureInfraFatal},
	{[]string{WhereStatusMsg}, []string{"nvidia-container-cli: initialization error"}, berth.FailureInfraFatal},
	{[]string{WhereStatusMsg}, []string{"libnvidia-ml.so.1"}, berth.FailureInfraFatal},
	{[]string{WhereStatusMsg}, []string{"pull access denied"}, berth.FailureWorkloadFatal},
	{[]string{WhereStatusMsg}, []string{"manifest", "not found"}, berth.FailureWorkloadFatal},
	{[]string{WhereStatusMsg}, []string{"unauthorized"}, berth.FailureWorkloadFatal},

	{[]string{WhereGPU}, []string{"nvidia-smi has failed"}, berth.FailureInfraFatal},
	{[]string{WhereGPU}, []string{"driver/library version mismatch"}, berth.FailureInfraFatal},
	{[]string{WhereGPU}, []string{"no devices were found"}, berth.FailureInfraFatal},
	{[]string{WhereGPU}, []string{"gpu has fallen off the bus"}, berth.FailureInfraFatal},
	{[]string{WhereGPU}, []string{"nvidia-smi: command not found"}, berth.FailureInfraFatal},
	{[]string{WhereGPU}, []string{"nvidia-smi: not found"}, berth.FailureInfraFatal},
	{[]string{WhereGPU}, []string{"cannot find -lcuda"}, berth.FailureInfraFatal},
	{[]string{WhereGPU}, []string{"libcuda.so cannot found"}, berth.FailureInfraFatal},

	{[]string{WhereSSH}, []string{"permission denied"}, berth.FailureInfraFatal},
	{[]string{WhereSSH}, []string{"unable to authenticate"}, berth.FailureInfraFatal},
	{[]string{WhereSSH, WhereProbe}, []string{"connection refused"}, berth.FailureWarmup},
	{[]string{WhereSSH, WhereProbe}, []string{"timeout"}, berth.FailureWarmup},
	{[]string{WhereSSH, WhereProbe}, []string{"timed out"}, berth.FailureWarmup},
	{[]string{WhereSSH}, []string{"kex_exchange_identification"}, berth.FailureWarmup},
	{[]string{WhereSSH, WhereProbe}, []string{"connection reset"}, berth.FailureWarmup},
	{[]string{WhereSSH}, []string{"handshake failed"}, berth.FailureWarmup},
	{[]string{WhereProbe}, []string{"503"}, berth.FailureWorkloadFatal},

	{[]string{WhereStatus}, []string{"offline"}, berth.FailureInfraFatal},
	{[]string{WhereStatus}, []string{"unknown"}, berth.FailureInfraFatal},
}

// Classify returns the failure class (berth.Failure*) of text seen at
// where (Where*): FailureInfraFatal blames the machine (destroy it,
// quarantine it, take the next offer), FailureWorkloadFatal the image or
// the job (stop, report, the host is not blamed), FailureWarmup is a
// machine not ready yet (keep waiting within the phase's budget).
// Text nothing in the table recognises is FailureUnknown (keep trying
// within the budget).
func Classify(where, text string) string {
	lower := strings.ToLower(text)
	for _, s := range signatures {
		if !slices.Contains(s.wheres, where) {
			continue
		}
		if matchesAll(lower, s.all) {
			return s.class
		}
	}
	return berth.FailureUnknown
}

// matchesAll reports whether lower contains every one of all.
func matchesAll(lower string, all []string) bool {
	for _, sub := range all {
		if !strings.Contains(lower, sub) {
			return false
		}
	}
	return true
}
