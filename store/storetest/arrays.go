package storetest

import (
	"slices"
	"testing"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
)

// testArraySpec writes an array as the controller submits one (one
// batch, every job with the spec of the first), with a few jobs whose
// spec differs amid them and more jobs of the array in a later batch,
// and reads every job back exactly as written: through Job, Jobs (a name
// filter too), JobsByIdempotencyKey and LoadActive. A handoff's cluster
// set on the array's first job, or on another, changes that job alone.
func testArraySpec(t *testing.T, s store.Store) {
	var ids idSource
	const n = 300
	first := fullJob(ids.next())
	first.ArrayIndex, first.State, first.Reason, first.ExitCode, first.Attempts = intPtr(0), berth.JobPending, "waiting", nil, 0
	first.StartedAt, first.FinishedAt = first.StartedAt.AddDate(-1, 0, 0), first.FinishedAt.AddDate(-1, 0, 0)
	jobs := []*berth.Job{first}
	for i := 1; i < n; i++ {
		j := cloneJob(first)
		j.ID, j.ArrayIndex = ids.next(), intPtr(i)
		jobs = append(jobs, j)
	}
	jobs[5].Env = map[string]string{"OTHER": "x"}
	jobs[6].Name, jobs[6].Queue, jobs[6].User = "other-name", "cpu", "bob"
	jobs[7].State, jobs[7].Attempts, jobs[7].Reason = berth.JobRunning, 1, ""
	write(t, s, &store.Batch{Jobs: jobs})
	var later []*berth.Job // the array's first job is not in their batch
	for i := n; i < n+10; i++ {
		j := cloneJob(first)
		j.ID, j.ArrayIndex = ids.next(), intPtr(i)
		later = append(later, j)
	}
	write(t, s, &store.Batch{Jobs: later})
	all := append(slices.Clone(jobs), later...)

	check := func(when string) {
		t.Helper()
		for _, want := range all {
			checkEqual(t, when+": Job("+want.ID+")", getJob(t, s, want.ID), want)
		}
		listed := listJobs(t, s, store.JobFilter{})
		slices.Reverse(listed)
		checkEqual(t, when+": Jobs", listed, all)
		named := listJobs(t, s, store.JobFilter{Name: first.Name})
		slices.Reverse(named)
		checkEqual(t, when+": Jobs named "+first.Name, named,
			slices.DeleteFunc(slices.Clone(all), func(j *berth.Job) bool { return j.Name != first.Name }))
		keyed, err := s.JobsByIdempotencyKey(t.Context(), first.IdempotencyKey)
		if err != nil {
			t.Fatalf("JobsByIdempotencyKey: %v", err)
		}
		checkEqual(t, when+": JobsByIdempotencyKey", keyed, all)
		checkEqual(t, when+": LoadActive", loadActive(t, s).Jobs, all)
	}
	check("as submitted")

	write(t, s, &store.Batch{Federation: &store.FederationBatch{JobClusters: []store.JobCluster{
		{JobID: first.ID, Cluster: "p9"}, {JobID: jobs[1].ID, Cluster: "p8"}, {JobID: later[0].ID, Cluster: ""},
	}}})
	jobs[0].Cluster, jobs[1].Cluster, later[0].Cluster = "p9", "p8", ""
	check("after handoffs")
}
