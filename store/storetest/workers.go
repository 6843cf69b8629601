package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
)

// workerTests check workers, quota rules and worker controls
// (store.JobStore, store.ControlReader).
var workerTests = []test{
	{"Workers", testWorkers},
	{"Quotas", testQuotas},
	{"QuotaWritesInBatchOrder", testQuotaWritesInBatchOrder},
	{"WorkerControls", testWorkerControls},
	{"WorkerControlUpsertsLastWins", testWorkerControlUpsertsLastWins},
}

func testWorkers(t *testing.T, s store.Store) {
	var ids idSource
	if ws := getWorkers(t, s); len(ws) != 0 {
		t.Errorf("Workers of an empty store = %s, want none", dump(ws))
	}
	w1 := &berth.Worker{
		ID: ids.next(), Host: "gpu-1", Queues: []string{"gpu", "cpu"},
		GPUs: []berth.GPU{
			{Index: 0, UUID: "GPU-6b5c2f1e-0000", Model: "NVIDIA H100 80GB HBM3", Memory: 80 << 30},
			{Index: 1, UUID: "GPU-6b5c2f1e-0001", Model: "NVIDIA H100 80GB HBM3", Memory: 80<<30 + 1},
		},
		CPUs: 63.5, Memory: 512 << 30, Slots: 8, Labels: map[string]string{"zone": "a", "rack": "7"},
		Version: "v1.2.3", State: berth.WorkerReady, Running: 2,
		LastHeartbeat: base.Add(7), RegisteredAt: base,
	}
	w2 := &berth.Worker{ID: ids.next(), Host: "cpu-1", State: berth.WorkerLost}
	// Written out of id order: Workers returns them by id.
	write(t, s, &store.Batch{Workers: []*berth.Worker{w2, w1}})
	checkEqual(t, "Workers", getWorkers(t, s), []*berth.Worker{w1, w2})

	busy := *w1
	busy.State, busy.Running, busy.LastHeartbeat = berth.WorkerBusy, 8, base.Add(time.Minute+9)
	busy.GPUs = busy.GPUs[:1]
	busy.Labels = map[string]string{"zone": "b"}
	write(t, s, &store.Batch{Workers: []*berth.Worker{&busy}})
	checkEqual(t, "Workers after update", getWorkers(t, s), []*berth.Worker{&busy, w2})

	// A later upsert of the same id in one batch wins.
	back := *w2
	back.State, back.LastHeartbeat = berth.WorkerReady, base.Add(time.Hour)
	parked := back
	parked.State = berth.WorkerParked
	w3 := &berth.Worker{ID: ids.next(), Host: "cpu-2", State: berth.WorkerReady, RegisteredAt: base.Add(3)}
	write(t, s, &store.Batch{Workers: []*berth.Worker{&back, w3, &parked}})
	checkEqual(t, "Workers after batch", getWorkers(t, s), []*berth.Worker{&busy, &parked, w3})
}

