// Package layers_test checks the layer rules of docs/architecture.md
// ("Layers") over the module's import graph: what each layer's packages
// may import, directly or through others. It holds no code of its own, only
// this test, which runs one `go list -deps` over the module and, for each
// rule broken, names the rule and the chain of imports that breaks it
// (agent → client → arbiter → store).
//
// The rules govern what is built into the binary: the packages' non-test
// files. Tests are excepted: they import real drivers, servers and
// controllers to test against real things (DESIGN.md: real SQLite, real
// processes), and e2e drives the whole binary.
package layers_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/berth-dev/berth"

// A rule says what the packages it governs (subjects, less except) may
// import, as patterns relative to the module root: "." is the root
// package, "x" the package x, "x/..." x and the packages under it; a
// pattern whose first element has a dot is another module's, matched
// against the whole import path ("k8s.io/..."). With
// only set, a package may import the standard library and the packages
// only matches, nothing else (no other module's either); otherwise it may
// import anything but what never matches.
type rule struct {
	text     string
	subjects []string
	except   []string
	only     []string
	never    []string
}

// drivers are the store drivers, which only cmd/berth chooses among.
var drivers = []string{"sqlite/...", "postgres/..."}

// server is every package that is the server's alone: a client has no use
// for them, and the agent and the CLI would carry them. Of auth, the
// package itself (tokens, registry, ingress) is the server's; leaves
// under it (secret references, the development CA) are not.
var server = append([]string{"api/...", "arbiter/...", "audit/...", "auth", "cloud/...", "contract/...", "controller/...", "federation/...", "gateway/...", "kube/...", "scheduler/...",
	"service/...", "sim/...", "market/...", "provision/...", "store/...", "web/...", "webhook/...", "cmd/..."}, drivers...)

var rules = []rule{
	{text: "the root package (berth) imports only the standard library",
		subjects: []string{"."}, only: []string{}},
	{text: "the scheduler imports only the root package and the standard library",
		subjects: []string{"scheduler/..."}, only: []string{".", "scheduler/..."}},
	{text: "the simulator imports only the root package, the scheduler and the standard library",
		subjects: []string{"sim"}, only: []string{".", "scheduler/..."}},
	{text: "the cloud policies and the marketplace simulator import only the root package, cloud and the standard library",
		subjects: []string{"cloud", "market"}, only: []string{".", "cloud"}},
	{text: "the agent never imports the controller, the store or a store driver",
		subjects: []string{"agent/..."}, never: append([]string{"controller/...", "store/..."}, drivers...)},
	{text: "the inference gateway imports only the root package and the standard library",
		subjects: []string{"gateway/..."}, only: []string{".", "gateway/..."}},
	{text: "api and web never import a store driver",
		subjects: []string{"api/...", "web/..."}, never: drivers},
	{text: "client imports no server package",
		subjects: []string{"client/..."}, never: server},
	{text: "the Vast client imports only the root package, the cloud seam and the standard library",
		subjects: []string{"cloud/vast"}, only: []string{".", "cloud"}},
	{text: "only cmd/berth imports a store driver",
		subjects: []string{"..."}, except: append([]string{"cmd/berth"}, drivers...), never: drivers},
	{text: "only kube, and cmd/berth which wires it, import Kubernetes' client (k8s.io/..., sigs.k8s.io/...)",
		subjects: []string{"..."}, except: []string{"kube/...", "cmd/berth"}, never: kubernetes},
}

// kubernetes is client-go and the modules it brings: the rest of the
// build and its tests must not pay their compile cost.
var kubernetes = []string{"k8s.io/...", "sigs.k8s.io/..."}

// matches reports whether the import path p matches one of patterns: one
// of the module's packages a pattern of the module, any package another
// module's pattern.
func matches(p string, patterns []string) bool {
	rel, own := strings.CutPrefix(p, module)
	own = own && (rel == "" || rel[0] == '/')
	rel = strings.TrimPrefix(rel, "/")
	for _, pat := range patterns {
		if otherModule(pat) {
			dir, tree := strings.CutSuffix(pat, "/...")
			if p == dir || tree && strings.HasPrefix(p, dir+"/") {
				return true
			}
			continue
		}
		if !own {
			continue
		}
		switch {
		case pat == "...":
			return true
		case pat == ".":
			if rel == "" {
				return true
			}
		case strings.HasSuffix(pat, "/..."):
			dir := strings.TrimSuffix(pat, "/...")
			if rel == dir || strings.HasPrefix(rel, dir+"/") {
				return true
			}
		case rel == pat:
			return true
		}
	}
	return false
}

// otherModule reports whether pat is another module's pattern: its first
// element is a domain name ("k8s.io"), a dot inside letters, not ".",
// "..." or the module's own "x/...".
func otherModule(pat string) bool {
	first, _, _ := strings.Cut(pat, "/")
	return strings.Contains(strings.Trim(first, "."), ".")
}

// graph is the import graph go list reports: each package's imports, and
// which packages are the standard library's.
type graph struct {
	imports map[string][]string
	std     map[string]bool
	own     []string // the module's packages, sorted
}

