// Package kube is the Kubernetes execution backend: it runs each attempt
// of the jobs placed on it as a pod on a cluster, offers the cluster's
// nodes to Berth's scheduler as workers, and reports the pods' starts,
// ends, pending reasons and logs into the controller (controller.Backend,
// controller.BackendHost). It is the only package besides cmd/berth that
// imports client-go.
package kube

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/controller"
)

// Options tune a backend beyond its spec; the zero value takes the
// defaults.
type Options struct {
	// Client is the cluster's client; nil: one from the spec's
	// kubeconfig and context.
	Client kubernetes.Interface
	// Deadlines bound each pending reason (DefaultDeadlines).
	Deadlines Deadlines
	// Creators is how many creates and deletes run at once (16).
	Creators int
	// Tick is how often pending pods are checked against their
	// deadlines (a second).
	Tick time.Duration
}

// Backend runs attempts as pods on one cluster. Create it with New.
type Backend struct {
	spec  berth.BackendSpec
	ns    string
	host  controller.BackendHost
	cs    kubernetes.Interface
	opts  Options
	log   *slog.Logger
	ctx   context.Context
	stop  context.CancelFunc
	done  sync.WaitGroup
	ops   opQueue
	kick  chan struct{} // capacity changed
	nodes listers.NodeLister
	pods  listers.PodLister
	inf   informers.SharedInformerFactory

	// podGroups says the cluster serves the coscheduling plugin's
	// PodGroup (PodGroupVersion), found at the first sync.
	podGroups atomic.Bool

	mu       sync.Mutex
	attempts map[string]*tracked // by attempt id: what was reported of each
	synced   bool
	lastSync time.Time
	message  string // why it is not ready
}

// tracked is what the backend knows and has reported of one attempt.
type tracked struct {
	started, ended, stopping bool
	launched                 bool      // by this process: its log is all new
	group                    string    // its gang's PodGroup, if any
	service                  string    // its gang's rendezvous Service, for rank 0
	pending                  string    // the reason last reported
	since                    time.Time // when it became pending for that reason
	logs                     chan struct{}
}

// New returns the backend spec describes, reporting through host: it
// reads the kubeconfig, starts the informers and returns; the backend
// reports its nodes and adopts its pods once they have synced.
func New(spec berth.BackendSpec, host controller.BackendHost) (controller.Backend, error) {
	return NewWith(spec, host, Options{})
}

// NewWith is New with opts.
func NewWith(spec berth.BackendSpec, host controller.BackendHost, opts Options) (*Backend, error) {
	if spec.Kubernetes == nil {
		return nil, berth.Invalidf("kubernetes", "is required for kind %s", berth.BackendKindKubernetes)
	}
	if opts.Deadlines == (Deadlines{}) {
		opts.Deadlines = DefaultDeadlines
	}
	opts.Creators = cmp.Or(opts.Creators, 16)
	opts.Tick = cmp.Or(opts.Tick, time.Second)
	cs := opts.Client
	if cs == nil {
		var err error
		if cs, err = client(spec.Kubernetes); err != nil {
			return nil, err
		}
	}
	ctx, stop := context.WithCancel(context.Background())
	b := &Backend{spec: spec, ns: cmp.Or(spec.Kubernetes.Namespace, berth.DefaultKubeNamespace), host: host, cs: cs, opts: opts,
		log: host.Logger(), ctx: ctx, stop: stop, kick: make(chan struct{}, 1), attempts: map[string]*tracked{}}
	b.ops.cond = sync.NewCond(&b.ops.mu)
	b.inf = informers.NewSharedInformerFactory(cs, 0)
	nodes, pods := b.inf.Core().V1().Nodes(), b.inf.Core().V1().Pods()
	b.nodes, b.pods = nodes.Lister(), pods.Lister()
	kick := func(any) { b.kickCapacity() }
	if _, err := nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: kick, DeleteFunc: kick,
		UpdateFunc: func(_, o any) { kick(o) }}); err != nil {
		stop()
		return nil, fmt.Errorf("kubernetes backend %s: %w", spec.Name, err)
	}
	if _, err := pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { b.podChanged(o) },
		UpdateFunc: func(_, o any) { b.podChanged(o) },
		DeleteFunc: b.podDeleted,
	}); err != nil {
		stop()
		return nil, fmt.Errorf("kubernetes backend %s: %w", spec.Name, err)
	}
	for _, inf := range []cache.SharedIndexInformer{nodes.Informer(), pods.Informer()} {
		_ = inf.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
			b.mu.Lock()
			b.message = err.Error()
			b.mu.Unlock()
		})
	}
	b.inf.Start(ctx.Done())
	for range opts.Creators {
		b.run(b.work)
	}
	b.run(b.sync)
	b.run(b.probe)
	return b, nil
}