func testQuotas(t *testing.T, s store.Store) {
	if qs := getQuotas(t, s); len(qs) != 0 {
		t.Errorf("Quotas of an empty store = %s, want none", dump(qs))
	}
	// Every field, full time precision, fractional weights, NoLimit and 0.
	alice := quotaRule("user", "alice", 8, berth.NoLimit, 2.625, 1)
	gpu := quotaRule("queue", "gpu", 0, 0, 0, 2)
	tmpl := quotaRule("template", "jupyter.v2", berth.NoLimit, 3, 0, 3)
	bob := quotaRule("user", "bob@example.org", berth.MaxQuotaValue, berth.MaxQuotaValue, 1000, 4)
	// Written out of id order: Quotas returns them by id.
	write(t, s, &store.Batch{Quotas: []*berth.QuotaRule{tmpl, bob, gpu, alice}})
	checkEqual(t, "Quotas", getQuotas(t, s), []*berth.QuotaRule{gpu, tmpl, alice, bob})

	// An upsert of the same id replaces every field.
	aliceLater := quotaRule("user", "alice", berth.NoLimit, 4, 0, 5)
	// A time in another location is stored as the same instant, read in UTC.
	in := *aliceLater
	in.UpdatedAt = in.UpdatedAt.In(time.FixedZone("UTC-7", -7*3600))
	write(t, s, &store.Batch{Quotas: []*berth.QuotaRule{&in}})
	checkEqual(t, "Quotas after update", getQuotas(t, s), []*berth.QuotaRule{gpu, tmpl, aliceLater, bob})

	// Deletes: a known id goes, an unknown one is no error and changes
	// nothing, in a batch with other writes too.
	var ids idSource
	job := newJob(ids.next(), "gpu", "alice", berth.JobPending)
	write(t, s, &store.Batch{Jobs: []*berth.Job{job}, QuotaDeletes: []string{tmpl.ID(), "user:nobody"}})
	checkEqual(t, "Quotas after delete", getQuotas(t, s), []*berth.QuotaRule{gpu, aliceLater, bob})
	checkJob(t, s, job)
	write(t, s, &store.Batch{QuotaDeletes: []string{tmpl.ID(), "queue:none", ""}})
	checkEqual(t, "Quotas after deletes of unknown ids", getQuotas(t, s), []*berth.QuotaRule{gpu, aliceLater, bob})

	// A deleted rule can be written again.
	tmplAgain := quotaRule("template", "jupyter.v2", 1, berth.NoLimit, 0, 6)
	write(t, s, &store.Batch{Quotas: []*berth.QuotaRule{tmplAgain}})
	checkEqual(t, "Quotas after rewrite", getQuotas(t, s), []*berth.QuotaRule{gpu, tmplAgain, aliceLater, bob})
	checkEqual(t, "Active.Quotas", loadActive(t, s).Quotas, []*berth.QuotaRule{gpu, tmplAgain, aliceLater, bob})
}

func testQuotaWritesInBatchOrder(t *testing.T, s store.Store) {
	a1, a2 := quotaRule("user", "alice", 1, berth.NoLimit, 0, 1), quotaRule("user", "alice", 2, berth.NoLimit, 0, 2)
	b1 := quotaRule("user", "bob", 1, berth.NoLimit, 0, 1)
	c1, c2 := quotaRule("queue", "cpu", berth.NoLimit, 1, 0, 1), quotaRule("queue", "cpu", berth.NoLimit, 2, 0, 2)
	write(t, s, &store.Batch{Quotas: []*berth.QuotaRule{b1, c1}})

	// In one batch a later upsert of the same id wins, and deletes apply
	// after upserts: a rule both upserted and deleted is gone.
	write(t, s, &store.Batch{Quotas: []*berth.QuotaRule{a1, b1, a2}, QuotaDeletes: []string{b1.ID()}})
	checkEqual(t, "Quotas after upserts and a delete", getQuotas(t, s), []*berth.QuotaRule{c1, a2})

	// Batches merged with Append keep the order of each rule's writes:
	// upsert then delete deletes, delete then upsert keeps the upsert, and
	// the last of several wins.
	merged := &store.Batch{}
	for _, w := range []*store.Batch{
		{Quotas: []*berth.QuotaRule{b1}}, {QuotaDeletes: []string{b1.ID()}}, // new, then deleted
		{QuotaDeletes: []string{c1.ID()}}, {Quotas: []*berth.QuotaRule{c2}}, // stored, deleted, then upserted
		// stored, deleted, upserted, deleted, upserted again: a2 wins
		{QuotaDeletes: []string{a1.ID()}}, {Quotas: []*berth.QuotaRule{a1}},
		{QuotaDeletes: []string{a1.ID()}}, {Quotas: []*berth.QuotaRule{a2}},
		{QuotaDeletes: []string{"user:none"}}, // unknown: no effect
	} {
		merged.Append(w)
	}
	write(t, s, merged)
	checkEqual(t, "Quotas after merged batches", getQuotas(t, s), []*berth.QuotaRule{c2, a2})

	// The same through Compact, as the committer writes them.
	merged = &store.Batch{}
	merged.Append(&store.Batch{QuotaDeletes: []string{a2.ID()}})
	merged.Append(&store.Batch{Quotas: []*berth.QuotaRule{b1}})
	merged.Append(&store.Batch{Quotas: []*berth.QuotaRule{a1}})
	merged.Append(&store.Batch{QuotaDeletes: []string{c2.ID(), b1.ID()}})
	merged.Compact()
	write(t, s, merged)
	checkEqual(t, "Quotas after compacted batches", getQuotas(t, s), []*berth.QuotaRule{a1})
}

