package main

import (
	"context"
	"net"
	"strconv"
	"time"
)

func runServices(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("services", "[flags]")
	cf := m.addClientFlags(fs, true)
	if err := parseNoArgs(fs, cf, args, "services"); err != nil {
		return err
	}
	list, err := m.client(cf).Services(ctx)
	if err != nil {
		return err
	}
	return printList(m.Stdout, cf.output, list, func() error {
		now := time.Now()
		t := newTable(m.Stdout, "ID", "NAME", "USER", "STATE", "PHASE", "ENDPOINT", "RESTARTS", "AGE", "REASON")
		for _, s := range list {
			endpoint := "-"
			if s.Port > 0 {
				endpoint = net.JoinHostPort(s.Address, strconv.Itoa(s.Port))
			}
			t.row(s.ID, s.Name, orDash(s.User), string(s.State), orDash(s.Phase), endpoint,
				strconv.Itoa(max(s.Attempts-1, 0)), ago(s.CreatedAt, now), s.Reason)
		}
		return t.flush()
	})
}

func runEndpoints(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("endpoints", "[flags]")
	cf := m.addClientFlags(fs, true)
	if err := parseNoArgs(fs, cf, args, "endpoints"); err != nil {
		return err
	}
	list, err := m.client(cf).Endpoints(ctx)
	if err != nil {
		return err
	}
	return printList(m.Stdout, cf.output, list, func() error {
		now := time.Now()
		t := newTable(m.Stdout, "ENDPOINT", "MODEL", "JOB", "NAME", "USER", "READY")
		for _, e := range list {
			t.row(e.URL, orDash(e.Model), e.JobID, e.Name, orDash(e.User), ago(e.ReadySince, now))
		}
		return t.flush()
	})
}
