package agent

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/berth-dev/berth/internal/fakeclock"
)

func noneBound(int) bool { return false }

func newTestPorts(t interface {
	Helper()
	Fatalf(string, ...any)
}, cfg PortConfig) *PortAllocator {
	t.Helper()
	a, err := NewPortAllocator(cfg)
	if err != nil {
		t.Fatalf("NewPortAllocator: %v", err)
	}
	return a
}

func TestPortAllocatorExhausted(t *testing.T) {
	t.Parallel()
	a := newTestPorts(t, PortConfig{Lo: 20000, Hi: 20001, Bound: noneBound})
	for _, owner := range []string{"a", "b"} {
		if _, err := a.Allocate(owner); err != nil {
			t.Fatalf("Allocate(%s): %v", owner, err)
		}
	}
	_, err := a.Allocate("c")
	if !errors.Is(err, ErrNoFreePort) || err.Error() != "no free port in 20000–20001: 2 held" {
		t.Fatalf("Allocate on a full range: %v, want ErrNoFreePort \"no free port in 20000–20001: 2 held\"", err)
	}
	if _, err := a.Allocate(""); err == nil {
		t.Fatal("Allocate with no owner succeeded")
	}
}

func TestPortAllocatorDoesNotReuseAtOnce(t *testing.T) {
	t.Parallel()
	a := newTestPorts(t, PortConfig{Lo: 20000, Hi: 20002, Bound: noneBound})
	p1, _ := a.Allocate("a")
	if freed, err := a.Release("a"); err != nil || !slices.Equal(freed, []int{p1}) {
		t.Fatalf("Release(a) = %v, %v; want [%d]", freed, err, p1)
	}
	p2, _ := a.Allocate("b")
	p3, _ := a.Allocate("c")
	p4, _ := a.Allocate("d")
	if p2 == p1 || p3 == p1 || p4 != p1 {
		t.Fatalf("after releasing %d got %d, %d, %d; want it handed out last", p1, p2, p3, p4)
	}
}

func TestPortAllocatorSkipsBoundPorts(t *testing.T) {
	t.Parallel()
	l, port := listenBelowEphemeral(t)
	a := newTestPorts(t, PortConfig{Lo: port, Hi: port})
	_, err := a.Allocate("a")
	want := fmt.Sprintf("no free port in %d–%d: 0 held, 1 bound by other processes", port, port)
	if !errors.Is(err, ErrNoFreePort) || err.Error() != want {
		t.Fatalf("Allocate of a listened-on port: %v, want %q", err, want)
	}
	_ = l.Close()
	if got, err := a.Allocate("a"); err != nil || got != port {
		t.Fatalf("Allocate after the listener closed = %d, %v; want %d", got, err, port)
	}
}

// listenBelowEphemeral listens on a free loopback port under the kernel's
// ephemeral range: once it is closed, no other test's connection or ":0"
// listener can be given that port before the test binds it again, as one
// could be given a port the kernel chose.
func listenBelowEphemeral(t *testing.T) (net.Listener, int) {
	t.Helper()
	const from = 10000
	lo := 32768 // Linux's default start of the range
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		fmt.Sscan(string(b), &lo)
	}
	n := max(lo-from, 1)
	start := rand.IntN(n)
	for i := range n {
		port := from + (start+i)%n
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			return l, port
		}
	}
	t.Fatalf("no free port in %d–%d", from, from+n-1)
	return nil, 0
}