func testWorkerControls(t *testing.T, s store.Store) {
	if cs := getControls(t, s); len(cs) != 0 {
		t.Errorf("WorkerControls of an empty store = %s, want none", dump(cs))
	}
	// Every field, full time precision. One host's queues, its "*" control
	// and a host whose label is a prefix of another's are kept apart.
	// Order is by host, then queue, byte-wise: "gpu" before "gpu-1" (by
	// ID() it would be after), and "*" before any queue name.
	gpuAll := control("gpu", berth.AllQueues, berth.DesiredOff, berth.StopHard, "ops", 1)
	gpuGPU := control("gpu", "gpu", berth.DesiredOn, berth.StopDrain, "alice@example.org", 2)
	gpuCPU := control("gpu", "cpu", berth.DesiredOff, berth.StopPause, "", 3)
	gpu1 := control("gpu-1", "gpu", berth.DesiredOff, "custom_policy-2", "rails", 4)
	spark := control("Spark.lan", "ingest-0", berth.DesiredOn, berth.StopHard, "", 5)
	// Written out of order.
	write(t, s, &store.Batch{Controls: []*berth.WorkerControl{gpu1, gpuGPU, spark, gpuAll, gpuCPU}})
	want := []*berth.WorkerControl{spark, gpuAll, gpuCPU, gpuGPU, gpu1}
	checkEqual(t, "WorkerControls", getControls(t, s), want)
	checkEqual(t, "Active.Controls", loadActive(t, s).Controls, want)

	// An upsert of the same host and queue replaces every field, and
	// touches no other control of the host. A time in another location is
	// stored as the same instant, read in UTC.
	gpuGPUOff := control("gpu", "gpu", berth.DesiredOff, berth.StopHard, "", 6)
	in := *gpuGPUOff
	in.UpdatedAt = in.UpdatedAt.In(time.FixedZone("UTC+9", 9*3600))
	var ids idSource
	job := newJob(ids.next(), "gpu", "alice", berth.JobPending)
	write(t, s, &store.Batch{Jobs: []*berth.Job{job}, Controls: []*berth.WorkerControl{&in}})
	want = []*berth.WorkerControl{spark, gpuAll, gpuCPU, gpuGPUOff, gpu1}
	checkEqual(t, "WorkerControls after upsert", getControls(t, s), want)
	checkJob(t, s, job)

	// Turning the "*" control on leaves the per-queue ones as they are; a
	// zero time stays zero.
	gpuAllOn := control("gpu", berth.AllQueues, berth.DesiredOn, berth.StopHard, "ops", 0)
	gpuAllOn.UpdatedAt = time.Time{}
	write(t, s, &store.Batch{Controls: []*berth.WorkerControl{gpuAllOn}})
	want = []*berth.WorkerControl{spark, gpuAllOn, gpuCPU, gpuGPUOff, gpu1}
	checkEqual(t, "WorkerControls after turning * on", getControls(t, s), want)
	checkEqual(t, "Active.Controls after turning * on", loadActive(t, s).Controls, want)
}

func testWorkerControlUpsertsLastWins(t *testing.T, s store.Store) {
	first := control("gpu-1", "gpu", berth.DesiredOff, berth.StopHard, "ops", 1)
	other := control("gpu-1", "cpu", berth.DesiredOff, berth.StopHard, "ops", 2)
	second := control("gpu-1", "gpu", berth.DesiredOn, berth.StopDrain, "alice", 3)
	write(t, s, &store.Batch{Controls: []*berth.WorkerControl{first, other, second}})
	checkEqual(t, "WorkerControls", getControls(t, s), []*berth.WorkerControl{other, second})

	// Batches merged with Append, compacted or not, keep the last.
	third := control("gpu-1", "gpu", berth.DesiredOff, berth.StopPause, "bob", 4)
	otherOn := control("gpu-1", "cpu", berth.DesiredOn, berth.StopHard, "", 5)
	for _, compact := range []bool{false, true} {
		merged := &store.Batch{}
		merged.Append(&store.Batch{Controls: []*berth.WorkerControl{first}})
		merged.Append(&store.Batch{Controls: []*berth.WorkerControl{otherOn, third}})
		if compact {
			merged.Compact()
		}
		write(t, s, merged)
		checkEqual(t, fmt.Sprintf("WorkerControls after merged batches (compacted %v)", compact), getControls(t, s),
			[]*berth.WorkerControl{otherOn, third})
		write(t, s, &store.Batch{Controls: []*berth.WorkerControl{other, second}})
	}
}
