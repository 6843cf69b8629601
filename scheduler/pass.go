package scheduler

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/berth-dev/berth"
)

// pass is the working state of one RunPass call.
type pass struct {
	q    *Queue
	cfg  *Config
	s    *Snapshot
	plan Plan

	workers    []*worker
	classes    map[string]*class
	classOrder []*class // by first worker
	eligible   map[*shape][]*class
	byHost     map[string][]*worker
	byModel    map[string][]*worker
	replicas   map[string]map[string]int // replica set → host → replicas there
	classFit   map[classShape]bool
	statics    map[*shape]Reason
	open       int // workers that can take work: on, with a free slot
	stamp      int // marks the workers chosen for the gang being placed

	failed    map[memoKey]Reason // shapes that found no worker this pass
	noPreempt map[*shape]bool
	blocked   map[string]*Task // head-of-line policy: the first blocked task of each queue
	sawRes    *reservation     // a reservation stopped the last find

	rules     map[ruleKey]*ruleUse
	templates bool // some rule has template scope
	listRules map[*list][3]*ruleUse
	quotaMsgs map[QuotaExceeded]string // messages by everything but job and user
	weights   map[string]float64
	usage     map[listKey]*amount
	capAll    amount
	capQueue  map[string]*amount

	reservations []*reservation
	budget       int
	stopping     map[*Running]bool
	victims      bool // some running attempt could be preempted

	free, after []int   // scoredFit's buffers: a worker's free milli-GPUs per GPU, before and after
	seen        []int   // choices' buffer: the uses of the GPUs chosen
	choice      [][]int // choices' result
	why         string  // how the last find chose, when the placement explains it (Assignment.Why)
}

type memoKey struct {
	shape    *shape
	backfill uint64 // which reservations the task may backfill into
}

type classShape struct {
	c  *class
	sh *shape
}

type ruleKey struct{ scope, name string }

type ruleUse struct {
	rule       berth.QuotaRule
	gpus, jobs int
}

// amount is a quantity of the resources fair share weighs.
type amount struct{ gpus, cpus, mem float64 }

// worker is a Worker's free capacity during a pass.
type worker struct {
	w        *Worker
	cls      *class
	order    int   // position in the snapshot
	gpuUsed  []int // milli-GPUs in use per GPU, as Worker.GPUMilliUsed
	freeGPUs int   // GPUs untouched: the ones a whole-GPU request may take
	shared   int   // GPUs shared by fractions with room left
	sharing  bool  // some attempt running on it holds a fraction of a GPU
	cpus     float64
	mem      berth.Bytes
	slots    int
	res      *reservation // holding this worker, or nil
	stamp    int
	bucket   int // free GPUs when in a bucket, -1 when not
	pos      int // index in the bucket
}

// class groups workers that are alike for feasibility: same queues,
// labels, GPUs, CPUs and memory. Its open workers sit in buckets by free GPU
// count, so best fit is the first fitting worker of the lowest bucket.
type class struct {
	rep         *Worker
	homogeneous bool // every GPU has the same model and memory
	workers     []*worker
	buckets     [][]*worker
}

func newPass(q *Queue, s *Snapshot) *pass {
	p := &pass{q: q, cfg: &q.cfg, s: s,
		classes: map[string]*class{}, byHost: map[string][]*worker{}, byModel: map[string][]*worker{},
		classFit: map[classShape]bool{}, eligible: map[*shape][]*class{}, statics: map[*shape]Reason{}, failed: map[memoKey]Reason{},
		noPreempt: map[*shape]bool{}, blocked: map[string]*Task{}, usage: map[listKey]*amount{},
		capQueue: map[string]*amount{}, stopping: map[*Running]bool{}}
	p.workers = make([]*worker, len(s.Workers))
	var key []byte
	for i, w := range s.Workers {
		wk := &worker{w: w, order: i, gpuUsed: slices.Clone(w.GPUMilliUsed), cpus: w.FreeCPUs, mem: w.FreeMemory,
			slots: w.FreeSlots, bucket: -1}
		if len(wk.gpuUsed) != len(w.GPUs) {
			wk.gpuUsed = make([]int, len(w.GPUs)) // a snapshot that tracks no use: all untouched
		}
		for _, u := range wk.gpuUsed {
			switch {
			case u == 0:
				wk.freeGPUs++
			case u < berth.WholeGPU:
				wk.shared++
			}
		}
		p.workers[i] = wk
		c := p.classFor(w, &key)
		wk.cls = c
		c.workers = append(c.workers, wk)
		p.byHost[w.Host] = append(p.byHost[w.Host], wk)
		for _, m := range w.Models {
			p.byModel[m] = append(p.byModel[m], wk)
		}
		if !w.Off {
			p.rebucket(wk)
			add := amount{float64(len(w.GPUs)), w.CPUs, float64(w.Memory)}
			if len(w.Queues) == 0 {
				p.capAll.add(add)
			}
			for _, qn := range w.Queues {
				if w.offFor(qn) {
					continue
				}
				if p.capQueue[qn] == nil {
					p.capQueue[qn] = &amount{}
				}
				p.capQueue[qn].add(add)
			}
		}
		for _, r := range w.Running {
			p.count(r)
			wk.sharing = wk.sharing || r.GPUMilli > 0
			if !r.Stopping {
				p.addReplica(r.Spread, w.Host, 1)
			}
		}
	}
	p.loadQuotas()
	p.budget = q.cfg.PreemptLimit - s.RecentPreemptions
	return p
}

