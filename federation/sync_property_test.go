package federation

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"pgregory.net/rapid"
)

// originModel is an origin's side of the sync with one peer: its handles
// on the peer, its mirror of their jobs and its cursor, all written in
// one batch as the controller writes them.
type originModel struct {
	name     string
	handles  map[string]*berth.Handoff // by remote id and nonce (handleKey's text)
	mirror   map[string]berth.RemoteJob
	cursor   berth.ChangeCursor
	restored bool // restored from a backup at least once
}

func hkey(remoteID, nonce string) string { return remoteID + "/" + nonce }

// held is what the origin passes to Reconcile: its handed-off handles
// whose job it has not seen end, by key.
func (o *originModel) held() []*berth.Handoff {
	var out []*berth.Handoff
	for _, k := range slices.Sorted(maps.Keys(o.handles)) {
		if h := o.handles[k]; h.State == berth.HandoffDone && !o.mirror[k].Tombstone {
			out = append(out, h)
		}
	}
	return out
}

// clone copies o whole: a backup.
func (o *originModel) clone() *originModel {
	c := &originModel{name: o.name, handles: make(map[string]*berth.Handoff, len(o.handles)), mirror: maps.Clone(o.mirror),
		cursor: o.cursor, restored: o.restored}
	for k, h := range o.handles {
		ch := *h
		c.handles[k] = &ch
	}
	return c
}

// syncModel is a peer, two origins pulling from it and the backups of
// each.
type syncModel struct {
	peer          *memPeer
	peerBackups   []*memPeer
	origins       []*originModel
	originBackups map[string][]*originModel
	now           time.Time
	next          int // for ids and nonces
	limit         int
	// endedBefore holds, by jobKey, the states a job ended with in a
	// history of the peer since discarded by a restore: the origin may
	// have seen that end, and an end is final on the origin.
	endedBefore map[string][]berth.RemoteJob
}

func (m *syncModel) tick() time.Time {
	m.now = m.now.Add(time.Second)
	return m.now
}

// apply is the origin's ApplyChanges: Reconcile, then the mirror, the
// lost handles and the cursor. It checks that a handle reported gone is of
// a job the peer does not know, or of one whose end the origin saw and
// forgot in a restore, and whose tombstone the peer has since pruned.
func (m *syncModel) apply(t *rapid.T, o *originModel, ch *berth.FederationChanges) {
	ups, gone := Reconcile(o.held(), ch)
	for _, u := range ups {
		o.mirror[hkey(u.Job.RemoteID, u.Job.Nonce)] = u.Job
	}
	for _, h := range gone {
		if pj, known := m.peer.jobs[jobKey(o.name, h.RemoteID, h.Nonce)]; known && !(pj.job.Tombstone && o.restored && !m.tombstoneStored(o.name, h)) {
			t.Fatalf("%s: %s reported gone while the peer has it %s (full %v, from %+v to %+v)",
				o.name, hkey(h.RemoteID, h.Nonce), pj.job.State, ch.Full, ch.From, ch.Cursor)
		}
		h.State = berth.HandoffLost
	}
	o.cursor = ch.Cursor
}

// tombstoneStored reports whether the peer still stores the tombstone of
// h's job.
func (m *syncModel) tombstoneStored(origin string, h *berth.Handoff) bool {
	return slices.ContainsFunc(m.peer.rows, func(r berth.ChangelogRow) bool {
		return r.Origin == origin && r.Job.RemoteID == h.RemoteID && r.Job.Nonce == h.Nonce && r.Job.Tombstone
	})
}

// drawActive draws one of the peer's jobs that have not ended, and skips
// the action when there is none.
func (m *syncModel) drawActive(t *rapid.T) *memJob {
	var active []string
	for k, j := range m.peer.jobs {
		if !j.job.Tombstone {
			active = append(active, k)
		}
	}
	if len(active) == 0 {
		t.Skip("no active job")
	}
	slices.Sort(active)
	return m.peer.jobs[rapid.SampledFrom(active).Draw(t, "job")]
}

