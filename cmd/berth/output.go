package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/goccy/go-yaml"
)

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printData writes v as output (json or yaml) says.
func printData(w io.Writer, output string, v any) error {
	if output != "yaml" {
		return printJSON(w, v)
	}
	data, err := json.Marshal(v) // the JSON field names, one spelling for both
	if err == nil {
		data, err = yaml.JSONToYAML(data)
	}
	if err != nil {
		return fmt.Errorf("-o yaml: %w", err)
	}
	_, err = w.Write(data)
	return err
}

// printList prints list as a JSON or YAML array (never null) when output
// is json or yaml, else with table.
func printList[T any](w io.Writer, output string, list []T, table func() error) error {
	if output == "json" || output == "yaml" {
		if list == nil {
			list = []T{}
		}
		return printData(w, output, list)
	}
	return table()
}

// table writes aligned columns.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, headers ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
	t.row(headers...)
	return t
}

func (t *table) row(cols ...string) { fmt.Fprintln(t.tw, strings.Join(cols, "\t")) }

func (t *table) flush() error { return t.tw.Flush() }

// ago formats how long before now t was, e.g. "3m".
func ago(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// truncate shortens s to n runes with an ellipsis.
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
