package provision

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/cloud"
	"github.com/berth-dev/berth/redact"
	"golang.org/x/crypto/ssh"
)

// drive takes inst from its phase to ready, phase by phase. A failure is
// acted on by its class (failed; vanished for an instance the provider
// no longer has) and returned as a *Failure; an error of ctx or of the
// store is returned as it is, the instance left where it stands for a
// later Provision to resume.
func (p *Provisioner) drive(ctx context.Context, pool *berth.Pool, inst *berth.Instance) error {
	d := &driver{p: p, pool: pool, inst: inst, r: p.redactor(pool)}
	defer d.closeSSH()
	for {
		var err error
		switch inst.Phase {
		case berth.InstanceCreated:
			err = d.wait(ctx, p.Budgets.Running, berth.InstanceRunning, d.running)
		case berth.InstanceRunning:
			err = d.wait(ctx, p.Budgets.SSH, berth.InstanceSSH, d.sshReachable)
		case berth.InstanceSSH:
			err = d.wait(ctx, p.Budgets.GPU, berth.InstanceGPUChecked, d.gpuSane)
		case berth.InstanceGPUChecked:
			err = d.wait(ctx, p.Budgets.Ready, berth.InstanceReady, d.workloadReady())
		case berth.InstanceReady:
			return p.record(ctx, pool, inst, "")
		default:
			return fmt.Errorf("provision: instance %s is %s, not on its way to ready", inst.ID, inst.Phase)
		}
		var f *Failure
		switch {
		case errors.As(err, &f) && f.Vanished:
			d.closeSSH()
			if err := p.lost(ctx, pool, inst, f.Reason); err != nil {
				return err
			}
			return f
		case errors.As(err, &f):
			return d.failed(ctx, f)
		}
		if err != nil {
			return err
		}
	}
}

// driver is one drive's state.
type driver struct {
	p    *Provisioner
	pool *berth.Pool
	inst *berth.Instance
	r    *redact.Redactor
	ssh  *ssh.Client // from the ssh phase on
	vllm *vllmWatch  // a vLLM node's log as read so far
}

// closeSSH closes the SSH connection, if any.
func (d *driver) closeSSH() {
	if d.ssh != nil {
		d.ssh.Close()
		d.ssh = nil
	}
}

// A check is one poll of a phase: done, or the class of why not (and
// why); err is an error that ends the drive as it is (the store's), or a
// vanished instance's *Failure. FailureUnknown is a poll that learnt
// nothing of the machine (the provider's API failed).
type check func(ctx context.Context) (done bool, class, why string, err error)

// wait polls c every Poll until it is done (then inst moves to next), a
// poll says infra-fatal or workload-fatal (a *Failure at once), or the
// phase's budget, counted from when inst entered its phase, runs out:
// for the infrastructure's phases that is infra-fatal (the machine did
// not come up in time), for the agent's warm-up it is FailureWarmup, and
// when the last poll learnt nothing (the provider's API was failing) it
// is FailureUnknown, which blames no machine.
func (d *driver) wait(ctx context.Context, budget time.Duration, next berth.InstancePhase, c check) error {
	deadline := entered(d.inst).Add(budget)
	for {
		n, pinned := len(d.inst.Probes), d.inst.HostKey
		done, class, why, err := c(ctx)
		if err == nil {
			err = ctx.Err() // a check cut short tells nothing
		}
		if err != nil {
			return err
		}
		if done {
			return d.p.phase(ctx, d.inst, next, why)
		}
		if len(d.inst.Probes) != n || d.inst.HostKey != pinned {
			if err := d.p.Store.PutInstance(ctx, d.inst); err != nil {
				return fmt.Errorf("provision: writing instance %s: %w", d.inst.ID, err)
			}
		}
		if class == berth.FailureInfraFatal || class == berth.FailureWorkloadFatal {
			return fail(class, "%s", why)
		}
		if !d.p.Now().Before(deadline) {
			out := berth.FailureInfraFatal
			switch {
			case class == berth.FailureUnknown:
				out = berth.FailureUnknown
			case next == berth.InstanceReady:
				out = berth.FailureWarmup
			}
			return fail(out, "not %s within %v: %s", next, budget, why)
		}
		if err := d.p.Sleep(ctx, d.p.Poll); err != nil {
			return err
		}
	}
}

// entered is when inst entered its phase.
func entered(inst *berth.Instance) time.Time {
	if n := len(inst.Timeline); n > 0 {
		return inst.Timeline[n-1].At
	}
	return inst.CreatedAt
}