// TestSyncProperty drives a peer and two origins through random
// interleavings of job changes on the peer, pulls whose answer is lost,
// pulls applied, prunes, restarts of the peer, and restores of the peer
// and of the origins from backups; once the faults stop and each origin pulls until nothing more
// follows, its mirror equals the peer's state of every job it holds, every
// job it holds that the peer does not know was reported gone (and none
// that the peer knows), and every end the peer recorded was seen.
func TestSyncProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		m := &syncModel{
			peer:          newMemPeer("E1"),
			origins:       []*originModel{{name: "a"}, {name: "x"}},
			originBackups: map[string][]*originModel{},
			now:           t0,
			limit:         rapid.IntRange(1, 4).Draw(rt, "limit"),
			endedBefore:   map[string][]berth.RemoteJob{},
		}
		for _, o := range m.origins {
			o.handles, o.mirror = map[string]*berth.Handoff{}, map[string]berth.RemoteJob{}
		}
		origin := rapid.SampledFrom(m.origins)
		rt.Repeat(map[string]func(*rapid.T){
			"handoff": func(rt *rapid.T) {
				o := origin.Draw(rt, "origin")
				m.next++
				remoteID := fmt.Sprintf("%s%d", o.name, m.next)
				var lost []string
				for _, k := range slices.Sorted(maps.Keys(o.handles)) {
					if h := o.handles[k]; h.State == berth.HandoffLost {
						lost = append(lost, h.RemoteID)
					}
				}
				if len(lost) > 0 && rapid.Bool().Draw(rt, "route a lost job again") {
					remoteID = rapid.SampledFrom(lost).Draw(rt, "lost job")
				}
				nonce := fmt.Sprintf("n%d", m.next)
				row := m.peer.write(o.name, berth.RemoteJob{RemoteID: remoteID, Nonce: nonce, JobID: fmt.Sprintf("b%d", m.next),
					State: berth.JobPending}, m.tick())
				k := hkey(remoteID, nonce)
				o.handles[k] = &berth.Handoff{JobID: remoteID, Incarnation: 1, Peer: "b", RemoteID: remoteID, Nonce: nonce,
					State: berth.HandoffDone, Sent: true, RemoteJobID: row.Job.JobID}
				if rapid.Bool().Draw(rt, "the acknowledgement names the creation row") { // not a duplicate's
					o.handles[k].CreateRow = cursorOf(m.peer, row)
				}
				o.mirror[k] = row.Job
				if ResyncNeeded(o.cursor, o.handles[k].CreateRow) {
					o.cursor = berth.ChangeCursor{}
				}
			},
			"change": func(rt *rapid.T) {
				j := m.drawActive(rt)
				next := j.job
				next.State = rapid.SampledFrom([]berth.JobState{berth.JobPending, berth.JobRunning}).Draw(rt, "state")
				next.Attempts++
				next.Reason = fmt.Sprintf("attempt %d", next.Attempts)
				m.peer.write(j.origin, next, m.tick())
			},
			"end": func(rt *rapid.T) {
				j := m.drawActive(rt)
				next := j.job
				next.State = rapid.SampledFrom([]berth.JobState{berth.JobSucceeded, berth.JobFailed, berth.JobCancelled}).Draw(rt, "end")
				next.Tombstone = true
				m.peer.write(j.origin, next, m.tick())
			},
			"pull, answer lost": func(rt *rapid.T) {
				o := origin.Draw(rt, "origin")
				if _, err := m.peer.answer(o.name, o.cursor, m.limit); err != nil {
					rt.Fatal(err)
				}
			},
			"pull": func(rt *rapid.T) {
				o := origin.Draw(rt, "origin")
				ch, err := m.peer.answer(o.name, o.cursor, m.limit)
				if err != nil {
					rt.Fatal(err)
				}
				m.apply(rt, o, ch)
			},
			"prune": func(rt *rapid.T) {
				o := origin.Draw(rt, "origin")
				retention := time.Duration(rapid.IntRange(0, 30).Draw(rt, "retention")) * time.Second
				m.peer.prune(o.name, m.now.Add(-retention))
			},
			"time passes": func(rt *rapid.T) {
				m.now = m.now.Add(time.Duration(rapid.IntRange(1, 20).Draw(rt, "seconds")) * time.Second)
			},
			"restart the peer": func(rt *rapid.T) {
				// The store's head is the highest seq stored.
				m.peer.head = 0
				if n := len(m.peer.rows); n > 0 {
					m.peer.head = m.peer.rows[n-1].Seq
				}
			},
			"back up the peer": func(rt *rapid.T) {
				m.peerBackups = append(m.peerBackups, m.peer.clone())
			},
			"restore the peer": func(rt *rapid.T) {
				if len(m.peerBackups) == 0 {
					rt.Skip("no backup")
				}
				for k, j := range m.peer.jobs {
					if j.job.Tombstone {
						m.endedBefore[k] = append(m.endedBefore[k], j.job)
					}
				}
				m.peer = rapid.SampledFrom(m.peerBackups).Draw(rt, "backup").clone()
			},
			"back up an origin": func(rt *rapid.T) {
				o := origin.Draw(rt, "origin")
				m.originBackups[o.name] = append(m.originBackups[o.name], o.clone())
			},
			"restore an origin": func(rt *rapid.T) {
				o := origin.Draw(rt, "origin")
				if len(m.originBackups[o.name]) == 0 {
					rt.Skip("no backup")
				}
				*o = *rapid.SampledFrom(m.originBackups[o.name]).Draw(rt, "backup").clone()
				o.restored = true
			},
		})
		m.converge(rt)
	})
}

