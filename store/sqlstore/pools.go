package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
)

// CloudPools implements store.PoolStore (cloud pools, their instances and
// the host records) over a Reader's queries and a driver's ExecFunc;
// drivers embed it. Each write is one statement in a transaction of its
// own. Its methods are safe for concurrent use when the driver's functions
// are.
type CloudPools struct {
	r    *Reader
	exec ExecFunc
}

// NewCloudPools returns CloudPools reading through r and writing with exec.
func NewCloudPools(r *Reader, exec ExecFunc) *CloudPools { return &CloudPools{r: r, exec: exec} }

// sql rewrites the "?" placeholders of query into the dialect's.
func (c *CloudPools) sql(query string) string { return c.r.dialect.rewrite(query) }

const (
	poolColumns = `name, provider, gpu_type, gpus, max_instances, max_price, idle_timeout, strictness, image, url,
		queues, labels, preserve_on_failure, sealed_api_key, created_at, updated_at, workload, model, max_model_len, port`
	instanceColumns = `id, pool, provider_id, offer_id, machine_id, gpu_name, gpus, price_per_h, phase, failure, last_error,
		worker_host, ssh_addr, timeline, probes, created_at, ready_at, idle_since, ended_at, host_key, endpoint`
	hostColumns = `provider, machine_id, gpu_name, driver, successes, failures, last_seen, last_failure,
		quarantined_until, blocked`
)

// Upserts end an INSERT INTO pools, instances or host_records: on a
// conflict they set every column but the key from the row inserted.
const (
	poolUpsert = ` ON CONFLICT (name) DO UPDATE SET provider = excluded.provider, gpu_type = excluded.gpu_type,
		gpus = excluded.gpus, max_instances = excluded.max_instances, max_price = excluded.max_price,
		idle_timeout = excluded.idle_timeout, strictness = excluded.strictness, image = excluded.image, url = excluded.url,
		queues = excluded.queues, labels = excluded.labels, preserve_on_failure = excluded.preserve_on_failure,
		sealed_api_key = excluded.sealed_api_key, created_at = excluded.created_at, updated_at = excluded.updated_at,
		workload = excluded.workload, model = excluded.model, max_model_len = excluded.max_model_len, port = excluded.port`
	instanceUpsert = ` ON CONFLICT (id) DO UPDATE SET pool = excluded.pool, provider_id = excluded.provider_id,
		offer_id = excluded.offer_id, machine_id = excluded.machine_id, gpu_name = excluded.gpu_name, gpus = excluded.gpus,
		price_per_h = excluded.price_per_h, phase = excluded.phase, failure = excluded.failure,
		last_error = excluded.last_error, worker_host = excluded.worker_host, ssh_addr = excluded.ssh_addr,
		timeline = excluded.timeline, probes = excluded.probes, created_at = excluded.created_at,
		ready_at = excluded.ready_at, idle_since = excluded.idle_since, ended_at = excluded.ended_at,
		host_key = excluded.host_key, endpoint = excluded.endpoint`
	hostUpsert = ` ON CONFLICT (provider, machine_id) DO UPDATE SET gpu_name = excluded.gpu_name, driver = excluded.driver,
		successes = excluded.successes, failures = excluded.failures, last_seen = excluded.last_seen,
		last_failure = excluded.last_failure, quarantined_until = excluded.quarantined_until, blocked = excluded.blocked`
)

// listJSON encodes a list column: an empty list is [].
func listJSON[T any](vs []T) (string, error) {
	if len(vs) == 0 {
		return "[]", nil
	}
	b, err := json.Marshal(vs)
	return string(b), err
}

// mapJSON encodes a map column: an empty map is {}.
func mapJSON[V any](m map[string]V) (string, error) {
	if len(m) == 0 {
		return "{}", nil
	}
	b, err := json.Marshal(m)
	return string(b), err
}

