package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// submitArray submits n jobs to queue and returns their ids.
func (c *cli) submitArray(n int, queue string) []string {
	c.t.Helper()
	code, out, errOut := c.run("submit", "--array", strconv.Itoa(n), "--queue", queue, "--", "true")
	if ids := strings.Fields(out); code != 0 || len(ids) != n {
		c.t.Fatalf("submit --array %d: exit %d, %q, %q", n, code, out, errOut)
	}
	return strings.Fields(out)
}

// follow runs berth args, then each command its "more:" hint names, pasted
// as it is, until a page has none; it returns each page's stdout and hint.
func (c *cli) follow(args ...string) (pages, hints []string) {
	c.t.Helper()
	for len(pages) <= 100 {
		code, out, errOut := c.run(args...)
		if code != 0 {
			c.t.Fatalf("berth %s: exit %d, %q", strings.Join(args, " "), code, errOut)
		}
		pages = append(pages, out)
		if errOut == "" {
			return pages, hints
		}
		hint, ok := strings.CutPrefix(errOut, "more: berth ")
		if !ok || strings.Count(errOut, "\n") != 1 || !strings.HasSuffix(errOut, "\n") {
			c.t.Fatalf("berth %s: stderr %q, want nothing or one line \"more: berth …\"", strings.Join(args, " "), errOut)
		}
		hints = append(hints, strings.TrimSpace(errOut))
		args = strings.Fields(hint)
	}
	c.t.Fatalf("berth %s: more than 100 pages", strings.Join(args, " "))
	return nil, nil
}

// tableIDs returns the first column of a table's rows.
func tableIDs(t *testing.T, table string) []string {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(table, "\n"), "\n")
	if !strings.HasPrefix(lines[0], "ID ") {
		t.Fatalf("table %q has no header", table)
	}
	var ids []string
	for _, l := range lines[1:] {
		ids = append(ids, strings.Fields(l)[0])
	}
	return ids
}

// jsonIDs decodes a page printed with -o json, which must be a bare array.
func jsonIDs(t *testing.T, page string) []string {
	t.Helper()
	var jobs []struct{ ID string }
	if err := json.Unmarshal([]byte(page), &jobs); err != nil || jobs == nil {
		t.Fatalf("-o json printed %q, want a JSON array: %v", page, err)
	}
	var ids []string
	for _, j := range jobs {
		ids = append(ids, j.ID)
	}
	return ids
}

// wantEachOnce fails unless got holds every id of want exactly once.
func wantEachOnce(t *testing.T, what string, got, want []string) {
	t.Helper()
	got, want = slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))
	if !slices.Equal(got, want) {
		t.Errorf("%s listed %d jobs %v, want each of %d once: %v", what, len(got), got, len(want), want)
	}
}

// TestJobsSaysWhenThereIsMore checks that berth jobs, past its default of
// 100 jobs, prints the table and then, on stderr, the command for the next
// page, which lists the rest; --limit 0 lists every job with no hint.
func TestJobsSaysWhenThereIsMore(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	ids := c.submitArray(101, "gpu")

	code, out, errOut := c.run("jobs", "--expand") // arrays listed a job a row
	first := tableIDs(t, out)
	if code != 0 || len(first) != 100 {
		t.Fatalf("berth jobs: exit %d, %d rows, %q; want the newest 100", code, len(first), errOut)
	}
	if want := "more: berth jobs --expand=true --cursor " + first[99] + "\n"; errOut != want {
		t.Errorf("berth jobs: stderr %q, want %q", errOut, want)
	}
	pages, hints := c.follow("jobs", "--expand")
	if len(pages) != 2 || len(hints) != 1 {
		t.Fatalf("berth jobs: %d pages, hints %q; want 2 and one hint", len(pages), hints)
	}
	wantEachOnce(t, "berth jobs and its next page", append(tableIDs(t, pages[0]), tableIDs(t, pages[1])...), ids)

	code, out, errOut = c.run("jobs", "--expand", "--limit", "0")
	if all := tableIDs(t, out); code != 0 || len(all) != 101 || errOut != "" {
		t.Errorf("berth jobs --limit 0: exit %d, %d rows, stderr %q; want all 101 and no hint", code, len(all), errOut)
	}
	code, out, errOut = c.run("jobs", "--expand", "--limit", "0", "--cursor", "")
	if all := tableIDs(t, out); code != 0 || len(all) != 101 || errOut != "" {
		t.Errorf("berth jobs --cursor '': exit %d, %d rows, stderr %q; want the first page", code, len(all), errOut)
	}
}

