package kube

import (
	"fmt"
	"maps"
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
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ps.namespace, Labels: labels},
		Type: corev1.SecretTypeOpaque, Data: map[string][]byte{}}
	all := maps.Clone(j.Env)
	if all == nil {
		all = map[string]string{}
	}
	maps.Copy(all, env)
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
