package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
)

// Rows is the result of a query, read row by row: a pgx.Rows, or a
// *sql.Rows whose Close drops its error (Err reports what matters).
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// QueryFunc runs a read-only query with args and returns its rows, or the
// error of starting it.
type QueryFunc func(ctx context.Context, query string, args ...any) (Rows, error)

// Dialect is the SQL of the reads that differs between the drivers.
type Dialect struct {
	// Placeholder returns the placeholder of the nth argument of a query,
	// counted from 1: "?" for SQLite, "$n" for PostgreSQL.
	Placeholder func(n int) string
	// ControlTime is the expression that reads a worker control's time
	// in unix nanoseconds, 0 for none.
	ControlTime string
	// JobName is the expression that reads a job's name from its spec.
	JobName string
	// Unindexed returns a column as a query writes it for the planner to
	// use no index of it: SQLite then walks a range of the primary key
	// (+column), where PostgreSQL's planner chooses by its statistics
	// (column).
	Unindexed func(column string) string
}

// rewrite returns query with each "?" placeholder replaced by the
// dialect's, numbered from 1.
func (d Dialect) rewrite(query string) string {
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString(d.Placeholder(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Reader implements every read of store.Store (all but Write and Close)
// over a driver's QueryFunc; drivers embed it. Its methods are safe for
// concurrent use when the QueryFunc is.
type Reader struct {
	query   QueryFunc
	dialect Dialect
}

// NewReader returns a Reader that runs its queries with query, written in
// d.
func NewReader(query QueryFunc, d Dialect) *Reader { return &Reader{query: query, dialect: d} }

// args collects the arguments of a query being built.
type args struct {
	d    *Dialect
	list []any
}

// add appends v and returns its placeholder.
func (a *args) add(v any) string {
	a.list = append(a.list, v)
	return a.d.Placeholder(len(a.list))
}

// in appends every value of vs and returns "IN (placeholders)".
func in[T ~string](a *args, vs []T) string {
	ps := make([]string, len(vs))
	for i, v := range vs {
		ps[i] = a.add(string(v))
	}
	return "IN (" + strings.Join(ps, ", ") + ")"
}

// StateIn returns the condition that column, a job's state, is one of
// states, each written as a literal rather than a placeholder: PostgreSQL's
// jobs_state index leaves succeeded jobs out (its migration 0027), and the
// planner uses a partial index only where it sees that the condition keeps
// to the index's rows, which it cannot for a placeholder's value.
func StateIn(column string, states ...berth.JobState) string {
	lits := make([]string, len(states))
	for i, st := range states {
		lits[i] = "'" + strings.ReplaceAll(string(st), "'", "''") + "'"
	}
	return column + " IN (" + strings.Join(lits, ", ") + ")"
}

// each runs query and calls fn with each row, stopping at the first error.
func (r *Reader) each(ctx context.Context, query string, args []any, fn func(row scanner) error) error {
	rows, err := r.query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// collect runs query and returns every row, scanned with scan.
func collect[T any](ctx context.Context, r *Reader, scan func(scanner) (T, error), query string, args ...any) ([]T, error) {
	var out []T
	err := r.each(ctx, query, args, func(row scanner) error {
		v, err := scan(row)
		out = append(out, v)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// selectJobs reads JobColumns, less the spec of a job that shares its
// array's (NULL: nothing to allocate for it).
var selectJobs = `SELECT ` + strings.Replace(JobColumns, " spec,", " CASE WHEN array_id IS NULL THEN spec END,", 1) + ` FROM jobs`

const selectAttempts = `SELECT ` + AttemptColumns + ` FROM attempts`

// selectEvents reads the newest store.KeptEvents events, newest first: a
// walk back from the end of the primary key.
var selectEvents = `SELECT ` + EventColumns + ` FROM events ORDER BY seq DESC LIMIT ` + strconv.Itoa(store.KeptEvents)

// LoadActive returns what the controller rebuilds its memory from and,
// when each is not nil, hands it the jobs as they are read, once all but
// the events is read (see store.JobStore). Its reads run at once, and
// the pending jobs, when many, in ranges of ids at once (jobsIn): at a
// million pending jobs the load is most of a restart.
func (r *Reader) LoadActive(ctx context.Context, each func(*store.Active, []*berth.Job, []store.ArrayMember, int)) (*store.Active, error) {
	a := &store.Active{LogSizes: map[string]int64{}, Counts: map[berth.JobState]int{}}
	if each == nil {
		each = func(a *store.Active, jobs []*berth.Job, members []store.ArrayMember, _ int) {
			a.Jobs, a.Members = append(a.Jobs, jobs...), append(a.Members, members...)
		}
	}
	var running []*berth.Job
	runningRead, restRead := make(chan struct{}), make(chan struct{})
	err := parallel(
		func() error {
			if err := r.countJobs(ctx, a.Counts); err != nil {
				return err
			}
			total := 0
			for _, n := range a.Counts {
				total += n
			}
			// Each part of the pending jobs goes with the running jobs
			// whose ids are below its end (all of them after the last).
			left := a.Counts[berth.JobPending] + a.Counts[berth.JobRunning]
			return r.jobsIn(ctx, berth.JobPending, a.Counts[berth.JobPending], total,
				func(jobs []*berth.Job, members []store.ArrayMember, end string) {
					<-runningRead
					<-restRead
					k := len(running)
					if end != "" {
						k, _ = slices.BinarySearchFunc(running, end, func(j *berth.Job, id string) int { return strings.Compare(j.ID, id) })
					}
					jobs, running = mergeByID(jobs, running[:k]), running[k:]
					if len(jobs) > 0 || len(members) > 0 {
						left = max(left-len(jobs)-len(members), 0)
						each(a, jobs, members, left)
					}
				})
		},
		func() error {
			defer close(runningRead)
			return r.jobsIn(ctx, berth.JobRunning, 0, 0, func(jobs []*berth.Job, _ []store.ArrayMember, _ string) {
				running = append(running, jobs...)
			})
		},
		func() (err error) {
			if a.Events, err = collect(ctx, r, scanEvent, selectEvents); err != nil {
				return fmt.Errorf("load events: %w", err)
			}
			slices.Reverse(a.Events)
			return nil
		},
		func() error {
			defer close(restRead)
			return r.loadRest(ctx, a)
		},
	)
	if err != nil {
		return nil, err
	}
	return a, nil
}

// parallel runs fns at once and returns their errors, joined.
func parallel(fns ...func() error) error {
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns {
		wg.Go(func() { errs[i] = fn() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// countJobs sets counts to the number of jobs in each state.
func (r *Reader) countJobs(ctx context.Context, counts map[berth.JobState]int) error {
	err := r.each(ctx, `SELECT state, COUNT(*) FROM jobs GROUP BY state`, nil, func(row scanner) error {
		var st string
		var n int
		err := row.Scan(&st, &n)
		counts[berth.JobState(st)] = n
		return err
	})
	if err != nil {
		return fmt.Errorf("count jobs: %w", err)
	}
	return nil
}

// loadRest reads the rest of what LoadActive returns: active attempts
// and their log sizes, workers, quota rules, worker controls and the
// federation's state.
func (r *Reader) loadRest(ctx context.Context, a *store.Active) error {
	var err error
	if a.Attempts, err = collect(ctx, r, scanAttempt, selectAttempts+` WHERE state IN ('assigned', 'running') ORDER BY id`); err != nil {
		return fmt.Errorf("load attempts: %w", err)
	}
	if a.Workers, err = r.Workers(ctx); err != nil {
		return err
	}
	if a.Quotas, err = r.Quotas(ctx); err != nil {
		return err
	}
	if a.Controls, err = r.WorkerControls(ctx); err != nil {
		return err
	}
	err = r.each(ctx, `SELECT l.attempt_id, MAX(l.off + length(l.data)) FROM logs l
		JOIN attempts a ON a.id = l.attempt_id WHERE a.state IN ('assigned', 'running') GROUP BY l.attempt_id`, nil,
		func(row scanner) error {
			var id string
			var size int64
			err := row.Scan(&id, &size)
			a.LogSizes[id] = size
			return err
		})
	if err != nil {
		return fmt.Errorf("load log sizes: %w", err)
	}
	a.Federation, err = r.federationState(ctx)
	return err
}

// Ranges of the load: a state's jobs are read in up to loadRanges
// ranges of ids, rangesPerCore a core (small ranges: the first is handed
// out soon, and the last leaves little to do after it), each of
// jobsPerRange jobs at least, as many at once as there are cores.
const (
	loadRanges    = 64
	rangesPerCore = 8
	jobsPerRange  = 10_000
)

// jobsIn reads the jobs in state st and hands them to part, range by
// range in id order, one call at a time: the pending jobs of arrays
// still as submitted as members (memberWhere), the others whole, and the
// id the range ends before ("" for the last). n is about how many there
// are and total how many jobs there are in all (0 when not known): n
// splits them into ranges of ids, read as many at once as there are
// cores, so that part works on one range while the next are read. Each
// read walks the jobs_state index in id order (a list of states with
// ORDER BY id would sort every row first), or, when the state holds half
// the jobs or more, the table itself by id (Dialect.Unindexed): one walk
// of the table reads fewer pages than a walk of the index with a look-up
// of each row in the table. The jobs of an array share one decoded spec
// (per range). LoadActive runs before anything writes (the controller's
// start): the reads of a range are not one snapshot.
func (r *Reader) jobsIn(ctx context.Context, st berth.JobState, n, total int,
	part func(jobs []*berth.Job, members []store.ArrayMember, end string)) error {
	cores := runtime.GOMAXPROCS(0)
	bounds, err := r.rangeBounds(ctx, st, n, min(loadRanges, rangesPerCore*cores, n/jobsPerRange))
	if err != nil {
		return err
	}
	type result struct {
		jobs    []*berth.Job
		members []store.ArrayMember
		err     error
		done    chan struct{}
	}
	results := make([]result, len(bounds)+1)
	reads := make([]func() error, len(results))
	readCtx, cancel := context.WithCancel(ctx)
	for i := range results {
		res := &results[i]
		res.done = make(chan struct{})
		a := args{d: &r.dialect}
		state := "state"
		if total > 0 && 2*n >= total {
			state = r.dialect.Unindexed(state)
		}
		where := ` WHERE ` + StateIn(state, st)
		if i > 0 {
			where += ` AND id >= ` + a.add(bounds[i-1])
		}
		if i < len(bounds) {
			where += ` AND id < ` + a.add(bounds[i])
		}
		size := n/len(results) + n/8/len(results)
		reads[i] = func() (err error) {
			if st == berth.JobPending {
				res.jobs, res.members, err = r.pendingIn(readCtx, size, where, a.list)
			} else {
				res.jobs, err = r.jobs(readCtx, size, selectJobs+where+` ORDER BY id`, a.list...)
			}
			return err
		}
	}
	// The ranges start in id order, as many at once as there are cores.
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // the reads left, once one failed
	wg.Go(func() {
		slots := make(chan struct{}, cores)
		for i := range results {
			res := &results[i]
			select {
			case slots <- struct{}{}:
			case <-readCtx.Done():
				res.err = readCtx.Err()
				close(res.done)
				continue
			}
			wg.Go(func() {
				res.err = reads[i]()
				<-slots
				close(res.done)
			})
		}
	})
	for i := range results {
		res := &results[i]
		<-res.done
		if res.err != nil {
			return fmt.Errorf("load %s jobs: %w", st, res.err)
		}
		end := ""
		if i < len(bounds) {
			end = bounds[i]
		}
		part(res.jobs, res.members, end)
		*res = result{} // its jobs are part's now
	}
	return nil
}

// memberWhere selects the pending jobs of arrays still as submitted
// (store.ArrayMember): they share their array's first job's spec, and
// nothing was set on them since (LoadActive selects pending jobs only).
const memberWhere = `array_id IS NOT NULL AND reason = '' AND attempts = 0 AND exit_code IS NULL
	AND started_at = 0 AND finished_at = 0 AND cluster IS NULL`

// selectMembers reads what a member (memberWhere) has of its own: its id,
// its index, the job whose spec it shares, and its creation time; the
// shared job's id is NULL for a job that is no member.
const selectMembers = `SELECT id, array_index, CASE WHEN ` + memberWhere + ` THEN array_id END, created_at FROM jobs`

// pendingIn reads the pending jobs of about size that where (and args)
// selects, by id, in one walk when most are members: the others are then
// read by id, or, when there are many of them, by a second walk.
func (r *Reader) pendingIn(ctx context.Context, size int, where string, whereArgs []any) ([]*berth.Job, []store.ArrayMember, error) {
	members, others, err := r.members(ctx, size, selectMembers+where+` ORDER BY id`, whereArgs...)
	if err != nil || len(others) == 0 {
		return nil, members, err
	}
	if 4*len(others) > len(members) {
		jobs, err := r.jobs(ctx, len(others), selectJobs+where+` AND NOT (`+memberWhere+`) ORDER BY id`, whereArgs...)
		return jobs, members, err
	}
	jobs := make([]*berth.Job, 0, len(others))
	for start := 0; start < len(others); start += idsPerQuery {
		a := args{d: &r.dialect}
		q := selectJobs + ` WHERE id ` + in(&a, others[start:min(start+idsPerQuery, len(others))]) + ` ORDER BY id`
		part, err := r.jobs(ctx, idsPerQuery, q, a.list...)
		if err != nil {
			return nil, nil, err
		}
		jobs = append(jobs, part...)
	}
	return jobs, members, nil
}

// members runs query, a selectMembers of about size jobs, and returns its
// members, those of one array made at the same time sharing one job whose
// spec is read once, at the end, and the ids of the jobs that are no
// members, in order.
func (r *Reader) members(ctx context.Context, size int, query string, args ...any) ([]store.ArrayMember, []string, error) {
	type shape struct {
		head    string
		created int64
	}
	likes := map[shape]*berth.Job{}
	out := make([]store.ArrayMember, 0, max(size, 0))
	var others []string
	var last shape
	var like *berth.Job
	err := r.each(ctx, query, args, func(row scanner) error {
		var m store.ArrayMember
		var index, created intCell
		var head sql.NullString
		if err := row.Scan(&m.ID, &index, &head, &created); err != nil {
			return err
		}
		if !head.Valid {
			others = append(others, m.ID)
			return nil
		}
		m.Index = int(index.v)
		if head.String != last.head || created.v != last.created {
			last = shape{head.String, created.v}
			if like = likes[last]; like == nil {
				like = &berth.Job{State: berth.JobPending, CreatedAt: fromNanos(created.v)}
				likes[last] = like
			}
		}
		m.Like = like
		out = append(out, m)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	specs := newSpecCache()
	for s := range likes {
		specs.byHead[s.head] = nil
	}
	if err := r.readHeads(ctx, specs); err != nil {
		return nil, nil, err
	}
	for s, like := range likes {
		like.JobSpec = *specs.byHead[s.head]
	}
	return out, others, nil
}

// rangeBounds returns the ids that split the n jobs in state st into
// ranges of about n/ranges jobs, in order: ranges-1 ids at most, none when
// ranges < 2. Each is found from the last by a walk of the jobs_state
// index that skips a range's jobs, so that all of them walk it once.
func (r *Reader) rangeBounds(ctx context.Context, st berth.JobState, n, ranges int) ([]string, error) {
	step := (n + max(ranges, 1) - 1) / max(ranges, 1)
	var bounds []string
	for last := ""; len(bounds) < ranges-1; {
		a := args{d: &r.dialect}
		q := `SELECT id FROM jobs WHERE ` + StateIn("state", st) + ` AND id >= ` + a.add(last) +
			` ORDER BY id LIMIT 1 OFFSET ` + a.add(step)
		ids, err := collect(ctx, r, func(row scanner) (id string, err error) { return id, row.Scan(&id) }, q, a.list...)
		if err != nil {
			return nil, fmt.Errorf("split %s jobs: %w", st, err)
		}
		if len(ids) == 0 {
			break // fewer jobs than n now
		}
		last = ids[0]
		bounds = append(bounds, last)
	}
	return bounds, nil
}

// jobs runs query, a selectJobs of about size jobs (0: not known), and
// returns its jobs with their specs: each spec decoded once, and the jobs
// that store it or share it (the jobs of an array) share it too; the spec
// of an array's first job is read at the end, once, for the jobs of its
// array that query returned.
func (r *Reader) jobs(ctx context.Context, size int, query string, args ...any) ([]*berth.Job, error) {
	specs := newSpecCache()
	jobs := make([]*berth.Job, 0, max(size, 0))
	var shared []sharedSpec
	last := "" // the head of the last job that shares one: the jobs of an array come together
	err := r.each(ctx, query, args, func(row scanner) error {
		j, data, head, cluster, err := scanJobRow(row)
		if err != nil {
			return err
		}
		jobs = append(jobs, j)
		if head != "" {
			if head == last {
				head = last // kept once, not once a job
			} else if _, ok := specs.byHead[head]; !ok {
				specs.byHead[head] = nil // read below
			}
			last = head
			shared = append(shared, sharedSpec{job: j, head: head, cluster: cluster})
			return nil
		}
		spec, err := specs.decode(j.ID, data)
		if err == nil {
			setSpec(j, spec, cluster)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := r.readHeads(ctx, specs); err != nil {
		return nil, err
	}
	for _, s := range shared {
		setSpec(s.job, specs.byHead[s.head], s.cluster)
	}
	return jobs, nil
}

// readHeads reads into specs.byHead the spec of each array's first job
// that it holds no spec of yet (nil).
func (r *Reader) readHeads(ctx context.Context, specs *specCache) error {
	var heads []string
	for h, spec := range specs.byHead {
		if spec == nil {
			heads = append(heads, h)
		}
	}
	for start := 0; start < len(heads); start += idsPerQuery {
		a := args{d: &r.dialect}
		q := `SELECT id, spec FROM jobs WHERE id ` + in(&a, heads[start:min(start+idsPerQuery, len(heads))])
		err := r.each(ctx, q, a.list, func(row scanner) error {
			var id string
			var data []byte
			if err := row.Scan(&id, &data); err != nil {
				return err
			}
			spec, err := specs.decode(id, data)
			specs.byHead[id] = spec
			return err
		})
		if err != nil {
			return fmt.Errorf("read the specs of arrays: %w", err)
		}
	}
	for _, h := range heads {
		if specs.byHead[h] == nil {
			return fmt.Errorf("read the specs of arrays: no job %s, whose spec jobs share", h)
		}
	}
	return nil
}

// mergeByID merges two lists of jobs each in id order into one.
func mergeByID(a, b []*berth.Job) []*berth.Job {
	if len(b) == 0 {
		return a
	}
	out := make([]*berth.Job, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if a[0].ID < b[0].ID {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	return append(append(out, a...), b...)
}

// Job returns one job, or an ECodeNotFound error.
func (r *Reader) Job(ctx context.Context, id string) (*berth.Job, error) {
	a := args{d: &r.dialect}
	jobs, err := r.jobs(ctx, 1, selectJobs+` WHERE id = `+a.add(id), a.list...)
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", id, err)
	}
	if len(jobs) == 0 {
		return nil, &berth.Error{Code: berth.ECodeNotFound, Field: "id", Message: fmt.Sprintf("no job %q", id)}
	}
	return jobs[0], nil
}

// Jobs returns the jobs matching f, newest first.
func (r *Reader) Jobs(ctx context.Context, f store.JobFilter) ([]*berth.Job, error) {
	a := args{d: &r.dialect}
	var where []string
	if len(f.States) > 0 {
		where = append(where, StateIn("state", f.States...))
	}
	if f.Queue != "" {
		where = append(where, "queue = "+a.add(f.Queue))
	}
	if f.User != "" {
		where = append(where, "user_name = "+a.add(f.User))
	}
	if f.Parent != "" {
		where = append(where, "parent = "+a.add(f.Parent))
	}
	if f.Name != "" {
		where = append(where, r.dialect.JobName+" = "+a.add(f.Name))
	}
	if f.Before != "" {
		where = append(where, "id < "+a.add(f.Before))
	}
	q := selectJobs
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY id DESC"
	if f.Limit > 0 {
		q += " LIMIT " + a.add(f.Limit)
	}
	jobs, err := r.jobs(ctx, 0, q, a.list...)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	return jobs, nil
}

// JobHosts returns where each job of ids that has had an attempt on a
// worker runs or ran: its latest attempt's host, or its latest gang's
// rank 0 host and "+N" for the other members.
func (r *Reader) JobHosts(ctx context.Context, ids []string) (map[string]string, error) {
	latest := map[string]map[int]string{} // job id → task index → host, the newest attempt's
	for start := 0; start < len(ids); start += idsPerQuery {
		a := args{d: &r.dialect}
		q := `SELECT job_id, task_index, host FROM attempts WHERE host <> '' AND job_id ` +
			in(&a, ids[start:min(start+idsPerQuery, len(ids))]) + ` ORDER BY id`
		err := r.each(ctx, q, a.list, func(row scanner) error {
			var id, host string
			var task int
			if err := row.Scan(&id, &task, &host); err != nil {
				return err
			}
			if latest[id] == nil {
				latest[id] = map[int]string{}
			}
			latest[id][task] = host
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("hosts of jobs: %w", err)
		}
	}
	out := make(map[string]string, len(latest))
	for id, hosts := range latest {
		out[id] = hosts[slices.Min(slices.Collect(maps.Keys(hosts)))]
		if len(hosts) > 1 {
			out[id] += fmt.Sprintf(" +%d", len(hosts)-1)
		}
	}
	return out, nil
}

// JobsByIdempotencyKey returns the jobs submitted with key, in id order.
func (r *Reader) JobsByIdempotencyKey(ctx context.Context, key string) ([]*berth.Job, error) {
	a := args{d: &r.dialect}
	jobs, err := r.jobs(ctx, 0, selectJobs+` WHERE idempotency_key = `+a.add(key)+` ORDER BY id`, a.list...)
	if err != nil {
		return nil, fmt.Errorf("jobs by idempotency key: %w", err)
	}
	return jobs, nil
}

// idsPerQuery bounds the ids one IN (…) list binds.
const idsPerQuery = 500

// JobStates returns the state of each existing job in ids.
func (r *Reader) JobStates(ctx context.Context, ids []string) (map[string]berth.JobState, error) {
	states := make(map[string]berth.JobState, len(ids))
	for start := 0; start < len(ids); start += idsPerQuery {
		a := args{d: &r.dialect}
		q := `SELECT id, state FROM jobs WHERE id ` + in(&a, ids[start:min(start+idsPerQuery, len(ids))])
		err := r.each(ctx, q, a.list, func(row scanner) error {
			var id, st string
			err := row.Scan(&id, &st)
			states[id] = berth.JobState(st)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("job states: %w", err)
		}
	}
	return states, nil
}

// Attempts returns a job's attempts, oldest first.
func (r *Reader) Attempts(ctx context.Context, jobID string) ([]*berth.Attempt, error) {
	a := args{d: &r.dialect}
	as, err := collect(ctx, r, scanAttempt, selectAttempts+` WHERE job_id = `+a.add(jobID)+` ORDER BY id`, a.list...)
	if err != nil {
		return nil, fmt.Errorf("attempts of %s: %w", jobID, err)
	}
	return as, nil
}

// Attempt returns one attempt; an unknown id is ECodeNotFound.
func (r *Reader) Attempt(ctx context.Context, id string) (*berth.Attempt, error) {
	a := args{d: &r.dialect}
	as, err := collect(ctx, r, scanAttempt, selectAttempts+` WHERE id = `+a.add(id), a.list...)
	if err != nil {
		return nil, fmt.Errorf("attempt %s: %w", id, err)
	}
	if len(as) == 0 {
		return nil, &berth.Error{Code: berth.ECodeNotFound, Field: "id", Message: fmt.Sprintf("no attempt %q", id)}
	}
	return as[0], nil
}

// Logs returns up to limit bytes of an attempt's output from offset.
func (r *Reader) Logs(ctx context.Context, attemptID string, offset int64, limit int) ([]byte, error) {
	chunks, err := r.LogChunks(ctx, attemptID, offset, limit)
	if len(chunks) == 1 {
		return chunks[0].Data, err
	}
	var out []byte
	for _, c := range chunks {
		out = append(out, c.Data...)
	}
	return out, err
}

// LogChunks returns the chunks of an attempt's output from offset, up to
// limit bytes in all, the first cut to begin at offset.
func (r *Reader) LogChunks(ctx context.Context, attemptID string, offset int64, limit int) ([]store.LogChunk, error) {
	if limit <= 0 {
		return nil, nil
	}
	end := offset + int64(limit)
	if end < offset { // offset+limit overflows: read to the end
		end = math.MaxInt64
	}
	a := args{d: &r.dialect}
	q := `SELECT off, data, stream FROM logs WHERE attempt_id = ` + a.add(attemptID) + ` AND off < ` + a.add(end) +
		` AND off + length(data) > ` + a.add(offset) + ` ORDER BY off`
	var out []store.LogChunk
	left := limit
	err := r.each(ctx, q, a.list, func(row scanner) error {
		c := store.LogChunk{AttemptID: attemptID}
		if err := row.Scan(&c.Offset, &c.Data, &c.Stream); err != nil {
			return err
		}
		if c.Offset < offset {
			c.Data, c.Offset = c.Data[offset-c.Offset:], offset
		}
		if left <= 0 {
			return nil
		}
		if len(c.Data) > left {
			c.Data = c.Data[:left]
		}
		left -= len(c.Data)
		out = append(out, c)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("logs of %s: %w", attemptID, err)
	}
	return out, nil
}

// Workers returns every worker ever registered, by id.
func (r *Reader) Workers(ctx context.Context) ([]*berth.Worker, error) {
	ws, err := collect(ctx, r, scanWorker, `SELECT `+WorkerColumns+` FROM workers ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	return ws, nil
}

// Quotas returns every quota rule, by id.
func (r *Reader) Quotas(ctx context.Context) ([]*berth.QuotaRule, error) {
	qs, err := collect(ctx, r, scanQuota, `SELECT `+QuotaColumns+` FROM quota_rules ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list quota rules: %w", err)
	}
	return qs, nil
}

// WorkerControls returns every worker control, by host, then queue.
func (r *Reader) WorkerControls(ctx context.Context) ([]*berth.WorkerControl, error) {
	cs, err := collect(ctx, r, scanControl,
		`SELECT `+ControlColumns+`, `+r.dialect.ControlTime+` FROM worker_controls ORDER BY host_label, queue`)
	if err != nil {
		return nil, fmt.Errorf("list worker controls: %w", err)
	}
	return cs, nil
}

// UpsertAuditHead writes a store.Batch's AuditHead: its arguments are the
// seq and the hash.
const UpsertAuditHead = `INSERT INTO audit_head (id, seq, hash) VALUES (1, ?, ?)
	ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash`

// AuditHead returns the audit head the last batch wrote, the zero value
// for none.
func (r *Reader) AuditHead(ctx context.Context) (store.AuditHead, error) {
	var h store.AuditHead
	err := r.each(ctx, `SELECT seq, hash FROM audit_head WHERE id = 1`, nil, func(row scanner) error {
		var seq int64
		if err := row.Scan(&seq, &h.Hash); err != nil {
			return err
		}
		h.Seq = uint64(seq)
		return nil
	})
	if err != nil {
		return store.AuditHead{}, fmt.Errorf("read audit head: %w", err)
	}
	return h, nil
}
