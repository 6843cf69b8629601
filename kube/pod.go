package kube

import (
	"cmp"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/controller"
)

// Labels and names of what the backend creates.
const (
	// LabelJob, LabelAttempt and LabelBackend label every pod (and
	// Secret) the backend creates with its job, its attempt and the
	// backend's name; adoption after a restart finds pods by them.
	LabelJob     = "berth.dev/job"
	LabelAttempt = "berth.dev/attempt"
	LabelBackend = "berth.dev/backend"
	// LabelGang and LabelRank label a gang member's pod with its
	// placement's rendezvous Service and its rank; the Service selects
	// rank 0.
	LabelGang = "berth.dev/gang"
	LabelRank = "berth.dev/rank"
	// ResourceGPU is the extended resource of NVIDIA's device plugin.
	ResourceGPU corev1.ResourceName = "nvidia.com/gpu"
	// LabelGPUProduct is the node label GPU feature discovery sets to
	// the GPUs' model.
	LabelGPUProduct = "nvidia.com/gpu.product"
	// container is the name of the pod's one container.
	container = "job"
)

// PodName returns the name of attempt's pod (and of its Secret): the same
// for every controller and every retry of the create, so that two never
// make two pods of one attempt.
func PodName(attempt string) string { return "berth-" + strings.ToLower(attempt) }

// podSpec is what a pod is made from besides the job and its attempt.
type podSpec struct {
	backend   string
	namespace string
	image     string            // the job's, or the backend's default
	node      string            // spec.nodeName; "" leaves it to kube-scheduler
	products  []string          // node GPU products matching the job's gpu_type, for affinity
	secrets   map[string]string // the job's secret values, by name
	grace     int64             // terminationGracePeriodSeconds
}

// translate returns the pod that runs attempt a of job j (with env added
// to its environment), and the Secret its secret values go in (nil when
// it references none). Env values and command words that reference
// secrets ({{SECRET:NAME}}) are read from the Secret: env through
// secretKeyRef, command words as $(VAR) of such env; other command words
// have "$(" escaped so that Kubernetes leaves them as written.
func translate(j *berth.Job, a *berth.Attempt, env map[string]string, ps podSpec) (*corev1.Pod, *corev1.Secret, error) {
	name := PodName(a.ID)
	labels := map[string]string{LabelJob: j.ID, LabelAttempt: a.ID, LabelBackend: ps.backend}
	if j.Nodes > 1 {
		labels[LabelGang], labels[LabelRank] = GangServiceName(j), strconv.Itoa(a.TaskIndex)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ps.namespace, Labels: labels},
		Type: corev1.SecretTypeOpaque, Data: map[string][]byte{}}
	all := maps.Clone(env) // the job's own env over Berth's, as on agents (a job's MASTER_PORT is kept)
	if all == nil {
		all = map[string]string{}
	}
	maps.Copy(all, j.Env)
	all["BERTH_JOB_ID"], all["BERTH_ATTEMPT_ID"] = j.ID, a.ID
	if j.ArrayIndex != nil {
		all["BERTH_ARRAY_INDEX"] = strconv.Itoa(*j.ArrayIndex)
	}
	var envs []corev1.EnvVar
	for _, k := range slices.Sorted(maps.Keys(all)) {
		v := all[k]
		if !berth.HasSecretRefs(v) {
			envs = append(envs, corev1.EnvVar{Name: k, Value: v})
			continue
		}
		x, err := berth.ExpandSecrets(v, ps.secrets)
		if err != nil {
			return nil, nil, fmt.Errorf("env %s: %w", k, err)
		}
		secret.Data[k] = []byte(x)
		envs = append(envs, secretEnv(k, name))
	}
	command := make([]string, len(j.Command))
	for i, w := range j.Command {
		if !berth.HasSecretRefs(w) {
			command[i] = strings.ReplaceAll(w, "$(", "$$(")
			continue
		}
		x, err := berth.ExpandSecrets(w, ps.secrets)
		if err != nil {
			return nil, nil, fmt.Errorf("command word %d: %w", i, err)
		}
		k := "BERTH_ARG_" + strconv.Itoa(i)
		secret.Data[k] = []byte(x)
		envs = append(envs, secretEnv(k, name))
		command[i] = "$(" + k + ")"
	}
	res := corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}
	if n := j.Resources.GPUs; n > 0 {
		res.Limits[ResourceGPU] = *resource.NewQuantity(int64(n), resource.DecimalSI)
	}
	if c := j.Resources.CPUs; c > 0 {
		q := *resource.NewMilliQuantity(int64(c*1000), resource.DecimalSI)
		res.Requests[corev1.ResourceCPU], res.Limits[corev1.ResourceCPU] = q, q
	}
	if m := j.Resources.Memory; m > 0 {
		q := *resource.NewQuantity(int64(m), resource.BinarySI)
		res.Requests[corev1.ResourceMemory], res.Limits[corev1.ResourceMemory] = q, q
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ps.namespace, Labels: labels},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			NodeName:                      ps.node,
			TerminationGracePeriodSeconds: &ps.grace,
			Affinity:                      affinity(j, ps.products),
			Containers: []corev1.Container{{Name: container, Image: ps.image, Command: command, Env: envs,
				WorkingDir: j.Workdir, Resources: res}},
		},
	}
	if len(secret.Data) == 0 {
		secret = nil
	}
	return pod, secret, nil
}