// probe asks the API server for its version every tick until the
// informers have synced, so that a cluster never reached says why
// (unreachable, with the error) instead of syncing in silence.
func (b *Backend) probe() {
	rest := b.cs.Discovery().RESTClient()
	if rest == nil { // a fake clientset's
		return
	}
	for {
		b.mu.Lock()
		synced := b.synced
		b.mu.Unlock()
		if synced {
			return
		}
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		err := rest.Get().AbsPath("/version").Do(ctx).Error()
		cancel()
		if err != nil && b.ctx.Err() == nil {
			b.mu.Lock()
			if !b.synced {
				b.message = "cannot reach the API server: " + err.Error()
			}
			b.mu.Unlock()
		}
		select {
		case <-b.ctx.Done():
			return
		case <-time.After(b.opts.Tick):
		}
	}
}

// client builds the clientset of a kubeconfig and context.
func client(k *berth.KubernetesBackend) (kubernetes.Interface, error) {
	cfg, err := clientcmd.Load([]byte(k.Kubeconfig))
	if err != nil {
		return nil, berth.Invalidf("kubernetes.kubeconfig", "%v", err)
	}
	rc, err := clientcmd.NewDefaultClientConfig(*cfg, &clientcmd.ConfigOverrides{CurrentContext: k.Context}).ClientConfig()
	if err != nil {
		return nil, berth.Invalidf("kubernetes.context", "%v", err)
	}
	rc.QPS, rc.Burst = 500, 1000 // one create per attempt: the default 5/s would be the bottleneck
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, berth.Invalidf("kubernetes.kubeconfig", "%v", err)
	}
	return cs, nil
}

// run runs fn on a goroutine of the backend's, waited for by Close.
func (b *Backend) run(fn func()) {
	b.done.Add(1)
	go func() {
		defer b.done.Done()
		fn()
	}()
}

// Remove deletes every pod, Secret and rendezvous Service of the
// backend's (by its label), with the grace period, for a backend being
// removed: their attempts were declared lost and are retried elsewhere.
func (b *Backend) Remove(ctx context.Context) error {
	core := b.cs.CoreV1()
	sel := metav1.ListOptions{LabelSelector: LabelBackend + "=" + b.spec.Name}
	grace := int64(b.host.Grace().Seconds())
	if err := core.Pods(b.ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &grace}, sel); err != nil {
		return fmt.Errorf("kubernetes backend %s: delete pods: %w", b.spec.Name, err)
	}
	if err := core.Secrets(b.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil {
		return fmt.Errorf("kubernetes backend %s: delete secrets: %w", b.spec.Name, err)
	}
	services, err := core.Services(b.ns).List(ctx, sel)
	if err != nil {
		return fmt.Errorf("kubernetes backend %s: list services: %w", b.spec.Name, err)
	}
	for _, s := range services.Items {
		if err := core.Services(b.ns).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("kubernetes backend %s: delete service %s: %w", b.spec.Name, s.Name, err)
		}
	}
	return nil
}

// Close stops the informers and the creators; pods are left as they are.
func (b *Backend) Close() {
	b.stop()
	b.ops.close()
	b.inf.Shutdown()
	b.done.Wait()
}

// sync waits for the informers, makes the namespace, adopts the pods and
// reports the nodes, and then reports the nodes again whenever they or the
// pods on them change, and fails the attempts pending past a deadline.
func (b *Backend) sync() {
	for typ, ok := range b.inf.WaitForCacheSync(b.ctx.Done()) {
		if !ok {
			b.log.Warn("kubernetes backend: informer never synced", "type", typ.String())
			return
		}
	}
	_, err := b.cs.CoreV1().Namespaces().Create(b.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: b.ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) && !apierrors.IsForbidden(err) {
		b.log.Warn("kubernetes backend: cannot make namespace", "namespace", b.ns, "err", err)
	}
	b.podGroups.Store(servesPodGroups(b.cs))
	var running, finished []string
	own, _ := b.pods.Pods(b.ns).List(labels.SelectorFromSet(labels.Set{LabelBackend: b.spec.Name}))
	for _, p := range own {
		if id := p.Labels[LabelAttempt]; id != "" && terminal(p) {
			finished = append(finished, id)
		} else if id != "" {
			running = append(running, id)
		}
	}
	b.host.Reconcile(running, finished, func(kill []string) {
		for _, id := range kill {
			b.ops.push(op{del: true, name: PodName(id)})
		}
	})
	// The nodes are reported after the reconcile is posted, so that no job
	// is placed here before the loop has seen which pods exist: an attempt
	// placed after the listing would otherwise be launched twice.
	b.reportCapacity()
	b.mu.Lock()
	b.synced = true
	b.mu.Unlock()
	tick := time.NewTicker(b.opts.Tick)
	defer tick.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-b.kick:
			b.reportCapacity()
		case now := <-tick.C:
			b.expirePending(now)
		}
	}
}

