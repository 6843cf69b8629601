package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/berth-dev/berth"
)

// acceptDialogs answers every confirm() the page shows with OK, as a
// person clicking through would.
func acceptDialogs(ctx context.Context) {
	chromedp.ListenTarget(ctx, func(ev any) {
		if _, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			go func() { _ = chromedp.Run(ctx, page.HandleJavaScriptDialog(true)) }()
		}
	})
}

// poll waits, in the page, until the JavaScript expression is true.
func poll(expr string) chromedp.Action {
	return chromedp.Poll(expr, nil, chromedp.WithPollingTimeout(25*time.Second))
}

// TestDashboardInABrowser drives the dashboard of a real server with two
// real agents in headless Chromium: the overview's capacity matches the
// API, a job's page shows its output as it is written, turning a worker
// off in the UI parks it, and the swap lock banner appears and its force
// release works. It saves screenshots of the main pages.
func TestDashboardInABrowser(t *testing.T) {
	t.Parallel()
	cl := newCluster(t)
	cl.addAgent("gpu-a")
	cl.addAgent("gpu-b")
	dir := t.TempDir()
	req := shellJob(`echo line-1; while [ ! -e ` + dir + `/stop ]; do sleep 0.05; done; echo line-2`)
	req.Name, req.Resources.GPUs = "train", 2 // every GPU of its worker: busy
	job := cl.submit(req)[0]
	running := cl.awaitState(job.ID, 30*time.Second, berth.JobRunning)
	busyHost := running.AttemptList[0].Host
	idleHost := map[string]string{"gpu-a": "gpu-b", "gpu-b": "gpu-a"}[busyHost]
	for i := 0; i < 3; i++ { // some finished jobs, for the lists
		d := cl.submit(shellJob(fmt.Sprintf("echo done %d", i)))[0]
		cl.awaitSuccess(d.ID, "a short job")
	}

	ctx := browser(t)
	acceptDialogs(ctx)

	// Overview: the totals are what the API says (2 workers, 4 GPUs, 2
	// busy), and the cards agree: one worker busy (its GPUs all held), one
	// ready, together the workers taking work.
	workers, err := cl.c.Workers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	gpus := 0
	for _, w := range workers {
		gpus += len(w.GPUs)
	}
	want := fmt.Sprintf("%d %d 2 %d", len(workers), gpus, gpus-2)
	var totals string
	run(t, ctx, "overview", chromedp.Navigate(cl.url+"/"), chromedp.WaitVisible("#capacity"),
		poll(`(() => { const c = document.querySelectorAll('#capacity tfoot td.num'); return c.length >= 4 && `+
			`[0,1,2,3].map(i => c[i].textContent.trim()).join(' ') === '`+want+`' })()`),
		chromedp.Evaluate(`[0,1,2,3].map(i => document.querySelectorAll('#capacity tfoot td.num')[i].textContent.trim()).join(' ')`, &totals))
	if totals != want {
		t.Fatalf("overview totals (workers, GPUs, busy, free) = %q, want %q (the API's)", totals, want)
	}
	var cards string
	run(t, ctx, "worker cards", chromedp.Evaluate(`[...document.querySelectorAll('#worker-states div')].`+
		`map(d => d.querySelector('dt').textContent.trim() + '=' + d.querySelector('dd').textContent.trim()).join(', ')`, &cards))
	if !strings.Contains(cards, "Workers ready=1, Workers busy=1,") {
		t.Fatalf("overview cards %q, want 1 ready and 1 busy: the table's 2 workers taking work", cards)
	}
	screenshot(t, ctx, "overview")

	run(t, ctx, "jobs", chromedp.Navigate(cl.url+"/jobs"), chromedp.WaitVisible(`#jobs tr[data-job="`+job.ID+`"]`))
	screenshot(t, ctx, "jobs")

	// The job's page follows its output: line-2 appears once written.
	run(t, ctx, "job page", chromedp.Navigate(cl.url+"/jobs/"+job.ID), poll(`document.querySelector('#log').textContent.includes('line-1')`))
	if err := os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, "live log line", poll(`document.querySelector('#log').textContent.includes('line-2')`))
	cl.awaitSuccess(job.ID, "the followed job")
	screenshot(t, ctx, "job")

	// Workers: turning the idle host off (drain) in the UI parks it.
	form := `form.control[data-host="` + idleHost + `"]`
	run(t, ctx, "turn a worker off", chromedp.Navigate(cl.url+"/workers"), chromedp.WaitVisible(form),
		chromedp.SetValue(form+` select[name=stop_policy]`, "drain"),
		chromedp.Click(form+` button[value=off]`))
	cl.awaitWorker(idleHost, berth.WorkerParked)
	run(t, ctx, "the page shows it parked", poll(`[...document.querySelectorAll('tr[data-worker]')].some(r => `+
		`r.textContent.includes('`+idleHost+`') && r.textContent.includes('parked'))`))
	screenshot(t, ctx, "workers")

	for _, pg := range []string{"services", "events"} {
		run(t, ctx, pg, chromedp.Navigate(cl.url+"/"+pg), chromedp.WaitVisible("#main", chromedp.ByQuery))
		screenshot(t, ctx, pg)
	}

	// The swap lock banner, and its force release.
	if _, err := cl.c.AcquireSwapLock(context.Background(), berth.SwapLockRequest{Holder: "nightly-eval", Note: "swapping to the big model"}); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, "lock banner", chromedp.Navigate(cl.url+"/"), chromedp.WaitVisible("#lock-banner"))
	var banner string
	run(t, ctx, "banner text", chromedp.Text("#lock-banner", &banner))
	if !strings.Contains(banner, "nightly-eval") {
		t.Fatalf("lock banner %q does not name the holder", banner)
	}
	screenshot(t, ctx, "lock")
	run(t, ctx, "force release", chromedp.Click(`button[data-action=force-release]`), poll(`!document.querySelector('#lock-banner')`))
	if st, err := cl.c.SwapLock(context.Background()); err != nil || st.Held {
		t.Fatalf("after force release the lock is %+v, %v; want not held", st, err)
	}

}

// TestDashboardSignIn checks the sign-in page of a server that trusts no
// one without a token: a page sends a browser there, a wrong token is
// refused, the admin token signs in.
func TestDashboardSignIn(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, "--trust-loopback", "none")
	admin, err := os.ReadFile(filepath.Join(cl.dir, "server", "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := browser(t)
	var url string
	run(t, ctx, "sign-in redirect", chromedp.Navigate(cl.url+"/workers"), chromedp.WaitVisible("#token"), chromedp.Location(&url))
	if !strings.Contains(url, "/login?next=%2Fworkers") {
		t.Fatalf("an unauthenticated page led to %s, want the sign-in page", url)
	}
	run(t, ctx, "wrong token", chromedp.SendKeys("#token", "not-a-token"), chromedp.Submit("#token"), chromedp.WaitVisible("#login-error"))
	screenshot(t, ctx, "login")
	var who string
	run(t, ctx, "sign in", chromedp.SetValue("#token", strings.TrimSpace(string(admin))), chromedp.Submit("#token"),
		chromedp.WaitVisible(".who"), chromedp.Text(".who", &who), chromedp.Location(&url))
	if !strings.Contains(who, "admin") || !strings.HasSuffix(url, "/workers") {
		t.Fatalf("after signing in: %q at %s, want the admin on /workers", who, url)
	}
}