// TestJobsHintKeepsTheFlags checks that the next-page hint repeats the
// filters, the limit and the output format given, so pasting it pages
// through exactly the jobs asked for, in a table or as JSON arrays.
func TestJobsHintKeepsTheFlags(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	gpu := c.submitArray(5, "gpu")
	c.submitArray(2, "cpu")

	for _, output := range []string{"table", "json"} {
		args := []string{"jobs", "--expand", "--queue", "gpu", "--state", "pending", "--limit", "2"}
		if output == "json" {
			args = append(args, "-o", "json")
		}
		pages, hints := c.follow(args...)
		if len(pages) != 3 || len(hints) != 2 {
			t.Fatalf("berth %s: %d pages, %d hints; want 3 and 2", strings.Join(args, " "), len(pages), len(hints))
		}
		for _, h := range hints {
			for _, flag := range []string{" --queue gpu", " --state pending", " --limit 2", " --cursor "} {
				if !strings.Contains(h, flag) {
					t.Errorf("-o %s: hint %q lacks %q", output, h, flag)
				}
			}
			if strings.Contains(h, "-o json") != (output == "json") {
				t.Errorf("-o %s: hint %q", output, h)
			}
		}
		var got []string
		for _, p := range pages {
			if output == "json" {
				got = append(got, jsonIDs(t, p)...)
			} else {
				got = append(got, tableIDs(t, p)...)
			}
		}
		wantEachOnce(t, "berth "+strings.Join(args, " ")+" and its hints", got, gpu)
	}
}

// TestJobsRejectsABadCursor checks that a cursor the server did not issue
// is one error line naming --cursor, and nothing on stdout.
func TestJobsRejectsABadCursor(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.submitArray(3, "gpu")
	for _, args := range [][]string{{"jobs", "--cursor", "garbage"}, {"jobs", "--cursor", "garbage", "-o", "json"}} {
		code, out, errOut := c.run(args...)
		if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 ||
			!strings.HasPrefix(errOut, "berth: --cursor: not a cursor this server issued") || !strings.Contains(errOut, "(invalid)") {
			t.Errorf("berth %s: exit %d, stdout %q, stderr %q; want exit 2 and one line naming --cursor",
				strings.Join(args, " "), code, out, errOut)
		}
	}
}

// TestNextPageHintQuotes checks that the hint quotes values for a shell and
// writes bool flags so that they paste back.
func TestNextPageHintQuotes(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("berth things", flag.ContinueOnError)
	p := addPageFlags(fs)
	fs.String("user", "", "")
	fs.String("o", "table", "")
	fs.Bool("all", false, "")
	if err := fs.Parse([]string{"--user", "ana's box", "-o", "json", "--all", "--cursor", "01OLD"}); err != nil {
		t.Fatal(err)
	}
	if p.cursor != "01OLD" {
		t.Errorf("--cursor = %q, want 01OLD", p.cursor)
	}
	var b bytes.Buffer
	p.printNext(&b, "01NEXT")
	if want := `more: berth things --all=true -o json --user 'ana'\''s box' --cursor 01NEXT` + "\n"; b.String() != want {
		t.Errorf("hint = %q, want %q", b.String(), want)
	}
	b.Reset()
	p.printNext(&b, "")
	if b.Len() != 0 {
		t.Errorf("hint on the last page = %q, want none", b.String())
	}
}

// TestJobShowsWhereAndHowItRuns checks that berth job shows what placement
// and running a job asked for — its host and labels, workdir, the names of
// its env variables, its gang size — and berth jobs its user.
func TestJobShowsWhereAndHowItRuns(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	dir := t.TempDir()
	code, out, errOut := c.run("submit", "--host", "other", "--labels", "zone=b,rack=2", "--workdir", dir, "--env", "B=2", "--env", "A=1",
		"--nodes", "2", "--", "train")
	if code != 0 {
		t.Fatalf("submit: exit %d, %q", code, errOut)
	}
	id := strings.TrimSpace(out)
	_, out, _ = c.run("job", id)
	for _, want := range []string{
		"Nodes:     2 (a gang: each gets these resources)\n",
		"Placement: host other, labels rack=2,zone=b\n",
		"Workdir:   " + dir + "\n",
		"Env:       A B (values: -o json)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("berth job lacks %q:\n%s", want, out)
		}
	}
	_, out, _ = c.run("jobs")
	if lines := strings.Split(out, "\n"); !strings.Contains(lines[0], " USER ") || !strings.Contains(lines[1], " local ") {
		t.Errorf("berth jobs has no USER column with the submitter:\n%s", out)
	}
}