// PutPool creates or replaces pool p (by name), with its SealedAPIKey (its
// APIKey is not stored); an empty name is ECodeInvalid.
func (c *CloudPools) PutPool(ctx context.Context, p *berth.Pool) error {
	if p.Name == "" {
		return berth.Invalidf("name", "a pool needs a name")
	}
	queues, err := listJSON(p.Queues)
	if err != nil {
		return fmt.Errorf("put pool %s: queues: %w", p.Name, err)
	}
	labels, err := mapJSON(p.Labels)
	if err != nil {
		return fmt.Errorf("put pool %s: labels: %w", p.Name, err)
	}
	if _, err := c.exec(ctx, c.sql(`INSERT INTO pools (`+poolColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`+poolUpsert),
		p.Name, p.Provider, p.GPUType, p.GPUs, p.MaxInstances, p.MaxPrice, int64(p.IdleTimeout), string(p.Strictness),
		p.Image, p.URL, queues, labels, p.PreserveOnFailure, p.SealedAPIKey, nanos(p.CreatedAt), nanos(p.UpdatedAt),
		p.Workload, p.Model, p.MaxModelLen, p.Port); err != nil {
		return fmt.Errorf("put pool %s: %w", p.Name, err)
	}
	return nil
}

// Pools returns every pool, by name, with its SealedAPIKey.
func (c *CloudPools) Pools(ctx context.Context) ([]*berth.Pool, error) {
	ps, err := collect(ctx, c.r, scanPool, `SELECT `+poolColumns+` FROM pools ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list pools: %w", err)
	}
	return ps, nil
}

func scanPool(row scanner) (*berth.Pool, error) {
	var (
		p                berth.Pool
		idle             int64
		strictness       string
		queues, labels   string
		created, updated int64
	)
	if err := row.Scan(&p.Name, &p.Provider, &p.GPUType, &p.GPUs, &p.MaxInstances, &p.MaxPrice, &idle, &strictness,
		&p.Image, &p.URL, &queues, &labels, &p.PreserveOnFailure, &p.SealedAPIKey, &created, &updated,
		&p.Workload, &p.Model, &p.MaxModelLen, &p.Port); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(queues), &p.Queues); err != nil {
		return nil, fmt.Errorf("pool %s: queues: %w", p.Name, err)
	}
	if err := json.Unmarshal([]byte(labels), &p.Labels); err != nil {
		return nil, fmt.Errorf("pool %s: labels: %w", p.Name, err)
	}
	if len(p.Queues) == 0 {
		p.Queues = nil
	}
	if len(p.Labels) == 0 {
		p.Labels = nil
	}
	p.IdleTimeout, p.Strictness = berth.Duration(idle), berth.Strictness(strictness)
	p.CreatedAt, p.UpdatedAt = fromNanos(created), fromNanos(updated)
	return &p, nil
}

// DeletePool deletes pool name; an unknown name is ECodeNotFound. Its
// instances' records stay.
func (c *CloudPools) DeletePool(ctx context.Context, name string) error {
	n, err := c.exec(ctx, c.sql(`DELETE FROM pools WHERE name = ?`), name)
	if err != nil {
		return fmt.Errorf("delete pool %s: %w", name, err)
	}
	if n == 0 {
		return &berth.Error{Code: berth.ECodeNotFound, Field: "name", Message: fmt.Sprintf("no pool %s", name)}
	}
	return nil
}