func (p *pass) classFor(w *Worker, key *[]byte) *class {
	k := (*key)[:0]
	for _, qn := range w.Queues {
		k = append(append(k, qn...), ',')
	}
	k = append(k, '|')
	for _, qn := range w.OffQueues {
		k = append(append(k, qn...), ',')
	}
	k = append(k, '|')
	if len(w.Labels) > 0 {
		labels := make([]string, 0, len(w.Labels))
		for name := range w.Labels {
			labels = append(labels, name)
		}
		sort.Strings(labels)
		for _, name := range labels {
			k = append(append(append(append(k, name...), '='), w.Labels[name]...), ',')
		}
	}
	k = append(k, '|')
	homogeneous := true
	for i, g := range w.GPUs {
		k = append(append(k, g.Model...), ':')
		k = append(strconv.AppendInt(k, int64(g.Memory), 10), ',')
		if i > 0 && (g.Model != w.GPUs[0].Model || g.Memory != w.GPUs[0].Memory) {
			homogeneous = false
		}
	}
	k = strconv.AppendFloat(append(k, '|'), w.CPUs, 'g', -1, 64)
	k = strconv.AppendInt(append(k, '|'), int64(w.Memory), 10)
	*key = k
	c := p.classes[string(k)]
	if c == nil {
		c = &class{rep: w, homogeneous: homogeneous, buckets: make([][]*worker, len(w.GPUs)+1)}
		p.classes[string(k)] = c
		p.classOrder = append(p.classOrder, c)
	}
	return c
}

// count adds a running attempt to the fair-share usage, the quota usage
// (loaded after) and the preemption candidates.
func (p *pass) count(r *Running) {
	k := listKey{r.Queue, r.User}
	u := p.usage[k]
	if u == nil {
		u = &amount{}
		p.usage[k] = u
	}
	u.add(amount{float64(r.milli()) / berth.WholeGPU, r.CPUs, float64(r.Memory)})
	if p.victim(r, berth.MaxPriority+1) {
		p.victims = true
	}
}

func (a *amount) add(b amount) { a.gpus, a.cpus, a.mem = a.gpus+b.gpus, a.cpus+b.cpus, a.mem+b.mem }

func (p *pass) loadQuotas() {
	if len(p.s.Quotas) == 0 {
		return
	}
	p.rules = make(map[ruleKey]*ruleUse, len(p.s.Quotas))
	p.listRules = map[*list][3]*ruleUse{}
	p.quotaMsgs = map[QuotaExceeded]string{}
	p.weights = map[string]float64{}
	for _, r := range p.s.Quotas {
		p.rules[ruleKey{r.Scope, r.Name}] = &ruleUse{rule: r}
		p.templates = p.templates || r.Scope == berth.QuotaTemplate
		if r.Scope == berth.QuotaUser && r.Weight > 0 {
			p.weights[r.Name] = r.Weight
		}
	}
	for _, w := range p.s.Workers {
		for _, r := range w.Running {
			for _, ru := range p.matching(r.User, r.Queue, r.Template) {
				if ru == nil {
					continue
				}
				ru.gpus += r.milli()
				if r.Rank == 0 {
					ru.jobs++
				}
			}
		}
	}
}

