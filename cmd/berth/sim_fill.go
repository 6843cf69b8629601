package main

import (
	"context"
	"fmt"
	"html"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/scheduler"
	"github.com/berth-dev/berth/sim"
	"github.com/berth-dev/berth/sim/trace"
)

// fillPolicies are the policies berth sim fill compares by default: the
// paper's baseline, FGD and Berth's default.
const fillPolicies = "bestfit,fgd,berth"

// fillTrace is one trace's fill experiment under each policy.
type fillTrace struct {
	Trace   string                    `json:"trace"`
	Tasks   int                       `json:"tasks"` // records the draws come from
	Results map[string]sim.FillResult `json:"results"`
}

// fillReport is what berth sim fill -o json prints.
type fillReport struct {
	Cluster  string      `json:"cluster"`
	Workers  int         `json:"workers"`
	GPUs     int         `json:"gpus"`
	Seed     uint64      `json:"seed"`
	Policies []string    `json:"policies"`
	Traces   []fillTrace `json:"traces"`
}

// runSimFill is berth sim fill: the fragmentation experiment of the FGD
// paper on each trace given (docs/placement.md).
func runSimFill(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("sim fill", "--cluster FILE [flags] TRACE...")
	cluster := fs.String("cluster", "", "cluster: an Alibaba node list or Berth YAML (workers:)")
	policy := fs.String("policy", fillPolicies, "policies to compare, comma-separated")
	seed := fs.Uint64("seed", 1, "seed of the draws: the same seed, the same tasks and results")
	points := fs.String("points", "50,70,90,100", "arrived loads to report, in % of the cluster's GPU capacity")
	svg := fs.String("svg", "", "also write a plot of unallocated GPU capacity against arrived load to this SVG file")
	output := fs.String("o", "table", "output: table or json")
	if err := parse(fs, args); err != nil {
		return err
	}
	var loads []float64
	for _, p := range strings.Split(*points, ",") {
		v, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(p), "%"), 64)
		if err != nil || !(v > 0) || v > 400 {
			return berth.Invalidf("--points", "%q is not a load from 1 to 400 (%%)", p)
		}
		loads = append(loads, v/100)
	}
	switch {
	case fs.NArg() == 0:
		return berth.Invalidf("args", "name at least one trace (an Alibaba pod list)")
	case *cluster == "":
		return berth.Invalidf("--cluster", "is required")
	case *output != "table" && *output != "json":
		return berth.Invalidf("-o", "must be table or json")
	}
	rep := fillReport{Cluster: *cluster, Seed: *seed}
	var configs []scheduler.Config
	var err error
	if rep.Policies, configs, err = parsePolicies(*policy); err != nil {
		return err
	}
	c, err := trace.LoadCluster(*cluster, trace.FormatAuto)
	if err != nil {
		return err
	}
	rep.Workers, rep.GPUs = len(c.Workers), c.GPUs()
	pools := make([][]sim.Job, fs.NArg())
	for i, path := range fs.Args() {
		if pools[i], err = trace.LoadTasks(path, trace.FormatAuto); err != nil {
			return err
		}
	}
	opt := sim.FillOptions{Seed: *seed, Points: loads}
	if *svg != "" {
		opt.Curve = 0.01
	}
	for i, path := range fs.Args() {
		ft := fillTrace{Trace: path, Tasks: len(pools[i]), Results: map[string]sim.FillResult{}}
		for k, name := range rep.Policies {
			res, err := sim.Fill(ctx, c, pools[i], configs[k], opt)
			if err != nil {
				return fmt.Errorf("sim fill %s on %s: %w", name, path, err)
			}
			res.Policy = name
			ft.Results[name] = res
		}
		rep.Traces = append(rep.Traces, ft)
	}
	if *svg != "" {
		if err := writeFillSVG(*svg, &rep, slices.Min(loads), slices.Max(loads)); err != nil {
			return err
		}
	}
	if *output == "json" {
		return printJSON(m.Stdout, rep)
	}
	return printFill(m.Stdout, &rep)
}

