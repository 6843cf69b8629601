package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth"
)

func runWorkers(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("workers", "[flags]")
	cf := m.addClientFlags(fs, true)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	list, err := m.client(cf).Workers(ctx)
	if err != nil {
		return err
	}
	if cf.output != "table" {
		return printData(m.Stdout, cf.output, list)
	}
	now := time.Now()
	t := newTable(m.Stdout, "HOST", "ADDRESS", "STATE", "DESIRED", "GPUS", "FREE", "RUNNING", "SLOTS", "QUEUES", "HEARTBEAT", "RESERVED FOR",
		"ISOLATION", "ID")
	for _, w := range list {
		gpus, free := "-", "-"
		if len(w.GPUs) > 0 {
			gpus = berth.GPUSpec(w.GPUs)
			if len(w.FaultyGPUs) > 0 {
				gpus += fmt.Sprintf(" (%d faulty)", len(w.FaultyGPUs))
			}
			free = strconv.Itoa(max(len(w.GPUs)-len(w.FaultyGPUs)-w.GPUsInUse, 0))
			if w.GPUMilliShared > 0 {
				free += " +" + berth.FormatGPUs(w.GPUMilliShared) + " shared"
			}
		}
		queues := "*"
		if len(w.Queues) > 0 {
			queues = strings.Join(w.Queues, ",")
		}
		reserved := "-"
		if w.ReservedFor != "" {
			reserved = w.ReservedFor
		}
		t.row(w.Host, orDash(w.Advertise), string(w.State), desiredSummary(w), gpus, free, strconv.Itoa(w.Running), strconv.Itoa(w.Slots), queues,
			ago(w.LastHeartbeat, now), reserved, orDash(w.Isolation), w.ID)
	}
	return t.flush()
}