// matching returns the rules that apply to a job of user, queue and
// template (nil entries where none does).
func (p *pass) matching(user, queue, template string) [3]*ruleUse {
	var m [3]*ruleUse
	if p.rules == nil {
		return m
	}
	if user != "" {
		m[0] = p.rules[ruleKey{berth.QuotaUser, user}]
	}
	m[1] = p.rules[ruleKey{berth.QuotaQueue, queue}]
	if template != "" {
		m[2] = p.rules[ruleKey{berth.QuotaTemplate, template}]
	}
	return m
}

// quotaFree reports whether no quota rule applies to any task of l.
func (p *pass) quotaFree(l *list) bool {
	return p.rules == nil || (p.matching(l.key.user, l.key.queue, "") == [3]*ruleUse{} && (l.templated == 0 || !p.templates))
}

// taskRules returns the rules that apply to t.
func (p *pass) taskRules(t *Task) [3]*ruleUse {
	if p.rules == nil {
		return [3]*ruleUse{}
	}
	m, ok := p.listRules[t.list]
	if !ok {
		m = p.matching(t.User, t.Queue, "")
		p.listRules[t.list] = m
	}
	if t.Template != "" {
		m[2] = p.rules[ruleKey{berth.QuotaTemplate, t.Template}]
	}
	return m
}

// overQuota returns the first rule that placing t would break, or nil.
func (p *pass) overQuota(t *Task) *QuotaExceeded {
	need := t.Resources.GPUsMilli() * t.nodes()
	for _, ru := range p.taskRules(t) {
		if ru == nil {
			continue
		}
		r := &ru.rule
		if r.MaxGPUs != berth.NoLimit && ru.gpus+need > r.MaxGPUs*berth.WholeGPU {
			if need%berth.WholeGPU != 0 || ru.gpus%berth.WholeGPU != 0 {
				return &QuotaExceeded{JobID: t.JobID, User: t.User, Rule: r.ID(), Resource: "gpu_milli",
					Requested: need, InUse: ru.gpus, Limit: r.MaxGPUs * berth.WholeGPU}
			}
			return &QuotaExceeded{JobID: t.JobID, User: t.User, Rule: r.ID(), Resource: "gpus",
				Requested: need / berth.WholeGPU, InUse: ru.gpus / berth.WholeGPU, Limit: r.MaxGPUs}
		}
		if r.MaxJobs != berth.NoLimit && ru.jobs+1 > r.MaxJobs {
			return &QuotaExceeded{JobID: t.JobID, User: t.User, Rule: r.ID(), Resource: "jobs",
				Requested: 1, InUse: ru.jobs, Limit: r.MaxJobs}
		}
	}
	return nil
}

// quotaMessage describes qe, formatting each distinct message once a pass.
func (p *pass) quotaMessage(qe *QuotaExceeded) string {
	k := *qe
	k.JobID, k.User = "", ""
	msg, ok := p.quotaMsgs[k]
	if !ok {
		msg = fmt.Sprintf("over quota %s: %s<=%d, %d in use, %d requested", qe.Rule, qe.Resource, qe.Limit, qe.InUse, qe.Requested)
		if qe.Resource == "gpu_milli" { // said in GPUs, fractions as fractions
			msg = fmt.Sprintf("over quota %s: gpus<=%s, %s in use, %s requested", qe.Rule,
				berth.FormatGPUs(qe.Limit), berth.FormatGPUs(qe.InUse), berth.FormatGPUs(qe.Requested))
		}
		p.quotaMsgs[k] = msg
	}
	return msg
}

// charge counts a placed task against its quotas and fair share.
func (p *pass) charge(t *Task) {
	n := t.nodes()
	for _, ru := range p.taskRules(t) {
		if ru != nil {
			ru.gpus += t.Resources.GPUsMilli() * n
			ru.jobs++
		}
	}
	k := listKey{t.Queue, t.User}
	u := p.usage[k]
	if u == nil {
		u = &amount{}
		p.usage[k] = u
	}
	f := float64(n)
	u.add(amount{float64(t.Resources.GPUsMilli()) / berth.WholeGPU * f, t.Resources.CPUs * f, float64(t.Resources.Memory) * f})
}

// fairPenalty is the fair-share points a list loses: FairShare × the
// user's dominant share of the queue's capacity ÷ the user's weight.
func (p *pass) fairPenalty(k listKey) float64 {
	u := p.usage[k]
	if u == nil {
		return 0
	}
	c := p.capAll
	if qc := p.capQueue[k.queue]; qc != nil {
		c.add(*qc)
	}
	share := 0.0
	for _, f := range [3][2]float64{{u.gpus, c.gpus}, {u.cpus, c.cpus}, {u.mem, c.mem}} {
		if f[1] > 0 {
			share = max(share, f[0]/f[1])
		}
	}
	w := p.weights[k.user]
	if w <= 0 {
		w = 1
	}
	return p.cfg.FairShare * share / w
}