// failed acts on f: the machine's record counts it (but for
// FailureUnknown, which says nothing of the machine); an infra-fatal
// failure destroys the instance unless the pool preserves failed ones
// (then it stays failed, for inspection); any other class destroys it
// too (nothing runs on it), without blaming the machine. Gone is told,
// so that what its agent took is queued again.
func (d *driver) failed(ctx context.Context, f *Failure) error {
	d.closeSSH()
	inst := d.inst
	inst.LastError = f.Reason
	if f.Class != berth.FailureUnknown {
		if err := d.p.record(ctx, d.pool, inst, f.Class); err != nil {
			return err
		}
	}
	var err error
	if f.Class == berth.FailureInfraFatal && d.pool.PreserveOnFailure {
		err = d.p.end(ctx, inst, berth.InstanceFailed, f.Class, f.Reason+" (preserved)")
	} else {
		err = d.p.destroy(ctx, inst, f.Class, f.Reason)
	}
	if err != nil {
		return err
	}
	if d.p.Gone != nil { // its agent may have joined, and taken work, before the check that failed
		d.p.Gone(inst)
	}
	d.p.Log.Warn("provision: instance failed", "instance", inst.ID, "machine", inst.MachineID, "class", f.Class, "reason", f.Reason)
	return f
}

// show is one look at the instance at the provider: done when its
// container runs; an instance offline or unknown, or a status_msg with a
// fatal signature, is fatal; one gone is the error vanished returns. An
// error of the provider's API is FailureUnknown (pi nil): it says
// nothing of the machine.
func (d *driver) show(ctx context.Context) (pi *cloud.ProviderInstance, class, why string, err error) {
	inst := d.inst
	cmd := showCommand(inst)
	pi, err = d.p.Provider.Show(ctx, inst.ProviderID)
	if errors.Is(err, cloud.ErrGone) {
		return nil, "", "", d.vanished(cmd)
	}
	if err != nil {
		why = "the provider's API failed: " + err.Error()
		d.p.probe(inst, d.r, cmd, nil, why, berth.FailureUnknown)
		return nil, berth.FailureUnknown, why, nil
	}
	out := fmt.Sprintf("actual_status=%s status_msg=%s", orNone(pi.ActualStatus), pi.StatusMsg)
	class = cloud.Classify(cloud.WhereStatusMsg, pi.StatusMsg)
	if class != berth.FailureInfraFatal && class != berth.FailureWorkloadFatal {
		class = cloud.Classify(cloud.WhereStatus, pi.ActualStatus)
	}
	if class != berth.FailureInfraFatal && class != berth.FailureWorkloadFatal {
		class = berth.FailureWarmup
	}
	if pi.ActualStatus == "running" && class == berth.FailureWarmup {
		class = ""
	}
	d.p.probe(inst, d.r, cmd, nil, out, class)
	return pi, class, out, nil
}

// showCommand is the probe command of a look at inst at its provider.
func showCommand(inst *berth.Instance) string {
	return fmt.Sprintf("show instance %d", inst.ProviderID)
}

// vanished records that the provider no longer has the instance (seen
// by cmd) and returns the *Failure that ends its drive (Provisioner.lost).
func (d *driver) vanished(cmd string) *Failure {
	inst := d.inst
	why := fmt.Sprintf("contract %d vanished from %s while %s", inst.ProviderID, d.p.Provider.Name(), inst.Phase)
	d.p.probe(inst, d.r, cmd, nil, why, berth.FailureInfraFatal)
	return &Failure{Class: berth.FailureInfraFatal, Reason: why, Vanished: true}
}

