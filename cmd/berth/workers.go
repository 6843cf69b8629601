package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth"
)

// gpuSummary counts GPUs by model, in the order the models first appear:
// "2xA100,1xT4".
func gpuSummary(gpus []berth.GPU) string {
	var models []string
	count := map[string]int{}
	for _, g := range gpus {
		if count[g.Model] == 0 {
			models = append(models, g.Model)
		}
		count[g.Model]++
	}
	parts := make([]string, len(models))
	for i, model := range models {
		parts[i] = fmt.Sprintf("%dx%s", count[model], model)
	}
	return strings.Join(parts, ",")
}

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
	if cf.output == "json" {
		return printJSON(m.Stdout, list)
	}
	now := time.Now()
	t := newTable(m.Stdout, "HOST", "STATE", "DESIRED", "GPUS", "FREE", "RUNNING", "SLOTS", "QUEUES", "HEARTBEAT", "RESERVED FOR", "ID")
	for _, w := range list {
		gpus, free := "-", "-"
		if len(w.GPUs) > 0 {
			gpus = gpuSummary(w.GPUs)
			if len(w.FaultyGPUs) > 0 {
				gpus += fmt.Sprintf(" (%d faulty)", len(w.FaultyGPUs))
			}
			free = strconv.Itoa(max(len(w.GPUs)-len(w.FaultyGPUs)-w.GPUsInUse, 0))
		}
		queues := "*"
		if len(w.Queues) > 0 {
			queues = strings.Join(w.Queues, ",")
		}
		reserved := "-"
		if w.ReservedFor != "" {
			reserved = w.ReservedFor
		}
		t.row(w.Host, string(w.State), desiredSummary(w), gpus, free, strconv.Itoa(w.Running), strconv.Itoa(w.Slots), queues,
			ago(w.LastHeartbeat, now), reserved, w.ID)
	}
	return t.flush()
}
