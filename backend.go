package berth

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode"
)

// Execution backends: where attempts run besides the agent pool
// (docs/kubernetes.md). A backend is stored durably and managed through
// /api/v1/backends by admins; the controller builds it from its kind's
// factory and offers its capacity to the scheduler beside the agents'.

// Backend kinds and names.
const (
	// BackendAgents is the name of the agent pool, the backend every
	// server has (the `berth agent` daemons); it cannot be added or
	// removed.
	BackendAgents = "agents"
	// BackendKindAgents is the agent pool's kind.
	BackendKindAgents = "agents"
	// BackendKindKubernetes runs each attempt as a pod on a Kubernetes
	// cluster.
	BackendKindKubernetes = "kubernetes"
)

// Defaults and limits of a backend.
const (
	// DefaultKubeNamespace is the namespace a Kubernetes backend's pods
	// go in when it names none.
	DefaultKubeNamespace = "berth"
	// PlacementBerth: Berth's scheduler chooses the node (the pod is
	// created with nodeName), as it does for agents.
	PlacementBerth = "berth"
	// PlacementKube: the pod is left to kube-scheduler.
	PlacementKube = "kube"
	// MaxKubeconfig is the largest kubeconfig a backend accepts, in bytes.
	MaxKubeconfig = 512 << 10
	// MaxImageLen is the longest container image reference.
	MaxImageLen = 512
)

// Backend states, as BackendStatus.State reports them.
const (
	// BackendSyncing: started, its first view of capacity not yet
	// complete (a Kubernetes backend's informers not yet synced).
	BackendSyncing = "syncing"
	// BackendReady: reachable, its capacity current.
	BackendReady = "ready"
	// BackendUnreachable: it cannot reach what it fronts (the API server
	// does not answer); Message says why.
	BackendUnreachable = "unreachable"
	// BackendFailed: stored, but the server could not start it (its
	// kind unknown to this server, its credentials not opening);
	// Message says why.
	BackendFailed = "failed"
)

// BackendSpec is an execution backend as added through
// POST /api/v1/backends and stored: its name (what a job's `backend`
// names), its kind and the kind's settings.
type BackendSpec struct {
	Name string `json:"name"`
	Kind string `json:"kind"` // BackendKindKubernetes
	// Queues are the queues whose jobs it runs; empty: every queue.
	Queues []string `json:"queues,omitempty"`
	// Kubernetes holds a BackendKindKubernetes backend's settings.
	Kubernetes *KubernetesBackend `json:"kubernetes,omitempty"`
	// SealedCredentials is the kind's credentials (a Kubernetes
	// backend's kubeconfig) sealed as secrets are; the store keeps it
	// and nothing answers it.
	SealedCredentials []byte    `json:"-"`
	CreatedAt         time.Time `json:"created_at"`
}

// KubernetesBackend is the settings of a Kubernetes backend.
type KubernetesBackend struct {
	// Kubeconfig is the kubeconfig file's content: accepted on add,
	// never returned by the API or the CLI; stored sealed
	// (BackendSpec.SealedCredentials).
	Kubeconfig string `json:"kubeconfig,omitempty"`
	// Context is the kubeconfig's context to use; "": its current one.
	Context string `json:"context,omitempty"`
	// Namespace is where its pods go (DefaultKubeNamespace when empty).
	Namespace string `json:"namespace,omitempty"`
	// ImageDefault is the image of a job that names none; "": a job
	// must name its image on this backend.
	ImageDefault string `json:"image_default,omitempty"`
	// NodeSelector restricts the nodes it offers and places on to those
	// with these labels.
	NodeSelector map[string]string `json:"node_selector,omitempty"`
	// Placement is who chooses a pod's node: PlacementBerth (the
	// default) or PlacementKube.
	Placement string `json:"placement,omitempty"`
}

// BackendStatus is how a backend stands, as GET /api/v1/backends and
// `berth backends` show it.
type BackendStatus struct {
	Name      string    `json:"name"`
	Kind      string    `json:"kind"`
	State     string    `json:"state"` // BackendSyncing, BackendReady, BackendUnreachable, BackendFailed
	Nodes     int       `json:"nodes"` // workers (agents) or nodes it offers
	GPUsFree  int       `json:"gpus_free"`
	GPUsTotal int       `json:"gpus_total"`
	Pods      int       `json:"pods"`               // attempts it holds running or starting (pods, on Kubernetes)
	LastSync  time.Time `json:"last_sync,omitzero"` // when its view of capacity last changed or was confirmed
	Message   string    `json:"message,omitempty"`  // why it is not ready, when it is not
}

// BackendInfo is one backend as the API answers it: its spec (with no
// credentials) and its status. The agent pool has a status and no spec.
type BackendInfo struct {
	Spec   *BackendSpec  `json:"spec,omitempty"`
	Status BackendStatus `json:"status"`
}

// BackendList is GET /api/v1/backends' body: the agent pool first, then
// the stored backends by name.
type BackendList struct {
	Backends []BackendInfo `json:"backends"`
}

// backendNameRE: a DNS label (so that it can label a pod), 1-63 lower-case
// letters, digits and '-', starting and ending with a letter or digit.
var backendNameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// ValidBackendName returns nil when name may name a backend one adds: a
// DNS label other than BackendAgents; else an error on field "name".
func ValidBackendName(name string) error {
	switch {
	case name == "":
		return Invalidf("name", "is required")
	case name == BackendAgents:
		return Invalidf("name", "%q is the agent pool's name", name)
	case !backendNameRE.MatchString(name):
		return Invalidf("name", "%q: must be 1-63 lower-case letters, digits or '-', starting and ending with a letter or digit", name)
	}
	return nil
}