func TestPortAllocatorReclaim(t *testing.T) {
	t.Parallel()
	clock := fakeclock.New(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	a := newTestPorts(t, PortConfig{Lo: 20000, Hi: 20009, Bound: noneBound, Now: clock.Now})
	pa, _ := a.Allocate("a")
	pb, _ := a.Allocate("b")
	clock.Advance(6 * time.Minute)
	a.Touch("a")
	clock.Advance(5 * time.Minute)
	freed, err := a.Reclaim(clock.Now())
	if err != nil || len(freed) != 1 || freed[0].Port != pb || freed[0].Owner != "b" {
		t.Fatalf("Reclaim = %+v, %v; want b's port %d only", freed, err, pb)
	}
	if got := a.Ports("a"); !slices.Equal(got, []int{pa}) {
		t.Fatalf("Ports(a) = %v, want [%d]", got, pa)
	}
	clock.Advance(6 * time.Minute)
	if freed, _ := a.Reclaim(clock.Now()); len(freed) != 1 || freed[0].Owner != "a" {
		t.Fatalf("Reclaim 11 min after a's touch = %+v, want a's port", freed)
	}
}

func TestPortAllocatorRecover(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ports.json")
	cfg := PortConfig{Lo: 20000, Hi: 20002, Path: path, Bound: noneBound}
	a := newTestPorts(t, cfg)
	running, _ := a.Allocate("running")
	gone, _ := a.Allocate("gone")

	// The agent restarts: a new allocator on the same file.
	b := newTestPorts(t, cfg)
	if got := b.Held(); len(got) != 2 {
		t.Fatalf("restarted allocator holds %+v, want 2 leases", got)
	}
	freed, err := b.Recover([]string{"running"})
	if err != nil || len(freed) != 1 || freed[0].Port != gone || freed[0].Owner != "gone" {
		t.Fatalf("Recover = %+v, %v; want gone's port %d freed", freed, err, gone)
	}
	if got := b.Ports("running"); !slices.Equal(got, []int{running}) {
		t.Fatalf("Ports(running) = %v, want [%d]", got, running)
	}
	// Every other port can be handed out, the running one never.
	for i := range 2 {
		p, err := b.Allocate(fmt.Sprintf("new%d", i))
		if err != nil || p == running {
			t.Fatalf("Allocate after Recover = %d, %v; must not be %d", p, err, running)
		}
	}
	if _, err := b.Allocate("more"); !errors.Is(err, ErrNoFreePort) {
		t.Fatalf("Allocate on a full range after Recover: %v", err)
	}
	// And the recovery itself was persisted.
	c := newTestPorts(t, cfg)
	if got := c.Ports("gone"); got != nil {
		t.Fatalf("a third allocator still holds gone's ports %v", got)
	}
	if got := c.Ports("running"); !slices.Equal(got, []int{running}) {
		t.Fatalf("a third allocator: Ports(running) = %v, want [%d]", got, running)
	}
}

func TestPortAllocatorRejects(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name string
		cfg  PortConfig
		want string
	}{
		{"inverted range", PortConfig{Lo: 9000, Hi: 8000}, "range 9000–8000"},
		{"range too high", PortConfig{Lo: 65000, Hi: 70000}, "within 1–65535"},
		{"negative ttl", PortConfig{TTL: -time.Second}, "negative"},
		{"bad json", PortConfig{Path: write("bad.json", "{")}, "bad.json"},
		{"twice", PortConfig{Path: write("twice.json", `{"leases":[{"port":8000,"owner":"a"},{"port":8000,"owner":"b"}]}`)}, "port 8000 is listed twice"},
		{"no owner", PortConfig{Path: write("owner.json", `{"leases":[{"port":8000}]}`)}, "no owner"},
	} {
		if _, err := NewPortAllocator(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: NewPortAllocator error %v, want one containing %q", tc.name, err, tc.want)
		}
	}

	// A state file that cannot be written: Allocate fails and holds nothing.
	a := newTestPorts(t, PortConfig{Lo: 20000, Hi: 20001, Bound: noneBound, Path: filepath.Join(dir, "missing", "ports.json")})
	if _, err := a.Allocate("a"); err == nil {
		t.Fatal("Allocate with an unwritable state file succeeded")
	}
	if got := a.Held(); len(got) != 0 {
		t.Fatalf("after a failed Allocate the allocator holds %+v", got)
	}
}

// TestPortAllocatorConcurrent has many goroutines allocate and release at
// once, wanting more ports than the range has, and checks that no port is
// ever held by two of them.
func TestPortAllocatorConcurrent(t *testing.T) {
	t.Parallel()
	a := newTestPorts(t, PortConfig{Lo: 20000, Hi: 20009, Bound: noneBound, Path: filepath.Join(t.TempDir(), "ports.json")})
	var claimed sync.Map // port → owner
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				owner := fmt.Sprintf("g%d-%d", g, i)
				var mine []int
				for range 2 {
					p, err := a.Allocate(owner)
					if errors.Is(err, ErrNoFreePort) {
						break // the others hold the range: a full range is no failure
					}
					if err != nil {
						errs <- err
						return
					}
					if prev, loaded := claimed.LoadOrStore(p, owner); loaded {
						errs <- fmt.Errorf("port %d handed to %s while %s holds it", p, owner, prev)
						return
					}
					mine = append(mine, p)
				}
				for _, p := range mine {
					claimed.Delete(p)
				}
				if _, err := a.Release(owner); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := a.Held(); len(got) != 0 {
		t.Fatalf("after every release the allocator holds %+v", got)
	}
}