// notYet ends a poll of a phase that does not look at the provider
// itself (SSH, the GPU check) and is not done: when the machine did not
// answer (class FailureWarmup), the provider is asked whether the
// instance still exists, so that one vanished meanwhile ends the drive
// at once rather than when the phase's budget runs out. An error of the
// provider's API says nothing: the poll stands.
func (d *driver) notYet(ctx context.Context, class, why string) (bool, string, string, error) {
	if class != berth.FailureWarmup {
		return false, class, why, nil
	}
	_, err := d.p.Provider.Show(ctx, d.inst.ProviderID)
	if errors.Is(err, cloud.ErrGone) {
		return false, "", "", d.vanished(showCommand(d.inst))
	}
	return false, class, why, nil
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// running is the container phase's check.
func (d *driver) running(ctx context.Context) (bool, string, string, error) {
	pi, class, why, err := d.show(ctx)
	if err != nil || pi == nil || class != "" {
		return false, class, why, err
	}
	addr := sshAddr(pi)
	if addr == "" {
		return false, berth.FailureWarmup, "running, no SSH port yet", nil
	}
	d.inst.SSHAddr = addr
	return true, "", "actual_status running, SSH at " + addr, nil
}

// sshAddr is where the instance's SSH server is reached: its direct
// port when it has one, else the provider's proxy.
func sshAddr(pi *cloud.ProviderInstance) string {
	switch {
	case pi.PublicIP != "" && pi.DirectSSHPort != 0:
		return net.JoinHostPort(pi.PublicIP, strconv.Itoa(pi.DirectSSHPort))
	case pi.SSHHost != "" && pi.SSHPort != 0:
		return net.JoinHostPort(pi.SSHHost, strconv.Itoa(pi.SSHPort))
	}
	return ""
}

// connect dials the instance's SSH server and runs the echo probe on it:
// done when the echo came back. A refused key is infra-fatal at once;
// refused connections, timeouts and broken channels are warm-up.
func (d *driver) connect(ctx context.Context) (bool, string, string) {
	inst := d.inst
	if d.ssh == nil {
		c, err := d.p.dial(ctx, inst, inst.SSHAddr)
		if err != nil {
			class := classifySSH(err)
			d.p.probe(inst, d.r, "ssh "+d.p.SSHUser+"@"+inst.SSHAddr, nil, err.Error(), class)
			return false, class, err.Error()
		}
		d.ssh = c
	}
	code, out, err := run(ctx, d.ssh, EchoProbe, d.p.DialTimeout)
	if err != nil || code != 0 || !containsLine(out, echoMarker) {
		why := fmt.Sprintf("the echo probe: exit %d, %q", code, out)
		if err != nil {
			why = "the echo probe: " + err.Error()
		}
		d.p.probe(inst, d.r, EchoProbe, exitOf(code, err), why, berth.FailureWarmup)
		d.closeSSH()
		return false, berth.FailureWarmup, why
	}
	return true, "", ""
}

// exitOf is a probe's exit code: none when its channel broke.
func exitOf(code int, err error) *int {
	if err != nil {
		return nil
	}
	return &code
}

// containsLine reports whether out has a line that is exactly line.
func containsLine(out, line string) bool {
	return slices.Contains(strings.Split(strings.ReplaceAll(out, "\r", ""), "\n"), line)
}

// sshReachable is the SSH phase's check.
func (d *driver) sshReachable(ctx context.Context) (bool, string, string, error) {
	ok, class, why := d.connect(ctx)
	if !ok {
		return d.notYet(ctx, class, why)
	}
	d.p.probe(d.inst, d.r, EchoProbe, new(int), echoMarker, "")
	return true, "", "SSH reachable at " + d.inst.SSHAddr, nil
}

// gpuSane is the GPU phase's check: the echo probe, then the GPU check.
// A GPU check that fails on a channel that works is infra-fatal.
func (d *driver) gpuSane(ctx context.Context) (bool, string, string, error) {
	ok, class, why := d.connect(ctx)
	if !ok {
		return d.notYet(ctx, class, why)
	}
	code, out, err := run(ctx, d.ssh, d.p.gpuCheck(), d.p.DialTimeout)
	if err != nil {
		why := "the GPU check: " + err.Error()
		d.p.probe(d.inst, d.r, d.p.gpuCheck(), nil, why, berth.FailureWarmup)
		d.closeSSH()
		return d.notYet(ctx, berth.FailureWarmup, why)
	}
	if code == 0 {
		d.p.probe(d.inst, d.r, d.p.gpuCheck(), &code, out, "")
		return true, "", "nvidia-smi and libcuda present", nil
	}
	class = cloud.Classify(cloud.WhereGPU, out)
	if class == berth.FailureUnknown || class == berth.FailureWarmup {
		class = berth.FailureInfraFatal
	}
	d.p.probe(d.inst, d.r, d.p.gpuCheck(), &code, out, class)
	return false, class, fmt.Sprintf("the GPU check failed (exit %d): %s", code, cut(d.r.Redact(out))), nil
}

// gpuCheck is the GPU sanity check the Provisioner runs.
func (p *Provisioner) gpuCheck() string {
	if p.GPUCheck != "" {
		return p.GPUCheck
	}
	return DefaultGPUCheck
}

// workloadReady is the ready phase's check: a vLLM node's server serves
// its model (vllmServing); any other instance's agent registered.
func (d *driver) workloadReady() check {
	if d.pool.Workload == berth.WorkloadVLLM {
		return d.vllmServing
	}
	return d.registered
}

// registered is the agent's ready phase's check: the agent registered with the
// server. An instance that vanishes or goes offline meanwhile is
// infra-fatal; an error of the provider's API leaves the wait a warm-up.
func (d *driver) registered(ctx context.Context) (bool, string, string, error) {
	if d.p.Registry == nil || d.p.Registry.Registered(d.inst.WorkerHost) {
		return true, "", "agent " + d.inst.WorkerHost + " registered", nil
	}
	_, class, why, err := d.show(ctx)
	if err != nil || class == berth.FailureInfraFatal || class == berth.FailureWorkloadFatal {
		return false, class, why, err
	}
	return false, berth.FailureWarmup, "agent " + d.inst.WorkerHost + " not registered yet", nil
}
