package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/berth-dev/berth"
)

// backendCommands are the subcommands of berth backend.
var backendCommands = subcommands{
	name: "backend",
	help: `Usage: berth backend add|rm [flags] NAME

An execution backend runs jobs somewhere other than the agent pool: a
Kubernetes cluster runs each attempt as a pod (docs/kubernetes.md). Admins
add and remove backends; berth backends lists them.

  berth backend add NAME --kind kubernetes --kubeconfig FILE [--context C]
                    [--namespace berth] [--queues q1,q2] [--image-default IMAGE]
                    [--node-selector k=v ...] [--placement berth|kube]
  berth backend rm NAME [--force]
  berth backends [-o wide|json|yaml]

The kubeconfig file is read here and sent to the server, which seals it as
it seals secrets and never shows it again; it must hold its credentials
inline (kubectl config view --flatten --minify > FILE). A job runs there
when it names the backend (berth submit --backend NAME --image IMAGE), or
when it names none and fits there first. rm is refused while attempts run
there, unless --force (they are then lost and retried elsewhere per their
retries).
`,
	run: map[string]func(ctx context.Context, m *Main, args []string) error{
		"add": runBackendAdd,
		"rm":  runBackendRm,
	},
}

func runBackend(ctx context.Context, m *Main, args []string) error {
	return backendCommands.dispatch(ctx, m, args)
}

// backendFlags name the flags of berth backend add after the fields they
// set, for the server's errors.
var backendFlags = map[string]string{
	"name": "NAME", "kind": "--kind", "queues": "--queues", "kubernetes": "--kind",
	"kubernetes.kubeconfig": "--kubeconfig", "kubernetes.context": "--context", "kubernetes.namespace": "--namespace",
	"kubernetes.image_default": "--image-default", "kubernetes.node_selector": "--node-selector",
	"kubernetes.placement": "--placement",
}

// backendFlagError renames the field of err, a backend's, to its flag.
func backendFlagError(err error) error {
	if e := (*berth.Error)(nil); errors.As(err, &e) && backendFlags[e.Field] != "" {
		e.Field = backendFlags[e.Field]
	}
	return err
}

// kubeconfigFileRef matches a kubeconfig key, in block or flow style,
// that points at a file on this machine (a certificate, a key, a token
// file), which the server cannot read; the *-data keys hold the content
// and do not match.
var kubeconfigFileRef = regexp.MustCompile(`(?m)(?:^|[\s{,])(client-certificate|client-key|certificate-authority|tokenFile):[ \t]*("[^"\n]*"|'[^'\n]*'|[^\s,}]+)`)

// readKubeconfig reads the kubeconfig at path for a backend: it must not be
// empty, nor refer to files the server could not read.
func readKubeconfig(path string) (string, error) {
	if path == "" {
		return "", berth.Invalidf("--kubeconfig", "is required: a kubeconfig FILE with the cluster's credentials inline (kubectl config view --flatten --minify > FILE)")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return "", berth.Invalidf("--kubeconfig", "read the kubeconfig").WithCause(err)
	}
	if strings.TrimSpace(string(data)) == "" {
		return "", berth.Invalidf("--kubeconfig", "%s is empty", path)
	}
	if m := kubeconfigFileRef.FindStringSubmatch(string(data)); m != nil {
		return "", berth.Invalidf("--kubeconfig", "%s: %s refers to the file %s, which the server cannot read: "+
			"put the credentials inline (kubectl --kubeconfig %s config view --flatten --minify > FILE) and give that FILE",
			path, m[1], strings.Trim(m[2], `"'`), path)
	}
	return string(data), nil
}

