package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/arbiter"
)

// scheduleCommands are the subcommands of berth schedule.
var scheduleCommands = subcommands{
	name: "schedule",
	help: `Usage: berth schedule add|list|rm [flags] [args]

The schedule registry (Spark Control's /api/schedule): recurring jobs that
schedulers outside Berth run on the GPUs, registered so that everyone sees
what will touch the GPUs and when. Berth displays them; it does not run
them, unless an entry carries a job (-f or a command): then Berth submits
that job itself at every time --cron names (UTC).

  berth schedule add --name N [--id ID] [--owner O] [--cron "0 6 * * *"]
                     [--next-run 2026-06-18T06:00:00Z] [--description D]
                     [-f job.yaml | -- COMMAND ARGS...]
                     registers (or, with a known --id, updates); prints the id
  berth schedule list [-o json]
  berth schedule rm ID

Run berth schedule SUBCOMMAND -h for its flags.
`,
	run: map[string]func(ctx context.Context, m *Main, args []string) error{
		"add":  runScheduleAdd,
		"list": runScheduleList,
		"rm":   runScheduleRm,
	},
}

func runSchedule(ctx context.Context, m *Main, args []string) error {
	return scheduleCommands.dispatch(ctx, m, args)
}

func runScheduleAdd(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("schedule add", "--name N [--id ID] [--owner O] [--cron EXPR] [--next-run TIME] [--description D] [-f job.yaml | -- COMMAND ARGS...]")
	cf := m.addClientFlags(fs, true)
	var req berth.ScheduleRequest
	fs.StringVar(&req.Name, "name", "", "what the job is called (required)")
	fs.StringVar(&req.ID, "id", "", "a stable id (A-Z a-z 0-9 _ . -, at most 64) to update in place on re-registering; default: a new one")
	fs.StringVar(&req.Owner, "owner", "", "who runs it")
	fs.StringVar(&req.Cron, "cron", "", `when it runs, as 5-field cron ("0 6 * * *") or @daily, @hourly, …`)
	fs.StringVar(&req.NextRun, "next-run", "", "its next run, RFC 3339 (2026-06-18T06:00:00Z)")
	fs.StringVar(&req.Description, "description", "", "what it does to the GPUs")
	file := fs.String("f", "", "a job file (YAML or JSON, as for berth submit; - for stdin) that Berth runs at every --cron time")
	hold := fs.Bool("hold-until-fits", false, "with a job: register it even when no worker could ever run it (each run waits for one that fits)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	if req.Name == "" {
		return berth.Invalidf("--name", "is required")
	}
	if cmd := fs.Args(); *file != "" || len(cmd) > 0 {
		// A job: Berth runs it on the cron.
		job := berth.SubmitRequest{JobSpec: berth.DefaultJobSpec()}
		if *file != "" {
			stdin := m.Stdin
			if stdin == nil {
				stdin = os.Stdin
			}
			if err := loadJobFile(*file, stdin, &job); err != nil {
				return err
			}
		}
		if len(cmd) > 0 {
			job.Command = cmd
		}
		if givenFlags(fs)["hold-until-fits"] {
			job.HoldUntilFits = *hold
		}
		if req.Cron == "" {
			return berth.Invalidf("--cron", "is required with a job: it says when Berth runs it")
		}
		req.Job = &job
	}
	s, err := m.client(cf).PutSchedule(ctx, req)
	if err != nil {
		return err
	}
	if cf.output != "table" {
		return printData(m.Stdout, cf.output, s)
	}
	fmt.Fprintln(m.Stdout, s.ID)
	return nil
}

func runScheduleList(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("schedule list", "[flags]")
	cf := m.addClientFlags(fs, true)
	if err := parseNoArgs(fs, cf, args, "schedule list"); err != nil {
		return err
	}
	list, err := m.client(cf).Schedules(ctx)
	if err != nil {
		return err
	}
	if list == nil {
		list = []*berth.Schedule{}
	}
	return printList(m.Stdout, cf.output, list, func() error {
		now := time.Now()
		t := newTable(m.Stdout, "ID", "NAME", "OWNER", "CRON", "NEXT RUN", "LAST RUN", "UPDATED")
		for _, s := range list {
			t.row(s.ID, truncate(s.Name, 40), orDash(s.Owner), orDash(s.Cron), nextRun(s, now), lastRun(s, now), ago(s.UpdatedAt, now))
		}
		return t.flush()
	})
}

// nextRun says when s runs next: for an entry with a job, the next time
// its cron names (the server's runner reads cron in UTC), e.g.
// "2026-06-18 06:00Z (in 3h)"; else the time the entry displays.
func nextRun(s *berth.Schedule, now time.Time) string {
	c, err := arbiter.ParseCron(s.Cron)
	if s.Job == nil || err != nil {
		return orDash(s.NextRun)
	}
	next := c.Next(now.UTC())
	if next.IsZero() {
		return "never"
	}
	return next.Format("2006-01-02 15:04Z") + " (in " + ago(now, next) + ")"
}

// lastRun says when s's job last ran and what became of it: "3h ago
// (01J…)", "3h ago (failed: …)", or "-" before its first run.
func lastRun(s *berth.Schedule, now time.Time) string {
	switch {
	case s.Job == nil || s.LastRun.IsZero():
		return "-"
	case s.LastError != "":
		return ago(s.LastRun, now) + " ago (failed: " + truncate(s.LastError, 40) + ")"
	}
	return ago(s.LastRun, now) + " ago (" + s.LastJobID + ")"
}

func runScheduleRm(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("schedule rm", "[flags] ID")
	cf := m.addClientFlags(fs, false)
	id, err := parseOneArg(fs, cf, args, "id", "give exactly one schedule id (see berth schedule list)")
	if err != nil {
		return err
	}
	if err := m.client(cf).DeleteSchedule(ctx, id); err != nil {
		return err
	}
	fmt.Fprintf(m.Stdout, "%s removed\n", id)
	return nil
}
