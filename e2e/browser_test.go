package e2e

import (
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// updateScreenshots writes the dashboard screenshots the browser tests take
// to docs/screenshots, for the documentation, besides the test's artefacts.
var updateScreenshots = flag.Bool("update-screenshots", false, "write the dashboard's screenshots to docs/screenshots")

// chromium returns the path of a headless-capable Chromium: $CHROMIUM, else
// chromium or chromium-browser on PATH. Without one the test is skipped,
// or, under CI, fails (.ci/run installs Debian's chromium).
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no chromium on PATH: install Debian's chromium package (.ci/run does)")
	}
	t.Skip("no chromium on PATH: the dashboard's browser tests need it (apt-get install chromium)")
	return ""
}

// browser starts a headless Chromium for t and returns a context that
// drives one tab; it is closed when t ends.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.Flag("no-sandbox", true), // CI runs as root
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 900),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(alloc)
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
	})
	if err := chromedp.Run(ctx); err != nil { // starts the browser
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// run runs browser actions with a timeout, failing t with what.
func run(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Run(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// screenshot saves a full-page PNG of the current page as name.png among
// the test's artefacts ($BERTH_ARTIFACTS, else the test's temporary
// directory) and, with -update-screenshots, in docs/screenshots.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	var png []byte
	run(t, ctx, "screenshot "+name, chromedp.FullScreenshot(&png, 100))
	dirs := []string{t.TempDir()}
	if d := os.Getenv("BERTH_ARTIFACTS"); d != "" {
		dirs[0] = d
	}
	if *updateScreenshots {
		dirs = append(dirs, filepath.Join("..", "docs", "screenshots"))
	}
	for _, dir := range dirs {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