// converge stops the faults: the peer goes on working (rows of a third
// origin) until its head passes every handle's creation row, then each
// origin pulls until nothing more follows; then it checks the property.
func (m *syncModel) converge(t *rapid.T) {
	var created uint64
	for _, o := range m.origins {
		for _, h := range o.held() {
			created = max(created, h.CreateRow.Seq)
		}
	}
	for m.peer.head < created {
		m.peer.write("z", berth.RemoteJob{RemoteID: "z", Nonce: "z", State: berth.JobRunning}, m.tick())
	}
	for _, o := range m.origins {
		for pulls := 0; ; pulls++ {
			if pulls > 1000 {
				t.Fatalf("%s: still more after %d pulls", o.name, pulls)
			}
			ch, err := m.peer.answer(o.name, o.cursor, m.limit)
			if err != nil {
				t.Fatal(err)
			}
			m.apply(t, o, ch)
			if !ch.More {
				break
			}
		}
		for _, k := range slices.Sorted(maps.Keys(o.handles)) {
			m.check(t, o, o.handles[k])
		}
	}
}

// check checks what o holds of h against the peer.
func (m *syncModel) check(t *rapid.T, o *originModel, h *berth.Handoff) {
	k := hkey(h.RemoteID, h.Nonce)
	pk := jobKey(o.name, h.RemoteID, h.Nonce)
	pj, known := m.peer.jobs[pk]
	mirror := o.mirror[k]
	switch {
	case h.State == berth.HandoffLost:
		// Reported gone; apply checked that the peer did not know it then.
	case mirror.Tombstone:
		// The origin saw the job end: final. The peer's state agrees, or
		// the end was in a history a restore discarded.
		if known && pj.job == mirror {
			return
		}
		if !slices.Contains(m.endedBefore[pk], mirror) {
			t.Fatalf("%s: %s ended %s on the origin; the peer has %+v (known %v) and never ended it so", o.name, k, mirror.State, pj, known)
		}
	case !known:
		t.Fatalf("%s: holds %s, which the peer does not know, and it was never reported gone", o.name, k)
	case pj.job != mirror:
		t.Fatalf("%s: mirror of %s is %+v; the peer has %+v", o.name, k, mirror, pj.job)
	}
}