// SetDefaults fills what s leaves out: a Kubernetes backend's namespace
// and placement.
func (s *BackendSpec) SetDefaults() {
	if k := s.Kubernetes; k != nil {
		if k.Namespace == "" {
			k.Namespace = DefaultKubeNamespace
		}
		if k.Placement == "" {
			k.Placement = PlacementBerth
		}
	}
}

// Validate checks every field of s but the sealed credentials and returns
// an ECodeInvalid *Error naming the first field at fault (a Kubernetes
// field as "kubernetes.FIELD"). Whether the kind is one this server can
// build, and whether the kubeconfig reaches a cluster, is the server's to
// say. Empty defaults (namespace, placement) are valid.
func (s *BackendSpec) Validate() error {
	if err := ValidBackendName(s.Name); err != nil {
		return err
	}
	switch s.Kind {
	case "":
		return Invalidf("kind", "is required: %s", BackendKindKubernetes)
	case BackendKindKubernetes:
		if s.Kubernetes == nil {
			return Invalidf("kubernetes", "is required for kind %s", s.Kind)
		}
		if err := s.Kubernetes.validate(); err != nil {
			return err
		}
	default:
		return Invalidf("kind", "%q is not a backend kind (%s)", s.Kind, BackendKindKubernetes)
	}
	for i, q := range s.Queues {
		if !queueRe.MatchString(q) {
			return Invalidf("queues", "%q: a queue name must be 1-63 lower-case letters, digits, '_' or '-'", q)
		}
		if slices.Contains(s.Queues[:i], q) {
			return Invalidf("queues", "%q is named twice", q)
		}
	}
	return nil
}

var (
	// nsRE: a namespace is a DNS label.
	nsRE = backendNameRE
	// labelNameRE, labelValueRE: a Kubernetes label's name (after its
	// prefix) and value.
	labelNameRE  = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$`)
	labelValueRE = regexp.MustCompile(`^([A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?$`)
	// dnsSubdomainRE: a label key's prefix.
	dnsSubdomainRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$`)
)

func (k *KubernetesBackend) validate() error {
	switch {
	case strings.TrimSpace(k.Kubeconfig) == "":
		return Invalidf("kubernetes.kubeconfig", "is required: the kubeconfig file's content")
	case len(k.Kubeconfig) > MaxKubeconfig:
		return Invalidf("kubernetes.kubeconfig", "is %d bytes, the limit is %d", len(k.Kubeconfig), MaxKubeconfig)
	case len(k.Context) > 253 || strings.ContainsFunc(k.Context, unicode.IsControl):
		return Invalidf("kubernetes.context", "must be at most 253 characters, none of them control characters")
	case k.Namespace != "" && !nsRE.MatchString(k.Namespace):
		return Invalidf("kubernetes.namespace", "%q: must be 1-63 lower-case letters, digits or '-', starting and ending with a letter or digit", k.Namespace)
	case k.Placement != "" && k.Placement != PlacementBerth && k.Placement != PlacementKube:
		return Invalidf("kubernetes.placement", "%q: must be %s (Berth chooses the node) or %s (kube-scheduler does)", k.Placement, PlacementBerth, PlacementKube)
	}
	if k.ImageDefault != "" {
		if err := validImage("kubernetes.image_default", k.ImageDefault); err != nil {
			return err
		}
	}
	keys := make([]string, 0, len(k.NodeSelector))
	for key := range k.NodeSelector {
		keys = append(keys, key)
	}
	sort.Strings(keys) // the first bad one, the same each time
	for _, key := range keys {
		if err := validLabel(key, k.NodeSelector[key]); err != nil {
			return Invalidf("kubernetes.node_selector", "%s", err)
		}
	}
	return nil
}

// validLabel checks a Kubernetes label: the key an optional DNS-subdomain
// prefix and '/', then a name of 1-63 characters; the value at most 63.
func validLabel(key, value string) error {
	name := key
	if prefix, rest, ok := strings.Cut(key, "/"); ok {
		if !dnsSubdomainRE.MatchString(prefix) {
			return fmt.Errorf("%q: the prefix before '/' must be a DNS subdomain", key)
		}
		name = rest
	}
	if !labelNameRE.MatchString(name) {
		return fmt.Errorf("%q: a label name must be 1-63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit", key)
	}
	if !labelValueRE.MatchString(value) {
		return fmt.Errorf("%s=%q: a label value must be at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit", key, value)
	}
	return nil
}

// imageRE: a container image reference, loosely: [registry/]path[:tag]
// [@digest], without spaces or shell characters.
var imageRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/:@+-]*$`)

// validImage returns nil when ref may be a container image reference
// (such as nvcr.io/nvidia/pytorch:25.01-py3 or repo@sha256:…), else an
// ECodeInvalid *Error on field. Whether it exists is the registry's to
// say.
func validImage(field, ref string) error {
	switch {
	case len(ref) > MaxImageLen:
		return Invalidf(field, "must be at most %d characters", MaxImageLen)
	case !imageRE.MatchString(ref) || strings.HasSuffix(ref, ":") || strings.HasSuffix(ref, "/") || strings.Contains(ref, "//"):
		return Invalidf(field, "%q is not an image reference, such as nvcr.io/nvidia/pytorch:25.01-py3", ref)
	}
	return nil
}