func (b *Backend) kickCapacity() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// reportCapacity tells the controller the nodes as they are now.
func (b *Backend) reportCapacity() {
	nodes, _ := b.nodes.List(labels.Everything())
	pods, _ := b.pods.List(labels.Everything())
	b.host.SetWorkers(workers(&b.spec, nodes, pods, false))
	b.mu.Lock()
	b.lastSync, b.message = time.Now().UTC(), ""
	b.mu.Unlock()
}

// own returns p's attempt when it is one of this backend's pods.
func (b *Backend) own(p *corev1.Pod) string {
	if p.Namespace != b.ns || p.Labels[LabelBackend] != b.spec.Name {
		return ""
	}
	return p.Labels[LabelAttempt]
}

// podChanged reports what a pod of the backend's says of its attempt.
func (b *Backend) podChanged(o any) {
	p, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	if p.Labels[LabelBackend] != b.spec.Name {
		b.kickCapacity() // another tenant's pod: capacity
	}
	id := b.own(p)
	if id == "" {
		return
	}
	st := readPod(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.track(id)
	if t.ended {
		return
	}
	t.group = p.Labels[LabelPodGroup]
	if p.Labels[LabelRank] == "0" {
		t.service = p.Labels[LabelGang]
	}
	if st.started && !t.started {
		t.started = true
		b.host.Started(id)
		var since *metav1.Time // an adopted pod's log before now was stored by the server that launched it
		if !t.launched {
			since = &metav1.Time{Time: time.Now()}
		}
		b.run(func() { b.streamLogs(id, p.Name, since, t.logs) })
	}
	switch {
	case st.ended != nil:
		t.ended = true
		end := *st.ended
		b.run(func() { b.finish(id, p.Name, t, end) })
	case !st.started && st.pending != t.pending:
		t.pending, t.since = st.pending, time.Now()
		reason := ""
		if st.pending != "" {
			reason = fmt.Sprintf("pod %s pending: %s", p.Name, st.pending)
			if st.message != "" {
				reason += ": " + st.message
			}
		}
		b.host.Pending(id, reason)
	}
}

// podDeleted ends the attempt of a pod deleted before it ended: cancelled
// when the backend was stopping it, failed otherwise.
func (b *Backend) podDeleted(o any) {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	p, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	b.kickCapacity()
	id := b.own(p)
	if id == "" {
		return
	}
	b.mu.Lock()
	t := b.track(id)
	if t.ended {
		delete(b.attempts, id)
		b.mu.Unlock()
		return
	}
	t.ended = true
	end := controller.AttemptEnd{State: berth.AttemptFailed, Reason: "pod " + p.Name + " deleted"}
	if t.stopping {
		end.State = berth.AttemptCancelled
	}
	b.mu.Unlock()
	b.run(func() { b.finish(id, "", t, end) })
}

// track returns the record of attempt id, made on first sight. b.mu held.
func (b *Backend) track(id string) *tracked {
	t := b.attempts[id]
	if t == nil {
		t = &tracked{logs: make(chan struct{})}
		b.attempts[id] = t
	}
	return t
}

// finish reports an attempt's end once its log stream has drained (or a
// few seconds have passed), and then deletes its pod (name; "" when it is
// gone) and Secret.
func (b *Backend) finish(id, name string, t *tracked, end controller.AttemptEnd) {
	b.mu.Lock()
	started := t.started
	b.mu.Unlock()
	if started {
		select {
		case <-t.logs:
		case <-time.After(5 * time.Second):
		case <-b.ctx.Done():
			return
		}
	}
	b.host.Ended(id, end)
	b.mu.Lock()
	group, service := t.group, t.service
	b.mu.Unlock()
	if name != "" {
		b.ops.push(op{del: true, name: name, group: group, serviceName: service})
	} else {
		b.ops.push(op{del: true, name: PodName(id), secretOnly: true, group: group, serviceName: service})
	}
}

// expirePending fails the attempts whose pods stayed pending for a reason
// past its deadline, and deletes their pods.
func (b *Backend) expirePending(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, t := range b.attempts {
		if t.started || t.ended || t.pending == "" {
			continue
		}
		d, class := b.opts.Deadlines.giveUp(t.pending)
		if d <= 0 || now.Sub(t.since) < d {
			continue
		}
		t.ended = true
		end := controller.AttemptEnd{State: berth.AttemptFailed, Class: class,
			Reason: fmt.Sprintf("pod %s pending %s for %s: given up", PodName(id), t.pending, d)}
		b.run(func() { b.finish(id, PodName(id), t, end) })
	}
}

// streamLogs follows the job container's log (from since, when not nil)
// into the controller's log store until the container ends, then closes
// done.
func (b *Backend) streamLogs(id, name string, since *metav1.Time, done chan struct{}) {
	defer close(done)
	opts := &corev1.PodLogOptions{Container: container, Follow: true, SinceTime: since}
	rc, err := b.cs.CoreV1().Pods(b.ns).GetLogs(name, opts).Stream(b.ctx)
	if err != nil {
		b.log.Debug("kubernetes backend: no log stream", "pod", name, "err", err)
		return
	}
	defer rc.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := rc.Read(buf)
		if n > 0 {
			b.host.Log(id, "", slices.Clone(buf[:n]))
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && b.ctx.Err() == nil {
				b.log.Debug("kubernetes backend: log stream ended", "pod", name, "err", err)
			}
			return
		}
	}
}

