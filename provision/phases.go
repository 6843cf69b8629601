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
// acted on by its class (failed) and returned as a *Failure; an error of
// ctx or of the store is returned as it is, the instance left where it
// stands for a later Provision to resume.
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
		if errors.As(err, &f) {
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
// why); err is an error that ends the drive as it is (the store's).
type check func(ctx context.Context) (done bool, class, why string, err error)

// wait polls c every Poll until it is done (then inst moves to next), a
// poll says infra-fatal or workload-fatal (a *Failure at once), or the
// phase's budget, counted from when inst entered its phase, runs out:
// for the infrastructure's phases that is infra-fatal (the machine did
// not come up in time), for the agent's warm-up it is FailureWarmup.
func (d *driver) wait(ctx context.Context, budget time.Duration, next berth.InstancePhase, c check) error {
	deadline := entered(d.inst).Add(budget)
	for {
		n := len(d.inst.Probes)
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
		if len(d.inst.Probes) != n {
			if err := d.p.Store.PutInstance(ctx, d.inst); err != nil {
				return fmt.Errorf("provision: writing instance %s: %w", d.inst.ID, err)
			}
		}
		if class == berth.FailureInfraFatal || class == berth.FailureWorkloadFatal {
			return fail(class, "%s", why)
		}
		if !d.p.Now().Before(deadline) {
			out := berth.FailureInfraFatal
			if next == berth.InstanceReady {
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

// failed acts on f: the machine's record counts it; an infra-fatal
// failure destroys the instance unless the pool preserves failed ones
// (then it stays failed, for inspection); any other class destroys it
// too (nothing runs on it), without blaming the machine. Gone is told,
// so that what its agent took is queued again.
func (d *driver) failed(ctx context.Context, f *Failure) error {
	d.closeSSH()
	inst := d.inst
	inst.LastError = f.Reason
	if err := d.p.record(ctx, d.pool, inst, f.Class); err != nil {
		return err
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
// container runs; an instance gone, offline or unknown, or a status_msg
// with a fatal signature, is fatal.
func (d *driver) show(ctx context.Context) (pi *cloud.ProviderInstance, class, why string) {
	inst := d.inst
	cmd := fmt.Sprintf("show instance %d", inst.ProviderID)
	pi, err := d.p.Provider.Show(ctx, inst.ProviderID)
	if errors.Is(err, cloud.ErrGone) {
		why = "the instance vanished from the provider"
		d.p.probe(inst, d.r, cmd, nil, why, berth.FailureInfraFatal)
		return nil, berth.FailureInfraFatal, why
	}
	if err != nil {
		return nil, berth.FailureUnknown, err.Error()
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
	return pi, class, out
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// running is the container phase's check.
func (d *driver) running(ctx context.Context) (bool, string, string, error) {
	pi, class, why := d.show(ctx)
	if pi == nil || class != "" {
		return false, class, why, nil
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
		c, err := d.p.dial(ctx, inst.ID, inst.SSHAddr)
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
		return false, class, why, nil
	}
	d.p.probe(d.inst, d.r, EchoProbe, new(int), echoMarker, "")
	return true, "", "SSH reachable at " + d.inst.SSHAddr, nil
}

// gpuSane is the GPU phase's check: the echo probe, then the GPU check.
// A GPU check that fails on a channel that works is infra-fatal.
func (d *driver) gpuSane(ctx context.Context) (bool, string, string, error) {
	ok, class, why := d.connect(ctx)
	if !ok {
		return false, class, why, nil
	}
	code, out, err := run(ctx, d.ssh, d.p.gpuCheck(), d.p.DialTimeout)
	if err != nil {
		why := "the GPU check: " + err.Error()
		d.p.probe(d.inst, d.r, d.p.gpuCheck(), nil, why, berth.FailureWarmup)
		d.closeSSH()
		return false, berth.FailureWarmup, why, nil
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
// infra-fatal.
func (d *driver) registered(ctx context.Context) (bool, string, string, error) {
	if d.p.Registry == nil || d.p.Registry.Registered(d.inst.WorkerHost) {
		return true, "", "agent " + d.inst.WorkerHost + " registered", nil
	}
	pi, class, why := d.show(ctx)
	if pi == nil || class != "" && class != berth.FailureWarmup {
		return false, class, why, nil
	}
	return false, berth.FailureWarmup, "agent " + d.inst.WorkerHost + " not registered yet", nil
}