// secretEnv is env var k read from key k of the Secret name.
func secretEnv(k, name string) corev1.EnvVar {
	return corev1.EnvVar{Name: k, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: k}}}
}

// affinity is the required node affinity of j's labels (those Berth
// itself sets aside) and, for a gpu_type, of the GPU products that match
// it; nil when there is none.
func affinity(j *berth.Job, products []string) *corev1.Affinity {
	var exprs []corev1.NodeSelectorRequirement
	for _, k := range slices.Sorted(maps.Keys(j.Constraints.Labels)) {
		if k == controller.BackendLabel {
			continue
		}
		exprs = append(exprs, corev1.NodeSelectorRequirement{Key: k, Operator: corev1.NodeSelectorOpIn, Values: []string{j.Constraints.Labels[k]}})
	}
	if j.Resources.GPUType != "" {
		exprs = append(exprs, corev1.NodeSelectorRequirement{Key: LabelGPUProduct, Operator: corev1.NodeSelectorOpIn, Values: products})
	}
	if len(exprs) == 0 {
		return nil
	}
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: exprs}}}}}
}

// GangServiceName returns the name of the headless Service through which
// the members of a gang's placement reach rank 0 (one per placement, as
// the PodGroup).
func GangServiceName(j *berth.Job) string { return PodGroupName(j) }

// gangService returns, for rank 0 of a gang (nil for the other ranks),
// the headless Service that gives rank 0's pod a name in the cluster's
// DNS, and env with the rendezvous pointed at that name: a node's name
// (the agents' MASTER_ADDR) does not reach a pod on the pod network.
func gangService(j *berth.Job, a *berth.Attempt, ns, backend string, env map[string]string) (*corev1.Service, map[string]string) {
	name := GangServiceName(j)
	addr := name + "." + ns + ".svc"
	env = maps.Clone(env)
	if env == nil { // a relaunch of a gang that is stopping
		env = map[string]string{}
	}
	env["MASTER_ADDR"] = addr
	portName := cmp.Or(j.Env["MASTER_PORT"], env["MASTER_PORT"]) // the job's own wins, as in its pod's env
	if portName != "" {
		env["BERTH_COORDINATOR"] = net.JoinHostPort(addr, portName)
	}
	if a.TaskIndex != 0 {
		return nil, env
	}
	port, _ := strconv.Atoi(portName)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{LabelJob: j.ID, LabelBackend: backend}},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, PublishNotReadyAddresses: true,
			Selector: map[string]string{LabelGang: name, LabelRank: "0"}},
	}
	if port > 0 {
		svc.Spec.Ports = []corev1.ServicePort{{Name: "rendezvous", Protocol: corev1.ProtocolTCP, Port: int32(port)}}
	}
	return svc, env
}