// Launch queues the create of attempt a's pod (and Secret), once the
// attempt is durable. It fails the
// attempt at once when the job has no image and the backend no default,
// or is a gang left to kube-scheduler.
func (b *Backend) Launch(j *berth.Job, a *berth.Attempt, env map[string]string) {
	ps := podSpec{backend: b.spec.Name, namespace: b.ns, image: cmp.Or(j.Image, b.spec.Kubernetes.ImageDefault),
		secrets: b.host.Secrets(j), grace: int64(b.host.Grace().Seconds())}
	kubePlaced := b.spec.Kubernetes.Placement == berth.PlacementKube
	if !kubePlaced {
		ps.node = a.Host
	}
	if j.Resources.GPUType != "" {
		ps.products = b.products(j.Resources.GPUType)
	}
	var why string
	switch {
	case ps.image == "":
		why = fmt.Sprintf("no image: the job names none and backend %s has no image default", b.spec.Name)
	case kubePlaced && j.Nodes > 1 && !b.podGroups.Load():
		why = b.noGang()
	}
	var service *corev1.Service
	if j.Nodes > 1 {
		service, env = gangService(j, a, b.ns, b.spec.Name, env)
	}
	pod, secret, err := translate(j, a, env, ps)
	if err != nil {
		why = err.Error()
	}
	var group string
	if why == "" && kubePlaced && j.Nodes > 1 {
		group = PodGroupName(j)
		pod.Labels[LabelPodGroup] = group
	}
	if why != "" {
		go b.host.Ended(a.ID, controller.AttemptEnd{State: berth.AttemptFailed, Class: berth.FailureCannotStart, Reason: why})
		return
	}
	b.mu.Lock()
	t := b.track(a.ID)
	t.launched, t.group = true, group
	if service != nil {
		t.service = service.Name
	}
	b.mu.Unlock()
	o := op{pod: pod, secret: secret, service: service, attempt: a.ID, group: group, members: j.Nodes}
	b.host.Durable(func() { b.ops.push(o) })
}

// CheckSubmit refuses a job that names the backend and could never run
// there: a gang where kube-scheduler places, unless the cluster serves
// PodGroups. (A job with no image where the backend has no default the
// controller refuses itself.)
func (b *Backend) CheckSubmit(spec *berth.JobSpec) error {
	if b.spec.Kubernetes.Placement == berth.PlacementKube && spec.Nodes > 1 && !b.podGroups.Load() {
		return berth.Invalidf("nodes", "%s", b.noGang())
	}
	return nil
}

// noGang says why the backend refuses gangs.
func (b *Backend) noGang() string {
	return fmt.Sprintf("backend %s leaves placement to kube-scheduler, which cannot place a gang all-or-nothing: "+
		"the cluster serves no PodGroup (%s, the coscheduling plugin's)", b.spec.Name, PodGroupVersion)
}

