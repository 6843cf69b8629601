package kube

import (
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/internal/kubetest"
)

// BenchmarkPodCreate measures, against a real API server, how fast jobs
// submitted to a Kubernetes backend become pods. burst: 8 clients submit
// 1,000 one-job submissions between them as fast as they can; paced: one
// client submits 200, each once the last one's pod is seen. A job's
// latency runs from its Submit call to the test's watch seeing its pod;
// pods/s is the jobs over the time from the first Submit to the last pod
// seen. Reported: pods/s, p50-ms and p99-ms.
func BenchmarkPodCreate(b *testing.B) {
	srv := kubetest.Start(b)
	cs := clientset(b, srv)
	addNode(b, cs, "big", 8, "NVIDIA-H100-80GB-HBM3")
	node, err := cs.CoreV1().Nodes().Get(b.Context(), "big", metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	pods := resource.MustParse("100000") // no pod-count limit in the way
	node.Status.Allocatable[corev1.ResourcePods], node.Status.Capacity[corev1.ResourcePods] = pods, pods
	if _, err := cs.CoreV1().Nodes().UpdateStatus(b.Context(), node, metav1.UpdateOptions{}); err != nil {
		b.Fatal(err)
	}
	run := 0
	for _, m := range []struct {
		name          string
		jobs, clients int
		paced         bool
	}{{"burst", 1000, 8, false}, {"paced", 200, 1, true}} {
		b.Run(m.name, func(b *testing.B) {
			for range b.N {
				run++
				benchPods(b, srv, cs, fmt.Sprintf("bench%d", run), m.jobs, m.clients, m.paced)
			}
		})
	}
}

// benchPods runs one measure of BenchmarkPodCreate in namespace ns.
func benchPods(b *testing.B, srv *kubetest.Server, cs kubernetes.Interface, ns string, jobs, clients int, paced bool) {
	seen := map[string]time.Time{}
	var mu sync.Mutex
	more := sync.NewCond(&mu)
	inf := informers.NewSharedInformerFactoryWithOptions(clientset(b, srv), 0, informers.WithNamespace(ns))
	_, _ = inf.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(o any) {
		now := time.Now()
		mu.Lock()
		seen[o.(*corev1.Pod).Labels[LabelJob]] = now
		mu.Unlock()
		more.Broadcast()
	}})
	stop := make(chan struct{})
	defer close(stop)
	inf.Start(stop)
	inf.WaitForCacheSync(stop)
	k := startController(b, srv, cs, filepath.Join(b.TempDir(), "b.db"), ns, nil).c
	b.ResetTimer()

	submitted := make(map[string]time.Time, jobs)
	var wg sync.WaitGroup
	first := time.Now()
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs / clients {
				spec := berth.DefaultJobSpec()
				spec.Command, spec.Backend, spec.Image = berth.Argv{"true"}, ns, "example.invalid/noop:1"
				spec.Resources = berth.Resources{}
				at := time.Now()
				got, err := k.Submit(b.Context(), &berth.SubmitRequest{JobSpec: spec})
				if err != nil {
					b.Errorf("client %d: %v", c, err)
					return
				}
				mu.Lock()
				submitted[got[0].ID] = at
				for paced && seen[got[0].ID].IsZero() {
					more.Wait()
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	deadline := time.AfterFunc(5*time.Minute, more.Broadcast)
	defer deadline.Stop()
	mu.Lock()
	defer mu.Unlock()
	for len(seen) < jobs {
		if time.Since(first) > 5*time.Minute {
			b.Fatalf("%d pods of %d", len(seen), jobs)
		}
		more.Wait()
	}
	var last time.Time
	lat := make([]time.Duration, 0, jobs)
	for id, at := range submitted {
		s := seen[id]
		lat = append(lat, s.Sub(at))
		if s.After(last) {
			last = s
		}
	}
	slices.Sort(lat)
	b.ReportMetric(float64(jobs)/last.Sub(first).Seconds(), "pods/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}
