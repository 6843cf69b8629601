package web_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/api"
	"github.com/berth-dev/berth/api/apitest"
	"github.com/berth-dev/berth/auth"
	"github.com/berth-dev/berth/controller"
	"github.com/berth-dev/berth/sqlite"
	"github.com/berth-dev/berth/store"
	"github.com/berth-dev/berth/web"
)

// BenchmarkPagesAtScale renders the main pages of a cluster of 1,000
// workers (8 GPUs each) and 100,000 jobs (half pending, half ended), the
// scale the dashboard must stay usable at: go test -run ^$ -bench
// PagesAtScale ./web/. It reports ms per page view.
func BenchmarkPagesAtScale(b *testing.B) {
	ctx := context.Background()
	dir := b.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "berth.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	now := time.Now().UTC()
	var ids berth.IDGen
	batch := &store.Batch{}
	for i := range 1000 {
		gpus := make([]berth.GPU, 8)
		for g := range gpus {
			gpus[g] = berth.GPU{Index: g, Model: "H100", Memory: 80 << 30}
		}
		batch.Workers = append(batch.Workers, &berth.Worker{ID: fmt.Sprintf("w-%04d", i), Host: fmt.Sprintf("gpu-%04d", i),
			GPUs: gpus, Slots: 16, State: berth.WorkerReady, RegisteredAt: now, LastHeartbeat: now})
	}
	for i := range 100_000 {
		j := &berth.Job{ID: ids.New(now.Add(-time.Duration(100_000-i) * time.Second)), JobSpec: berth.DefaultJobSpec(),
			State: berth.JobPending, CreatedAt: now.Add(-time.Duration(100_000-i) * time.Second)}
		j.Name, j.User, j.Command, j.Resources.GPUs = "train", fmt.Sprintf("user%d", i%50), berth.Argv{"python", "train.py"}, 1
		if i%2 == 0 {
			code := 0
			j.State, j.ExitCode, j.FinishedAt = berth.JobSucceeded, &code, j.CreatedAt.Add(time.Minute)
		}
		batch.Jobs = append(batch.Jobs, j)
	}
	if err := st.Write(ctx, batch); err != nil {
		b.Fatal(err)
	}
	sec := apitest.Security(b, st, auth.RoleAdmin)
	ctl := controller.New(controller.Config{Store: st, Secrets: sec.Secrets})
	if err := ctl.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer ctl.Stop(ctx)
	srv := api.New(ctl, st, sec, nil)
	srv.Web = web.New(web.Config{Ctl: ctl, Store: st, CheckToken: sec.Ingress.CheckToken})
	hs := httptest.NewServer(srv)
	defer hs.Close()
	for _, page := range []string{"/", "/jobs", "/jobs?state=pending", "/workers"} {
		b.Run(page, func(b *testing.B) {
			for b.Loop() {
				resp, err := http.Get(hs.URL + page)
				if err != nil {
					b.Fatal(err)
				}
				n, _ := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || n == 0 {
					b.Fatalf("GET %s: %d", page, resp.StatusCode)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/view")
		})
	}
}