// products returns the GPU products of the known nodes that are of
// gpuType.
func (b *Backend) products(gpuType string) []string {
	nodes, _ := b.nodes.List(labels.Everything())
	var out []string
	for _, n := range nodes {
		p := n.Labels[LabelGPUProduct]
		if p != "" && !slices.Contains(out, p) && (berth.GPU{Model: p}).HasType(gpuType) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// Stop queues the delete of attempt a's pod with the grace period, once
// the stop is durable; its
// end is reported once the pod is gone.
func (b *Backend) Stop(a *berth.Attempt, _, _ string) {
	b.mu.Lock()
	b.track(a.ID).stopping = true
	b.mu.Unlock()
	o := op{del: true, name: PodName(a.ID), grace: int64(b.host.Grace().Seconds()), graceSet: true}
	b.host.Durable(func() { b.ops.push(o) })
}

// Status says how the backend stands: syncing until its informers have
// synced, unreachable while a watch fails, else ready; its nodes, GPUs
// and pods from the informers' view.
func (b *Backend) Status() berth.BackendStatus {
	s := berth.BackendStatus{Name: b.spec.Name, Kind: berth.BackendKindKubernetes, State: berth.BackendSyncing}
	b.mu.Lock()
	synced := b.synced
	s.LastSync, s.Message = b.lastSync, b.message
	b.mu.Unlock()
	switch {
	case s.Message != "":
		s.State = berth.BackendUnreachable
	case synced:
		s.State = berth.BackendReady
	}
	if !synced {
		return s
	}
	nodes, _ := b.nodes.List(labels.Everything())
	pods, _ := b.pods.List(labels.Everything())
	for _, w := range workers(&b.spec, nodes, pods, true) {
		s.Nodes++
		s.GPUsFree += len(w.GPUs)
	}
	for _, n := range nodes {
		if selects(b.spec.Kubernetes.NodeSelector, n.Labels) {
			s.GPUsTotal += int(n.Status.Allocatable.Name(ResourceGPU, "").Value())
		}
	}
	for _, p := range pods {
		if b.own(p) != "" && !terminal(p) {
			s.Pods++
		}
	}
	return s
}

// op is one create or delete for the creators.
type op struct {
	group      string // the gang's PodGroup: created before the pod, deleted with it
	members    int    // the gang's size, the PodGroup's minMember
	pod        *corev1.Pod
	secret     *corev1.Secret
	attempt    string
	del        bool
	name       string
	grace      int64
	graceSet   bool
	secretOnly bool
	// service is a gang's rendezvous Service, made before rank 0's pod;
	// serviceName the one deleted with it.
	service     *corev1.Service
	serviceName string
}

// opQueue is an unbounded queue of ops: Launch and Stop, on the
// controller's loop, never wait on the API server.
type opQueue struct {
	mu     sync.Mutex
	cond   *sync.Cond
	ops    []op
	closed bool
}

func (q *opQueue) push(o op) {
	q.mu.Lock()
	q.ops = append(q.ops, o)
	q.mu.Unlock()
	q.cond.Signal()
}

func (q *opQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.cond.Broadcast()
}

// pop returns the next op, false once the queue is closed.
func (q *opQueue) pop() (op, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.ops) == 0 && !q.closed {
		q.cond.Wait()
	}
	if q.closed {
		return op{}, false
	}
	o := q.ops[0]
	q.ops = q.ops[1:]
	return o, true
}

// work carries out ops until the backend closes.
func (b *Backend) work() {
	for {
		o, ok := b.ops.pop()
		if !ok {
			return
		}
		if o.del {
			b.delete(o)
		} else {
			b.create(o)
		}
	}
}

// create makes an attempt's Secret and pod; either existing already
// (another controller's create, or this one's retried) is success. A
// create the API server refuses fails the attempt.
func (b *Backend) create(o op) {
	pods, secrets := b.cs.CoreV1().Pods(b.ns), b.cs.CoreV1().Secrets(b.ns)
	if o.group != "" {
		if err := b.createPodGroup(o.group, o.members); err != nil {
			b.createFailed(o, err)
			return
		}
	}
	if o.service != nil {
		if _, err := b.cs.CoreV1().Services(b.ns).Create(b.ctx, o.service, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			b.createFailed(o, err)
			return
		}
	}
	if o.secret != nil {
		if _, err := secrets.Create(b.ctx, o.secret, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			b.createFailed(o, err)
			return
		}
	}
	created, err := pods.Create(b.ctx, o.pod, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		return
	case err != nil:
		b.createFailed(o, err)
		return
	}
	if o.secret != nil { // deleted with its pod by the garbage collector
		o.secret.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: created.Name, UID: created.UID}}
		if _, err := secrets.Update(b.ctx, o.secret, metav1.UpdateOptions{}); err != nil {
			b.log.Debug("kubernetes backend: secret owner not set", "secret", o.secret.Name, "err", err)
		}
	}
}

