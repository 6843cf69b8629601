package vasttest

import (
	"fmt"
	"slices"
	"strings"
)

// Host brings up the machines behind the fake's instances. Without one, a
// running instance has no sshd (its SSH port is 0), which is enough for
// tests of the API alone. The server calls Start when it first finds an
// instance running (a show or a list past its boot stages), and Stop when
// the instance is destroyed or vanishes, or the server is closed; both
// with the server's lock held, so they must not call the server.
type Host interface {
	// Start brings up the machine of instance id: keys are the account's SSH public keys
	// (authorized_keys lines), env and onstart the create request's. It returns the
	// loopback SSH port. Faults (Fault) change what it does.
	Start(id int64, machine int64, fault Fault, keys []string, env map[string]string, onstart string) (sshPort int, err error)
	// Stop tears the machine down (kills onstart's processes and sshd); unknown id: no error.
	Stop(id int64) error
}

// Fault is what goes wrong on one machine. The fake server acts on cdi,
// vanish and refused itself; ssh-key, no-libcuda, stall and oom are the Host's
// to act on (the server passes them through).
type Fault string

// The faults a machine can have.
const (
	FaultNone Fault = ""
	// FaultSSHKey: the account's keys are not installed (the SSH probe
	// meets a real "Permission denied (publickey)").
	FaultSSHKey Fault = "ssh-key"
	// FaultCDI: the container never starts; the instance stays created
	// with an "unresolvable CDI device" status_msg.
	FaultCDI Fault = "cdi"
	// FaultNoLibcuda: the machine has no libcuda.
	FaultNoLibcuda Fault = "no-libcuda"
	// FaultStall: the machine boots but its workload never gets ready.
	FaultStall Fault = "stall"
	// FaultVanish: the instance disappears from show and list once it
	// has been running (spot loss, host offline).
	FaultVanish Fault = "vanish"
	// FaultRefused: a create is refused (400) yet makes a contract,
	// stopped and billed until destroyed, as a bid created stopped is.
	FaultRefused Fault = "refused"
	// FaultOOM: the machine's GPU is too small for the workload: its
	// onstart runs with FAKEVLLM_OOM=1, which makes the fake vLLM server
	// crash with CUDA out of memory during its warm-up.
	FaultOOM Fault = "oom"
)

// Faults lists every fault but FaultNone.
var Faults = []Fault{FaultSSHKey, FaultCDI, FaultNoLibcuda, FaultStall, FaultVanish, FaultRefused, FaultOOM}

// ParseFault returns the fault named s, or an error listing the known ones.
func ParseFault(s string) (Fault, error) {
	if f := Fault(s); slices.Contains(Faults, f) {
		return f, nil
	}
	names := make([]string, len(Faults))
	for i, f := range Faults {
		names[i] = string(f)
	}
	return "", fmt.Errorf("unknown fault %q (one of %s)", s, strings.Join(names, ", "))
}