// rebucket files wk under its free GPU count, or out of every bucket when
// it cannot take work.
func (p *pass) rebucket(wk *worker) {
	c := wk.cls
	if wk.bucket >= 0 {
		b := c.buckets[wk.bucket]
		last := b[len(b)-1]
		b[wk.pos], last.pos = last, wk.pos
		c.buckets[wk.bucket] = b[:len(b)-1]
		wk.bucket = -1
		if wk.slots <= 0 {
			p.open--
		}
	} else if wk.slots > 0 {
		p.open++
	}
	if wk.slots > 0 {
		wk.bucket, wk.pos = wk.freeGPUs, len(c.buckets[wk.freeGPUs])
		c.buckets[wk.freeGPUs] = append(c.buckets[wk.freeGPUs], wk)
	}
}

// take gives wk's resources to one member of t.
func (wk *worker) take(p *pass, t *Task, gpus []int) {
	wk.addGPUs(gpus, wk.milliFor(t, gpus))
	wk.cpus -= t.Resources.CPUs
	wk.mem -= t.Resources.Memory
	wk.slots--
	p.rebucket(wk)
}

// give returns what take took.
func (wk *worker) give(p *pass, t *Task, gpus []int) {
	wk.addGPUs(gpus, -wk.milliFor(t, gpus))
	wk.cpus += t.Resources.CPUs
	wk.mem += t.Resources.Memory
	wk.slots++
	p.rebucket(wk)
}

// milliFor returns the share of each of gpus a member of t takes on wk:
// a whole GPU, or for a fraction what it takes of its one GPU.
func (wk *worker) milliFor(t *Task, gpus []int) int {
	if t.Resources.GPUMilli == 0 || len(gpus) == 0 {
		return berth.WholeGPU
	}
	return t.Resources.MilliOn(wk.w.GPUs[wk.gpuAt(gpus[0])])
}

// gpuAt returns the position in wk's GPUs of the GPU of index idx.
func (wk *worker) gpuAt(idx int) int {
	for i, g := range wk.w.GPUs {
		if g.Index == idx {
			return i
		}
	}
	return -1
}

// addGPUs adds milli (negative: gives back) to the use of each of the GPUs
// of the listed indexes, keeping the counts of untouched and shared GPUs.
func (wk *worker) addGPUs(indexes []int, milli int) {
	for _, idx := range indexes {
		i := wk.gpuAt(idx)
		if i < 0 {
			continue
		}
		wk.countGPU(wk.gpuUsed[i], -1)
		wk.gpuUsed[i] += milli
		wk.countGPU(wk.gpuUsed[i], 1)
	}
}

// countGPU adds delta to the count of GPUs in the state a GPU of use used
// is in: untouched or shared.
func (wk *worker) countGPU(used, delta int) {
	switch {
	case used == 0:
		wk.freeGPUs += delta
	case used < berth.WholeGPU:
		wk.shared += delta
	}
}

// find returns the worker that fits one more member of t best, with the GPUs
// it would take: the best by findBest, unless it is a worker t avoids and
// one it does not avoid fits now.
func (p *pass) find(t *Task) (*worker, []int) {
	p.why = ""
	wk, g := p.findBest(t)
	if wk == nil || !slices.Contains(t.Avoid, wk.w.ID) {
		return wk, g
	}
	var others []*worker
	for _, c := range p.eligibleClasses(t) {
		for _, o := range c.workers {
			if !slices.Contains(t.Avoid, o.w.ID) {
				others = append(others, o)
			}
		}
	}
	if o, h := p.bestOf(t, others); o != nil {
		p.why = ""
		return o, h
	}
	return wk, g
}