// TestPortAllocatorProperty checks the allocator against a model through
// random allocations, releases, touches, reclaims, restarts with recovery
// and ports bound by other processes.
func TestPortAllocatorProperty(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var run int
	rapid.Check(t, func(rt *rapid.T) {
		run++
		const lo, hi = 20000, 20005
		const ttl = 10 * time.Minute
		clock := fakeclock.New(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
		var boundMu sync.Mutex
		bound := map[int]bool{}
		cfg := PortConfig{
			Lo: lo, Hi: hi, TTL: ttl, Now: clock.Now,
			Path: filepath.Join(dir, fmt.Sprintf("ports%d.json", run)),
			Bound: func(p int) bool {
				boundMu.Lock()
				defer boundMu.Unlock()
				return bound[p]
			},
		}
		a := newTestPorts(rt, cfg)
		type lease struct {
			owner     string
			confirmed time.Time
		}
		model := map[int]lease{}
		owners := rapid.SampledFrom([]string{"a", "b", "c", "d"})

		rt.Repeat(map[string]func(*rapid.T){
			"allocate": func(rt *rapid.T) {
				owner := owners.Draw(rt, "owner")
				p, err := a.Allocate(owner)
				free := 0
				for q := lo; q <= hi; q++ {
					if _, held := model[q]; !held && !cfg.Bound(q) {
						free++
					}
				}
				if free == 0 {
					if !errors.Is(err, ErrNoFreePort) {
						rt.Fatalf("Allocate with no free port: %d, %v", p, err)
					}
					return
				}
				if err != nil {
					rt.Fatalf("Allocate with %d free: %v", free, err)
				}
				if prev, held := model[p]; held {
					rt.Fatalf("port %d handed to %s while %s holds it", p, owner, prev.owner)
				}
				if p < lo || p > hi || cfg.Bound(p) {
					rt.Fatalf("Allocate handed out %d: outside the range or bound", p)
				}
				model[p] = lease{owner, clock.Now()}
			},
			"release": func(rt *rapid.T) {
				owner := owners.Draw(rt, "owner")
				freed, err := a.Release(owner)
				if err != nil {
					rt.Fatal(err)
				}
				var want []int
				for p, l := range model {
					if l.owner == owner {
						want = append(want, p)
						delete(model, p)
					}
				}
				slices.Sort(want)
				if !slices.Equal(freed, want) {
					rt.Fatalf("Release(%s) = %v, want %v", owner, freed, want)
				}
			},
			"touch": func(rt *rapid.T) {
				owner := owners.Draw(rt, "owner")
				a.Touch(owner)
				for p, l := range model {
					if l.owner == owner {
						model[p] = lease{owner, clock.Now()}
					}
				}
			},
			"advance": func(rt *rapid.T) {
				clock.Advance(time.Duration(rapid.IntRange(1, 8).Draw(rt, "minutes")) * time.Minute)
			},
			"reclaim": func(rt *rapid.T) {
				freed, err := a.Reclaim(clock.Now())
				if err != nil {
					rt.Fatal(err)
				}
				var want []int
				for p, l := range model {
					if clock.Now().Sub(l.confirmed) > ttl {
						want = append(want, p)
						delete(model, p)
					}
				}
				slices.Sort(want)
				if got := leasePorts(freed); !slices.Equal(got, want) {
					rt.Fatalf("Reclaim = %v, want %v", got, want)
				}
			},
			"bind": func(rt *rapid.T) {
				p := rapid.IntRange(lo, hi).Draw(rt, "port")
				boundMu.Lock()
				bound[p] = !bound[p]
				boundMu.Unlock()
			},
			"restart": func(rt *rapid.T) {
				running := rapid.SliceOfDistinct(owners, rapid.ID[string]).Draw(rt, "running")
				a = newTestPorts(rt, cfg)
				if _, err := a.Recover(running); err != nil {
					rt.Fatal(err)
				}
				for p, l := range model {
					if slices.Contains(running, l.owner) {
						model[p] = lease{l.owner, clock.Now()}
					} else {
						delete(model, p)
					}
				}
			},
			"": func(rt *rapid.T) {
				held := a.Held()
				if len(held) != len(model) {
					rt.Fatalf("allocator holds %+v, model %v", held, model)
				}
				for _, l := range held {
					if m, ok := model[l.Port]; !ok || m.owner != l.Owner || !m.confirmed.Equal(l.Confirmed) {
						rt.Fatalf("allocator holds %+v, model has %+v", l, m)
					}
				}
			},
		})
	})
}