func runBackendAdd(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("backend add", "[flags] NAME --kind kubernetes --kubeconfig FILE")
	cf := m.addClientFlags(fs, true)
	kind := fs.String("kind", berth.BackendKindKubernetes, "the backend's kind: kubernetes")
	kubeconfigPath := fs.String("kubeconfig", "", "kubeconfig `file` of the cluster, its credentials inline (required; sealed on the server, never shown again)")
	k := &berth.KubernetesBackend{}
	fs.StringVar(&k.Context, "context", "", "the kubeconfig's context to use (default: its current context)")
	fs.StringVar(&k.Namespace, "namespace", berth.DefaultKubeNamespace, "namespace the pods go in")
	queues := fs.String("queues", "", "comma-separated queues whose jobs it runs (default: every queue)")
	fs.StringVar(&k.ImageDefault, "image-default", "", "image of a job that names none (default: a job naming this backend must name its image)")
	var selector keyValueFlag
	fs.Var(&selector, "node-selector", "KEY=VALUE node label its pods' nodes must have, or several comma-separated (repeatable)")
	fs.StringVar(&k.Placement, "placement", berth.PlacementBerth, "who picks a pod's node: berth (Berth's scheduler, as for agents) or kube (kube-scheduler)")
	name, err := parseOneArg(fs, cf, args, "NAME", "give exactly one backend NAME, e.g. berth backend add k8s-cw --kind kubernetes --kubeconfig ~/.kube/cw.yaml")
	if err != nil {
		return err
	}
	spec := &berth.BackendSpec{Name: name, Kind: *kind}
	if *queues != "" {
		for _, q := range strings.Split(*queues, ",") {
			spec.Queues = append(spec.Queues, strings.TrimSpace(q))
		}
	}
	if spec.Kind == berth.BackendKindKubernetes {
		for _, kv := range selector.pairs {
			pairs, err := parseKeyValues(kv[0]+"="+kv[1], "--node-selector")
			if err != nil {
				return err
			}
			for key, v := range pairs {
				if k.NodeSelector == nil {
					k.NodeSelector = map[string]string{}
				}
				k.NodeSelector[key] = v
			}
		}
		if k.Kubeconfig, err = readKubeconfig(*kubeconfigPath); err != nil {
			return err
		}
		spec.Kubernetes = k
	}
	spec.SetDefaults()
	if err := spec.Validate(); err != nil {
		return backendFlagError(err)
	}
	info, err := m.client(cf).AddBackend(ctx, spec)
	if err != nil {
		return backendFlagError(err)
	}
	if cf.output != "table" {
		return printData(m.Stdout, cf.output, info)
	}
	st := info.Status
	fmt.Fprintf(m.Stdout, "backend %s added: %s", st.Name, st.Kind)
	if k := info.Spec.Kubernetes; k != nil {
		fmt.Fprintf(m.Stdout, ", namespace %s, placement %s", k.Namespace, k.Placement)
	}
	fmt.Fprintf(m.Stdout, "; %s, %d nodes, %d/%d GPUs free\n", st.State, st.Nodes, st.GPUsFree, st.GPUsTotal)
	return nil
}

func runBackendRm(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("backend rm", "[flags] NAME")
	cf := m.addClientFlags(fs, false)
	force := fs.Bool("force", false, "remove it even while attempts run there (they are lost, and retried elsewhere per their retries)")
	name, err := parseOneArg(fs, cf, args, "NAME", "give exactly one backend NAME (berth backends lists them)")
	if err != nil {
		return err
	}
	if err := m.client(cf).RemoveBackend(ctx, name, *force); err != nil {
		return err
	}
	fmt.Fprintf(m.Stdout, "backend %s removed\n", name)
	return nil
}

func runBackends(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("backends", "[flags]")
	cf := m.addClientFlags(fs, true)
	cf.formats = append(cf.formats, "wide")
	fs.Lookup("o").Usage = "output: table, wide (more columns), json or yaml"
	if err := parseNoArgs(fs, cf, args, "berth backends"); err != nil {
		return err
	}
	list, err := m.client(cf).Backends(ctx)
	if err != nil {
		return err
	}
	now := time.Now()
	if cf.output == "wide" {
		return backendsTable(m.Stdout, list, now, true)
	}
	return printList(m.Stdout, cf.output, list, func() error { return backendsTable(m.Stdout, list, now, false) })
}

// backendsTable writes the table of berth backends: GPUS is free/total,
// PODS the attempts running or starting there, LAST-SYNC how long ago it
// last heard from what it fronts; wide adds the queues, a Kubernetes
// backend's namespace and placement, and why it is not ready.
func backendsTable(w io.Writer, list []berth.BackendInfo, now time.Time, wide bool) error {
	head := []string{"NAME", "KIND", "STATE", "NODES", "GPUS", "PODS", "LAST-SYNC"}
	if wide {
		head = append(head, "QUEUES", "NAMESPACE", "PLACEMENT", "MESSAGE")
	}
	t := newTable(w, head...)
	for _, b := range list {
		st := b.Status
		row := []string{st.Name, st.Kind, st.State, fmt.Sprint(st.Nodes), fmt.Sprintf("%d/%d", st.GPUsFree, st.GPUsTotal),
			fmt.Sprint(st.Pods), ago(st.LastSync, now)}
		if wide {
			queues, ns, placement := "-", "-", "-"
			if b.Spec != nil {
				queues = orDash(strings.Join(b.Spec.Queues, ","))
				if k := b.Spec.Kubernetes; k != nil {
					ns, placement = k.Namespace, k.Placement
				}
			}
			row = append(row, queues, ns, placement, orDash(st.Message))
		}
		t.row(row...)
	}
	return t.flush()
}