// findBest returns the worker that fits one more member of t best, with the
// GPUs it would take: where t's model is loaded if any fits, else the
// fitting worker with the fewest free GPUs, the earlier class and bucket
// among equals.
func (p *pass) findBest(t *Task) (*worker, []int) {
	sh := t.shape
	if sh.host != "" {
		return p.bestOf(t, p.byHost[sh.host])
	}
	if t.Spread != "" {
		if wk, g := p.spreadOut(t); wk != nil {
			return wk, g
		}
	}
	if t.Model != "" {
		if wk, g := p.bestOf(t, p.byModel[t.Model]); wk != nil {
			return wk, g
		}
	}
	if p.cfg.Placement != PlacementDefault {
		return p.scoredFit(t)
	}
	if t.Resources.GPUMilli > 0 {
		return p.bestFraction(t)
	}
	var best *worker
	var bestGPUs []int
	for _, c := range p.eligibleClasses(t) {
		limit := len(c.buckets)
		if best != nil {
			limit = min(limit, best.freeGPUs)
		}
	scan:
		for k := sh.gpus; k < limit; k++ {
			for _, wk := range c.buckets[k] {
				if g, _, ok := p.fits(wk, t); ok {
					best, bestGPUs = wk, g
					break scan
				}
			}
		}
	}
	return best, bestGPUs
}

// bestFraction returns the worker and GPU a fraction t fits best: the
// GPU it leaves the least free milli on (filling a shared GPU before
// touching another), then the worker with the fewest untouched GPUs, the
// earlier class and bucket among equals.
func (p *pass) bestFraction(t *Task) (*worker, []int) {
	var best *worker
	var bestGPUs []int
	bestLeft := 0
	for _, c := range p.eligibleClasses(t) {
		for _, b := range c.buckets {
			for _, wk := range b {
				if g, left, ok := p.fits(wk, t); ok && (best == nil || left < bestLeft || left == bestLeft && wk.freeGPUs < best.freeGPUs) {
					best, bestGPUs, bestLeft = wk, g, left
					if left == 0 && wk.freeGPUs == 0 {
						return best, bestGPUs // none can do better
					}
				}
			}
		}
	}
	return best, bestGPUs
}

// spreadOut returns the best fitting worker on a host that runs no replica
// of t's set (preferring where t's model is loaded), or nil.
func (p *pass) spreadOut(t *Task) (*worker, []int) {
	hosts := p.replicas[t.Spread]
	var free, warm []*worker
	for _, c := range p.eligibleClasses(t) {
		for _, wk := range c.workers {
			if hosts[wk.w.Host] == 0 {
				free = append(free, wk)
				if t.Model != "" && slices.Contains(wk.w.Models, t.Model) {
					warm = append(warm, wk)
				}
			}
		}
	}
	if wk, g := p.bestOf(t, warm); wk != nil {
		return wk, g
	}
	return p.bestOf(t, free)
}

// addReplica counts delta replicas of set on host.
func (p *pass) addReplica(set, host string, delta int) {
	if set == "" {
		return
	}
	if p.replicas == nil {
		p.replicas = map[string]map[string]int{}
	}
	if p.replicas[set] == nil {
		p.replicas[set] = map[string]int{}
	}
	p.replicas[set][host] += delta
}

// bestOf returns the fitting one of workers with the fewest free GPUs
// (for a fraction, first the least free milli left on its GPU).
func (p *pass) bestOf(t *Task, workers []*worker) (*worker, []int) {
	var best *worker
	var bestGPUs []int
	bestLeft := 0
	frac := t.Resources.GPUMilli > 0
	for _, wk := range workers {
		if best != nil && !frac && wk.freeGPUs >= best.freeGPUs {
			continue
		}
		if !p.classFits(wk.cls, t) || (t.shape.host != "" && wk.w.Host != t.shape.host) {
			continue
		}
		if g, left, ok := p.fits(wk, t); ok && (best == nil || left < bestLeft || left == bestLeft && wk.freeGPUs < best.freeGPUs) {
			best, bestGPUs, bestLeft = wk, g, left
		}
	}
	return best, bestGPUs
}

// fits returns the GPUs one member of t would take on wk, if it fits
// there now: whole GPUs untouched by fractions, lowest index first; for a
// fraction the one GPU with room for it that it leaves the least free
// milli on (left), the lowest index among equals. wk's class must be
// eligible for t.
func (p *pass) fits(wk *worker, t *Task) (gpus []int, left int, ok bool) {
	r := &t.Resources
	if wk.w.Off || wk.slots <= 0 || wk.stamp == p.stamp || wk.cpus < r.CPUs || wk.mem < r.Memory || wk.freeGPUs < r.GPUs {
		return nil, 0, false
	}
	if r.GPUMilli > 0 && wk.freeGPUs == 0 && wk.shared == 0 {
		return nil, 0, false // every GPU given whole
	}
	if wk.res != nil && wk.res.task != t && !p.backfills(t, wk.res) {
		p.sawRes = wk.res
		return nil, 0, false
	}
	if r.GPUMilli > 0 {
		at := fractionFit(wk.w.GPUs, wk.gpuUsed, r, wk.cls.homogeneous)
		if at < 0 {
			return nil, 0, false
		}
		return []int{wk.w.GPUs[at].Index}, berth.WholeGPU - wk.gpuUsed[at] - r.MilliOn(wk.w.GPUs[at]), true
	}
	if r.GPUs == 0 {
		return nil, 0, true
	}
	gpus = make([]int, 0, r.GPUs)
	for i, g := range wk.w.GPUs {
		if wk.gpuUsed[i] == 0 && (wk.cls.homogeneous || gpuMatches(g, r)) {
			gpus = append(gpus, g.Index)
			if len(gpus) == r.GPUs {
				return gpus, 0, true
			}
		}
	}
	return nil, 0, false
}

