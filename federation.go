package berth

import "time"

// Federation: a cluster (the origin) hands whole root jobs to a federation
// peer, another Berth server with its own store, scheduler and workers,
// and mirrors their progress back (docs/federation.md). These are the
// domain types of both sides and the bodies of the peer protocol.

// Peer is a federation peer as the origin stores it: where it is and the
// credential that reaches it. Peers are managed through /api/v1/peers.
type Peer struct {
	Name          string `json:"name"`
	URL           string `json:"url"`                      // https://host:port of the peer's API
	CAFingerprint string `json:"ca_fingerprint,omitempty"` // sha256:… of the peer's CA or certificate, pinned
	// Token is the peer credential (a token of role peer minted on the
	// peer): accepted on PUT, never returned; stored sealed (SealedToken).
	Token       string `json:"token,omitempty"`
	SealedToken []byte `json:"-"`
	// RouteTimeout is how long the peer may go unheard before no new
	// work is routed to it (default DefaultRouteTimeout).
	RouteTimeout Duration `json:"route_timeout,omitempty"`
	// LostTimeout is how long the peer may go unheard before its jobs are
	// declared lost and, with retries left, routed again (default
	// DefaultLostTimeout).
	LostTimeout Duration  `json:"lost_timeout,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// Default peer timeouts.
const (
	DefaultRouteTimeout = time.Minute
	DefaultLostTimeout  = time.Hour
)

// PeerState is what the origin knows of a peer's reachability.
type PeerState string

// Peer states.
const (
	PeerNew         PeerState = "new"         // not yet heard from
	PeerReady       PeerState = "ready"       // heard from within its route timeout
	PeerUnreachable PeerState = "unreachable" // unheard past its route timeout: no new work routed
	PeerLost        PeerState = "lost"        // unheard past its lost timeout: its jobs declared lost
)

// PeerStatus is the origin's live view of a peer, kept in memory by the
// federation manager and shown by GET /api/v1/peers and berth peers.
type PeerStatus struct {
	State       PeerState `json:"state"`
	LastContact time.Time `json:"last_contact,omitzero"` // last answer of any kind
	LastSync    time.Time `json:"last_sync,omitzero"`    // last changes pull applied
	// Lag is how far the mirror is behind: the time since the oldest
	// change the peer has that the origin has not yet applied, or zero
	// when caught up.
	Lag        Duration      `json:"lag"`
	Capacity   *PeerCapacity `json:"capacity,omitempty"` // the last capability heartbeat
	ActiveJobs int           `json:"active_jobs"`        // jobs handed to it and not ended
	LastError  string        `json:"last_error,omitempty"`
}

// PeerInfo is a peer and its live status: an element of GET /api/v1/peers.
type PeerInfo struct {
	*Peer
	Status PeerStatus `json:"status"`
}

// PeerCapacity is a peer's capability heartbeat: the shape and current
// load of each of its workers (GET /api/v1/federation/capacity).
type PeerCapacity struct {
	Workers []PeerWorker `json:"workers"`
	At      time.Time    `json:"at"`
}

// PeerWorker is one worker of a peer as routing sees it: its totals, what
// is free now, and what it serves.
type PeerWorker struct {
	Queues   []string          `json:"queues,omitempty"` // empty: every queue
	Labels   map[string]string `json:"labels,omitempty"`
	GPUs     []GPU             `json:"gpus,omitempty"`
	FreeGPUs int               `json:"free_gpus"`
	CPUs     float64           `json:"cpus"`
	Memory   Bytes             `json:"memory"`
	Off      bool              `json:"off,omitempty"` // takes no new work now (parked, disconnected)
}

// HandoffState is where the delivery of a job to a peer stands.
type HandoffState string

// Handoff states. A handle is persisted pending_handoff before it is
// first sent; handed_off once the peer acknowledged it; rejected when the
// peer refused it for a reason that cannot change (invalid, forbidden, a
// quota rule); lost when the peer went unheard past its lost timeout or
// no longer knows the job.
const (
	HandoffPending   HandoffState = "pending_handoff"
	HandoffDone      HandoffState = "handed_off"
	HandoffRejected  HandoffState = "rejected"
	HandoffLost      HandoffState = "lost"
	HandoffCancelled HandoffState = "cancelled" // cancelled before it was ever sent: never delivered
)

// Handoff is the origin's durable handle on one incarnation of a job
// handed to a peer. (Job, Incarnation) is its key; a job routed again
// after a loss gets the next incarnation and a new nonce.
type Handoff struct {
	JobID       string       `json:"job_id"`
	Incarnation int          `json:"incarnation"` // 1 for the first handoff of the job
	Peer        string       `json:"peer"`
	RemoteID    string       `json:"remote_id"` // the id the peer deduplicates on with Nonce: the origin's job id
	Nonce       string       `json:"nonce"`     // random, new for each incarnation
	State       HandoffState `json:"state"`
	RemoteJobID string       `json:"remote_job_id,omitempty"` // the peer's id of the job, once acknowledged
	Sent        bool         `json:"sent"`                    // sent at least once: a cancel must be delivered
	// CancelVersion is bumped by each cancel; CancelAcked is the highest
	// version the peer acknowledged (or answered not found, or reported
	// the job ended). A cancel is re-sent while CancelAcked < CancelVersion.
	CancelVersion int       `json:"cancel_version,omitempty"`
	CancelAcked   int       `json:"cancel_acked,omitempty"`
	LastError     string    `json:"last_error,omitempty"` // why the last delivery failed, or why rejected
	CreatedAt     time.Time `json:"created_at"`
	UpdatedAt     time.Time `json:"updated_at"`
	// CreateRow is the peer's changelog row that recorded the job's
	// creation (HandoffResponse.CreateRow), zero when unknown: once the
	// origin's mirror has passed it without a row of the job, the peer no
	// longer knows the job (it was restored from an older backup).
	CreateRow ChangeCursor `json:"create_row,omitzero"`
	// Pinned says the job was pinned to Peer at submit (--cluster): when
	// the handle is lost, the job is handed to Peer again, not routed.
	Pinned bool `json:"pinned,omitempty"`
}

// JobOrigin marks a job this cluster received from a federation peer:
// the origin's name as this cluster knows it (the peer token's name), the
// id the origin knows the job by and the incarnation's nonce. Only the
// handoff endpoint sets it; a submission that carries it is refused.
type JobOrigin struct {
	Cluster  string `json:"cluster"`
	RemoteID string `json:"remote_id"`
	Nonce    string `json:"nonce"`
}

// HandoffRequest is the body of POST /api/v1/federation/handoffs: one
// root job an origin hands to this cluster. The peer deduplicates on
// (origin, RemoteID, Nonce): a repeat returns the job the first created.
type HandoffRequest struct {
	RemoteID string  `json:"remote_id"`
	Nonce    string  `json:"nonce"`
	Job      JobSpec `json:"job"` // the spec the origin accepted; its user, cluster and parent are not honoured
}

// HandoffResponse acknowledges a handoff.
type HandoffResponse struct {
	JobID     string   `json:"job_id"`    // the peer's id of the job
	State     JobState `json:"state"`     // its state now
	Duplicate bool     `json:"duplicate"` // an earlier delivery of the same handoff created it
	// CreateRow is the changelog row that recorded the job's creation; it
	// may be zero on a duplicate (the row since pruned, or not looked up).
	CreateRow ChangeCursor `json:"create_row,omitzero"`
}

// FederationCancel is the body of POST /api/v1/federation/cancels: cancel
// the job received as (RemoteID, Nonce). Version is echoed back. A job the
// peer does not know answers 404, which satisfies the cancel.
type FederationCancel struct {
	RemoteID string `json:"remote_id"`
	Nonce    string `json:"nonce"`
	Version  int    `json:"version"`
}

// FederationCancelResponse acknowledges a cancel.
type FederationCancelResponse struct {
	Version int      `json:"version"`
	State   JobState `json:"state"` // the job's state after the cancel
}

// ChangeCursor is where an origin's mirror of a peer stands: the peer's
// store epoch (new with each database), the seq of the last changelog row
// applied and that row's tag, so that a peer restored from a backup, whose
// rows at that seq differ, cannot rewind the cursor silently. The zero
// cursor asks for a full resync. It travels as "EPOCH.SEQ.TAG".
type ChangeCursor struct {
	Epoch string `json:"epoch"`
	Seq   uint64 `json:"seq"`
	Tag   string `json:"tag"`
}

// RemoteJob is a received job's state as its peer reports it to the
// origin: a changelog row, or a member of a full resync.
type RemoteJob struct {
	RemoteID   string    `json:"remote_id"`
	Nonce      string    `json:"nonce"`
	JobID      string    `json:"job_id"` // the peer's id
	State      JobState  `json:"state"`
	Reason     string    `json:"reason,omitempty"` // why it waits, or why it ended
	ExitCode   *int      `json:"exit_code,omitempty"`
	Attempts   int       `json:"attempts"`
	StartedAt  time.Time `json:"started_at,omitzero"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
	// Tombstone marks the job's last row: it ended. A tombstone stays in
	// the peer's changelog until the origin has acknowledged it.
	Tombstone bool      `json:"tombstone,omitempty"`
	At        time.Time `json:"at"` // when the peer wrote the row
}

// FederationChanges is the answer to GET /api/v1/federation/changes?cursor=C:
// the changes to the caller's received jobs after C, oldest first, or,
// when C is stale (another epoch, a seq the peer no longer holds or never
// had, a tag that differs), Full: every active received job of the caller
// and every tombstone it has not acknowledged, which replace the caller's
// mirror. Cursor is where the caller stands once it applied Jobs; More
// says that more changes follow it.
type FederationChanges struct {
	Full   bool         `json:"full"`
	Jobs   []RemoteJob  `json:"jobs"`
	Cursor ChangeCursor `json:"cursor"`
	More   bool         `json:"more,omitempty"`
	// From is the cursor an incremental answer continues from (the one
	// the caller pulled with): Jobs are every change of the caller's jobs
	// in (From, Cursor]. Zero on a full answer.
	From ChangeCursor `json:"from,omitzero"`
}

// ChangelogRow is a row of a peer's append-only changelog: a change to a
// job received from Origin, written in the same transaction as the change.
type ChangelogRow struct {
	Seq    uint64    `json:"seq"`
	Tag    string    `json:"tag"`
	Origin string    `json:"origin"`
	Job    RemoteJob `json:"job"`
}