// PutInstance creates or replaces instance i (by ID), timeline and probes
// included; an empty ID is ECodeInvalid.
func (c *CloudPools) PutInstance(ctx context.Context, i *berth.Instance) error {
	if i.ID == "" {
		return berth.Invalidf("id", "an instance needs an id")
	}
	timeline, err := listJSON(i.Timeline)
	if err != nil {
		return fmt.Errorf("put instance %s: timeline: %w", i.ID, err)
	}
	probes, err := listJSON(i.Probes)
	if err != nil {
		return fmt.Errorf("put instance %s: probes: %w", i.ID, err)
	}
	if _, err := c.exec(ctx, c.sql(`INSERT INTO instances (`+instanceColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`+instanceUpsert),
		i.ID, i.Pool, i.ProviderID, i.OfferID, i.MachineID, i.GPUName, i.GPUs, i.PricePerH, string(i.Phase), i.Failure,
		i.LastError, i.WorkerHost, i.SSHAddr, timeline, probes, nanos(i.CreatedAt), nanos(i.ReadyAt), nanos(i.IdleSince),
		nanos(i.EndedAt), i.HostKey, i.Endpoint); err != nil {
		return fmt.Errorf("put instance %s: %w", i.ID, err)
	}
	return nil
}

// Instance returns instance id; an unknown id is ECodeNotFound.
func (c *CloudPools) Instance(ctx context.Context, id string) (*berth.Instance, error) {
	is, err := collect(ctx, c.r, scanInstance, c.sql(`SELECT `+instanceColumns+` FROM instances WHERE id = ?`), id)
	if err != nil {
		return nil, fmt.Errorf("instance %s: %w", id, err)
	}
	if len(is) == 0 {
		return nil, &berth.Error{Code: berth.ECodeNotFound, Field: "id", Message: fmt.Sprintf("no instance %s", id)}
	}
	return is[0], nil
}

// Instances returns the instances f selects, oldest first.
func (c *CloudPools) Instances(ctx context.Context, f store.InstanceFilter) ([]*berth.Instance, error) {
	var where []string
	var args []any
	if f.Pool != "" {
		where, args = append(where, `pool = ?`), append(args, f.Pool)
	}
	if f.Live {
		where, args = append(where, `phase <> ?`), append(args, string(berth.InstanceDestroyed))
	}
	query := `SELECT ` + instanceColumns + ` FROM instances`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, ` AND `)
	}
	is, err := collect(ctx, c.r, scanInstance, c.sql(query+` ORDER BY created_at, id`), args...)
	if err != nil {
		return nil, fmt.Errorf("list instances: %w", err)
	}
	return is, nil
}

func scanInstance(row scanner) (*berth.Instance, error) {
	var (
		i                         berth.Instance
		phase, timeline, probes   string
		created, ready, idle, end int64
	)
	if err := row.Scan(&i.ID, &i.Pool, &i.ProviderID, &i.OfferID, &i.MachineID, &i.GPUName, &i.GPUs, &i.PricePerH, &phase,
		&i.Failure, &i.LastError, &i.WorkerHost, &i.SSHAddr, &timeline, &probes, &created, &ready, &idle, &end, &i.HostKey,
		&i.Endpoint); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(timeline), &i.Timeline); err != nil {
		return nil, fmt.Errorf("instance %s: timeline: %w", i.ID, err)
	}
	if err := json.Unmarshal([]byte(probes), &i.Probes); err != nil {
		return nil, fmt.Errorf("instance %s: probes: %w", i.ID, err)
	}
	if len(i.Timeline) == 0 {
		i.Timeline = nil
	}
	for k := range i.Timeline {
		i.Timeline[k].At = i.Timeline[k].At.UTC()
	}
	if len(i.Probes) == 0 {
		i.Probes = nil
	}
	for k := range i.Probes {
		i.Probes[k].At = i.Probes[k].At.UTC()
	}
	i.Phase = berth.InstancePhase(phase)
	i.CreatedAt, i.ReadyAt, i.IdleSince, i.EndedAt = fromNanos(created), fromNanos(ready), fromNanos(idle), fromNanos(end)
	return &i, nil
}

// PutHost creates or replaces the record of (h.Provider, h.MachineID); an
// empty provider is ECodeInvalid.
func (c *CloudPools) PutHost(ctx context.Context, h *berth.HostRecord) error {
	if h.Provider == "" {
		return berth.Invalidf("provider", "a host record needs a provider")
	}
	failures, err := mapJSON(h.Failures)
	if err != nil {
		return fmt.Errorf("put host %s/%d: failures: %w", h.Provider, h.MachineID, err)
	}
	if _, err := c.exec(ctx, c.sql(`INSERT INTO host_records (`+hostColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`+hostUpsert),
		h.Provider, h.MachineID, h.GPUName, h.Driver, h.Successes, failures, nanos(h.LastSeen), h.LastFailure,
		nanos(h.QuarantinedUntil), h.Blocked); err != nil {
		return fmt.Errorf("put host %s/%d: %w", h.Provider, h.MachineID, err)
	}
	return nil
}

// Hosts returns provider's host records, by machine id.
func (c *CloudPools) Hosts(ctx context.Context, provider string) ([]*berth.HostRecord, error) {
	hs, err := collect(ctx, c.r, scanHost, c.sql(`SELECT `+hostColumns+` FROM host_records WHERE provider = ? ORDER BY machine_id`), provider)
	if err != nil {
		return nil, fmt.Errorf("host records of %s: %w", provider, err)
	}
	return hs, nil
}

func scanHost(row scanner) (*berth.HostRecord, error) {
	var (
		h                 berth.HostRecord
		failures          string
		seen, quarantined int64
	)
	if err := row.Scan(&h.Provider, &h.MachineID, &h.GPUName, &h.Driver, &h.Successes, &failures, &seen, &h.LastFailure,
		&quarantined, &h.Blocked); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(failures), &h.Failures); err != nil {
		return nil, fmt.Errorf("host %s/%d: failures: %w", h.Provider, h.MachineID, err)
	}
	if len(h.Failures) == 0 {
		h.Failures = nil
	}
	h.LastSeen, h.QuarantinedUntil = fromNanos(seen), fromNanos(quarantined)
	return &h, nil
}

// DeleteHosts deletes every host record of provider and returns how many
// it deleted.
func (c *CloudPools) DeleteHosts(ctx context.Context, provider string) (int, error) {
	n, err := c.exec(ctx, c.sql(`DELETE FROM host_records WHERE provider = ?`), provider)
	if err != nil {
		return 0, fmt.Errorf("delete host records of %s: %w", provider, err)
	}
	return int(n), nil
}