// fractionFit returns the position in gpus (used: their milli in use) of
// the GPU a fraction r fits best, the one it leaves the least free milli
// on, the lowest among equals; -1 if none has room. all says every GPU
// matches r's type and memory.
func fractionFit(gpus []berth.GPU, used []int, r *berth.Resources, all bool) int {
	best, bestLeft := -1, 0
	for i, g := range gpus {
		if !all && !gpuMatches(g, r) {
			continue
		}
		if left := berth.WholeGPU - used[i] - r.MilliOn(g); left >= 0 && (best < 0 || left < bestLeft) {
			best, bestLeft = i, left
		}
	}
	return best
}

// eligibleClasses returns the classes whose workers could ever run t, in
// the order of their first worker.
func (p *pass) eligibleClasses(t *Task) []*class {
	if list, ok := p.eligible[t.shape]; ok {
		return list
	}
	var list []*class
	for _, c := range p.classOrder {
		if p.classFits(c, t) {
			list = append(list, c)
		}
	}
	p.eligible[t.shape] = list
	return list
}

func (p *pass) classFits(c *class, t *Task) bool {
	k := classShape{c, t.shape}
	ok, seen := p.classFit[k]
	if !seen {
		ok = capable(c.rep, t, false)
		p.classFit[k] = ok
	}
	return ok
}

// capable reports whether w could ever run one member of t: it serves the
// queue (and has not turned it off), has the labels (and host, if checkHost) and enough matching GPUs,
// CPUs and memory in all.
func capable(w *Worker, t *Task, checkHost bool) bool {
	if !w.serves(t.Queue) || w.offFor(t.Queue) || (checkHost && t.Constraints.Host != "" && t.Constraints.Host != w.Host) {
		return false
	}
	if !hasLabels(w, t.Constraints.Labels) || (t.NoImage && w.needsImage()) {
		return false
	}
	r := &t.Resources
	return w.CPUs >= r.CPUs && w.Memory >= r.Memory && matchingGPUs(w, r) >= r.GPUDevices()
}

// matchingGPUs counts w's GPUs of the model and memory r asks for.
func matchingGPUs(w *Worker, r *berth.Resources) int {
	n := 0
	for _, g := range w.GPUs {
		if gpuMatches(g, r) {
			n++
		}
	}
	return n
}

func hasLabels(w *Worker, labels map[string]string) bool {
	for k, v := range labels {
		if w.Labels[k] != v {
			return false
		}
	}
	return true
}

func gpuMatches(g berth.GPU, r *berth.Resources) bool {
	if r.GPUMemory > 0 && g.Memory < r.GPUMemory {
		return false
	}
	return g.HasType(r.GPUType)
}

// shape is what makes two tasks interchangeable for feasibility: if one
// found no worker in a pass, the next of the same shape won't either.
type shape struct {
	queue, host, gpuType, labels string
	gpus, milli, nodes           int
	noImage                      bool
	gpuMem, mem                  berth.Bytes
	cpus                         float64
}

func shapeOf(t *Task) shape {
	s := shape{queue: t.Queue, host: t.Constraints.Host, gpuType: t.Resources.GPUType, gpus: t.Resources.GPUs,
		milli: t.Resources.GPUMilli, nodes: t.nodes(), gpuMem: t.Resources.GPUMemory, mem: t.Resources.Memory, cpus: t.Resources.CPUs, noImage: t.NoImage}
	s.labels = labelList(t.Constraints.Labels)
	return s
}

// labelList writes labels as "k=v,k2=v2", sorted.
func labelList(labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k, v := range labels {
		keys = append(keys, k+"="+v)
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}