// createFailed fails the attempt whose create the API server refused.
func (b *Backend) createFailed(o op, err error) {
	if b.ctx.Err() != nil {
		return
	}
	b.mu.Lock()
	t := b.track(o.attempt)
	ended := t.ended
	t.ended = true
	b.mu.Unlock()
	if !ended {
		b.host.Ended(o.attempt, controller.AttemptEnd{State: berth.AttemptFailed, Class: berth.FailureInfraFatal,
			Reason: fmt.Sprintf("create pod %s: %v", o.pod.Name, err)})
	}
}

// delete deletes a pod (with its grace, when set) and its Secret; either
// gone already is success.
func (b *Backend) delete(o op) {
	if !o.secretOnly {
		opts := metav1.DeleteOptions{}
		if o.graceSet {
			opts.GracePeriodSeconds = &o.grace
		}
		if err := b.cs.CoreV1().Pods(b.ns).Delete(b.ctx, o.name, opts); err != nil && !apierrors.IsNotFound(err) && b.ctx.Err() == nil {
			b.log.Warn("kubernetes backend: delete pod", "pod", o.name, "err", err)
		}
	}
	if err := b.cs.CoreV1().Secrets(b.ns).Delete(b.ctx, o.name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) && b.ctx.Err() == nil {
		b.log.Warn("kubernetes backend: delete secret", "secret", o.name, "err", err)
	}
	if o.serviceName != "" {
		if err := b.cs.CoreV1().Services(b.ns).Delete(b.ctx, o.serviceName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) && b.ctx.Err() == nil {
			b.log.Warn("kubernetes backend: delete service", "service", o.serviceName, "err", err)
		}
	}
	if o.group != "" {
		err := b.cs.Discovery().RESTClient().Delete().AbsPath("/apis", PodGroupVersion, "namespaces", b.ns, "podgroups", o.group).Do(b.ctx).Error()
		if err != nil && !apierrors.IsNotFound(err) && b.ctx.Err() == nil {
			b.log.Warn("kubernetes backend: delete pod group", "group", o.group, "err", err)
		}
	}
}

// Gangs on a cluster that places pods itself go in a PodGroup of the
// coscheduling plugin (kubernetes-sigs/scheduler-plugins), which holds
// the members until all of them fit.
const (
	// PodGroupVersion is the group and version of the PodGroup resource.
	PodGroupVersion = "scheduling.x-k8s.io/v1alpha1"
	// LabelPodGroup labels a gang member's pod with its PodGroup.
	LabelPodGroup = "scheduling.x-k8s.io/pod-group"
)

// PodGroupName is the PodGroup of job j's current placement.
func PodGroupName(j *berth.Job) string {
	return "berth-" + strings.ToLower(j.ID) + "-" + strconv.Itoa(j.Attempts)
}

// servesPodGroups reports whether the cluster serves PodGroups.
func servesPodGroups(cs kubernetes.Interface) bool {
	rl, err := cs.Discovery().ServerResourcesForGroupVersion(PodGroupVersion)
	if err != nil {
		return false
	}
	return slices.ContainsFunc(rl.APIResources, func(r metav1.APIResource) bool { return r.Name == "podgroups" })
}

// createPodGroup makes the PodGroup name of members members; one that
// exists (another member's create) is success.
func (b *Backend) createPodGroup(name string, members int) error {
	body, err := json.Marshal(map[string]any{"apiVersion": PodGroupVersion, "kind": "PodGroup",
		"metadata": map[string]any{"name": name, "namespace": b.ns, "labels": map[string]string{LabelBackend: b.spec.Name}},
		"spec":     map[string]any{"minMember": members}})
	if err != nil {
		return fmt.Errorf("pod group %s: %w", name, err)
	}
	err = b.cs.Discovery().RESTClient().Post().AbsPath("/apis", PodGroupVersion, "namespaces", b.ns, "podgroups").
		SetHeader("Content-Type", "application/json").Body(body).Do(b.ctx).Error()
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("pod group %s: %w", name, err)
	}
	return nil
}