// printFill writes, for each trace, the unallocated share at each point,
// one column per policy.
func printFill(w io.Writer, rep *fillReport) error {
	fmt.Fprintf(w, "berth sim fill: %s (%d workers, %d GPUs), seed %d\n", rep.Cluster, rep.Workers, rep.GPUs, rep.Seed)
	fmt.Fprintln(w, "unallocated GPU capacity (% of the cluster's) as the arrived load grows; tasks never leave")
	for _, ft := range rep.Traces {
		fmt.Fprintf(w, "\n%s (%d tasks to draw from)\n", ft.Trace, ft.Tasks)
		t := newTable(w, append([]string{"arrived load"}, rep.Policies...)...)
		first := ft.Results[rep.Policies[0]]
		for i, p := range first.Points {
			cols := []string{fmt.Sprintf("%.0f%%", 100*p.Arrived)}
			for _, name := range rep.Policies {
				cols = append(cols, fmt.Sprintf("%.1f%%", 100*ft.Results[name].Points[i].Unallocated))
			}
			t.row(cols...)
		}
		row := func(name string, cell func(sim.FillResult) string) {
			cols := []string{name}
			for _, p := range rep.Policies {
				cols = append(cols, cell(ft.Results[p]))
			}
			t.row(cols...)
		}
		row("at first failure", func(r sim.FillResult) string { return fmt.Sprintf("%.1f%%", 100*r.UnallocatedAtFull) })
		row("  (arrived then)", func(r sim.FillResult) string { return fmt.Sprintf("%.1f%%", 100*r.ArrivedAtFull) })
		row("tasks placed", func(r sim.FillResult) string {
			if r.Unfit > 0 {
				return fmt.Sprintf("%d of %d (%d never fit)", r.Placed, r.Tasks, r.Unfit)
			}
			return fmt.Sprintf("%d of %d", r.Placed, r.Tasks)
		})
		if err := t.flush(); err != nil {
			return err
		}
	}
	return nil
}

// SVG plot geometry: each trace a panel.
const (
	panelW, panelH = 300, 240
	plotX, plotY   = 50, 30 // the axes' origin inside a panel, from its top left
	plotW, plotH   = 230, 170
)

// fillColors are the policies' line colours, in order.
var fillColors = []string{"#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e"}

// writeFillSVG plots, for each trace, the unallocated share against the
// arrived load from lo to hi, a line per policy with a dot where its first
// task failed, and the ideal (1 − arrived) dashed.
func writeFillSVG(path string, rep *fillReport, lo, hi float64) error {
	var b strings.Builder
	width, height := panelW*len(rep.Traces), panelH+20*len(rep.Policies)+20
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	if lo >= hi {
		lo = 0
	}
	top := max(1-lo, 0.05) // the y axis: 0 to what is unallocated at lo, ideally
	x := func(p float64) float64 { return plotX + plotW*(p-lo)/(hi-lo) }
	y := func(u float64) float64 { return plotY + plotH*(1-min(u, top)/top) }
	for i, ft := range rep.Traces {
		fmt.Fprintf(&b, `<g transform="translate(%d,0)">`+"\n", i*panelW)
		fmt.Fprintf(&b, `<text x="%d" y="18" text-anchor="middle" font-weight="bold">%s</text>`+"\n", plotX+plotW/2, html.EscapeString(filepath.Base(ft.Trace)))
		fmt.Fprintf(&b, `<path d="M%d %d V%d H%d" fill="none" stroke="black"/>`+"\n", plotX, plotY, plotY+plotH, plotX+plotW)
		for k := range 6 {
			f := float64(k) / 5
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%.0f%%</text>`+"\n", plotX-4, y(f*top)+4, 100*f*top)
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%.0f%%</text>`+"\n", x(lo+f*(hi-lo)), plotY+plotH+14, 100*(lo+f*(hi-lo)))
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">arrived load (%% of GPU capacity)</text>`+"\n", plotX+plotW/2, plotY+plotH+30)
		fmt.Fprintf(&b, `<text transform="translate(12,%d) rotate(-90)" text-anchor="middle">unallocated GPU capacity</text>`+"\n", plotY+plotH/2)
		fmt.Fprintf(&b, `<path d="M%.1f %.1f L%.1f %.1f" stroke="gray" stroke-dasharray="4 3"/>`+"\n", x(lo), y(1-lo), x(hi), y(max(1-hi, 0)))
		for k, name := range rep.Policies {
			r := ft.Results[name]
			color := fillColors[k%len(fillColors)]
			var d strings.Builder
			for _, p := range r.Curve {
				if p.Arrived < lo-1e-9 {
					continue
				}
				cmd := "L"
				if d.Len() == 0 {
					cmd = "M"
				}
				fmt.Fprintf(&d, "%s%.1f %.1f ", cmd, x(p.Arrived), y(p.Unallocated))
			}
			fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.5"/>`+"\n", strings.TrimSpace(d.String()), color)
			if r.ArrivedAtFull >= lo && r.ArrivedAtFull <= hi {
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", x(r.ArrivedAtFull), y(r.UnallocatedAtFull), color)
			}
		}
		b.WriteString("</g>\n")
	}
	for k, name := range append(slices.Clone(rep.Policies), "ideal (1 − arrived); a dot: the first task that failed") {
		ly := panelH + 20*k + 10
		color, dash := "gray", ` stroke-dasharray="4 3"`
		if k < len(rep.Policies) {
			color, dash = fillColors[k%len(fillColors)], ""
		}
		fmt.Fprintf(&b, `<path d="M%d %d h30" stroke="%s" stroke-width="1.5"%s/><text x="%d" y="%d">%s</text>`+"\n", plotX, ly, color, dash, plotX+36, ly+4, html.EscapeString(name))
	}
	b.WriteString("</svg>\n")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return berth.Invalidf("--svg", "cannot write %s: %v", path, err)
	}
	return nil
}