// load runs one go list over the module.
func load(t *testing.T) *graph {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{.Standard}} {{join .Imports \" \"}}", module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	g := &graph{imports: map[string][]string{}, std: map[string]bool{}}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			t.Fatalf("go list printed %q", sc.Text())
		}
		g.imports[f[0]] = f[2:]
		g.std[f[0]] = f[1] == "true"
		if matches(f[0], []string{"..."}) {
			g.own = append(g.own, f[0])
		}
	}
	slices.Sort(g.own)
	return g
}

// forbids reports whether r forbids its subjects to import p.
func (r rule) forbids(p string, g *graph) bool {
	if r.only != nil {
		return !g.std[p] && !matches(p, r.only)
	}
	return matches(p, r.never)
}

// breaches returns, for subject from, one import chain for each edge
// p → q where from imports p (directly or not) without passing a
// forbidden package, and q is forbidden: the shortest chain to p, then q.
// So every import that must go is named, not only the first found.
func (r rule) breaches(from string, g *graph) [][]string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	var found [][]string
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, q := range g.imports[p] {
			if _, seen := prev[q]; seen || g.std[q] {
				continue
			}
			if r.forbids(q, g) {
				chain := []string{q}
				for at := p; at != ""; at = prev[at] {
					chain = append(chain, at)
				}
				slices.Reverse(chain)
				found = append(found, chain)
				continue
			}
			prev[q] = p
			queue = append(queue, q)
		}
	}
	return found
}

// short names p as docs/architecture.md does: "berth" for the root
// package, the module-relative path for the module's others.
func short(p string) string {
	if p == module {
		return "berth"
	}
	return strings.TrimPrefix(p, module+"/")
}

// chainText writes chain as "agent → auth → store".
func chainText(chain []string) string {
	names := make([]string, len(chain))
	for i, p := range chain {
		names[i] = short(p)
	}
	return strings.Join(names, " → ")
}

// TestLayers checks every rule for every package it governs.
func TestLayers(t *testing.T) {
	t.Parallel()
	g := load(t)
	for _, r := range rules {
		var subjects int
		var msg strings.Builder
		for _, p := range g.own {
			if !matches(p, r.subjects) || matches(p, r.except) {
				continue
			}
			subjects++
			for _, chain := range r.breaches(p, g) {
				fmt.Fprintf(&msg, "\n\t%s", chainText(chain))
			}
		}
		if subjects == 0 {
			t.Errorf("rule %q governs no package: fix its subjects", r.text)
		}
		if msg.Len() > 0 {
			t.Errorf("layer rule broken (docs/architecture.md, Layers): %s; these imports break it:%s", r.text, msg.String())
		}
	}
}

// TestBreachesNamesEveryChain checks the checker on a made-up graph: each
// import of a forbidden package is named once, with the shortest chain to
// it, and nothing is followed past a forbidden package.
func TestBreachesNamesEveryChain(t *testing.T) {
	t.Parallel()
	m := func(p string) string { return module + "/" + p }
	g := &graph{
		imports: map[string][]string{
			m("agent"):   {"fmt", m("auth"), m("client")},
			m("auth"):    {m("store")},
			m("client"):  {m("arbiter"), m("wire")},
			m("arbiter"): {m("webhook")},
			m("webhook"): {m("store")},
			m("store"):   {m("sqlite")},
			m("wire"):    {"fmt"},
		},
		std: map[string]bool{"fmt": true},
	}
	r := rule{never: []string{"store/...", "sqlite/..."}}
	var got []string
	for _, chain := range r.breaches(m("agent"), g) {
		got = append(got, chainText(chain))
	}
	want := []string{"agent → auth → store", "agent → client → arbiter → webhook → store"}
	if !slices.Equal(got, want) {
		t.Errorf("breaches = %q, want %q", got, want)
	}
	only := rule{only: []string{".", "wire"}}
	if got := only.breaches(m("client"), g); len(got) != 1 || short(got[0][1]) != "arbiter" {
		t.Errorf("an only rule: breaches = %q, want client → arbiter", got)
	}
}

// TestMatchesOtherModules checks patterns of other modules: matched on the
// whole path, never by the module's own packages, and not by a module
// whose name only begins the same.
func TestMatchesOtherModules(t *testing.T) {
	t.Parallel()
	for p, want := range map[string]bool{
		"k8s.io/client-go/kubernetes":      true,
		"k8s.io/apimachinery":              true,
		"sigs.k8s.io/yaml":                 true,
		"k8s.iox/client":                   false,
		"github.com/goccy/go-yaml":         false,
		module + "/kube":                   false,
		module + "/internal/kubetest/x.io": false,
	} {
		if got := matches(p, kubernetes); got != want {
			t.Errorf("matches(%q, %q) = %v, want %v", p, kubernetes, got, want)
		}
	}
	g := &graph{
		imports: map[string][]string{
			module + "/controller": {"fmt", module + "/kube"},
			module + "/kube":       {"k8s.io/client-go/kubernetes"},
		},
		std: map[string]bool{"fmt": true},
	}
	r := rule{never: kubernetes}
	if got := r.breaches(module+"/controller", g); len(got) != 1 || chainText(got[0]) != "controller → kube → k8s.io/client-go/kubernetes" {
		t.Errorf("breaches = %q, want controller → kube → k8s.io/client-go/kubernetes", got)
	}
}
