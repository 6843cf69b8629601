package berth

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Quota scopes: what a rule's Name is matched against.
const (
	QuotaUser     = "user"     // the job's user
	QuotaQueue    = "queue"    // the job's queue
	QuotaTemplate = "template" // the job's template
)

// NoLimit in a QuotaRule's MaxGPUs or MaxJobs means that resource is not capped.
const NoLimit = -1

// QuotaRule caps what the running jobs of one user, queue or template may
// hold at once, and (for users) weighs their fair share. Its ID is
// "SCOPE:NAME", e.g. "user:alice".
type QuotaRule struct {
	Scope     string    `json:"scope"`
	Name      string    `json:"name"`
	MaxGPUs   int       `json:"max_gpus"`         // NoLimit or ≥ 0
	MaxJobs   int       `json:"max_jobs"`         // NoLimit or ≥ 0
	Weight    float64   `json:"weight,omitempty"` // fair-share weight of a user; 0 means 1
	UpdatedAt time.Time `json:"updated_at,omitzero"`
}

// DefaultQuotaRule returns a rule that caps nothing; decode input over it.
func DefaultQuotaRule() QuotaRule { return QuotaRule{MaxGPUs: NoLimit, MaxJobs: NoLimit} }

// ID returns "SCOPE:NAME".
func (q *QuotaRule) ID() string { return q.Scope + ":" + q.Name }

// Limits describes the caps, e.g. "gpus<=8 jobs<=4 weight=2".
func (q *QuotaRule) Limits() string {
	var parts []string
	if q.MaxGPUs != NoLimit {
		parts = append(parts, fmt.Sprintf("gpus<=%d", q.MaxGPUs))
	}
	if q.MaxJobs != NoLimit {
		parts = append(parts, fmt.Sprintf("jobs<=%d", q.MaxJobs))
	}
	if q.Weight != 0 {
		parts = append(parts, "weight="+strconv.FormatFloat(q.Weight, 'g', -1, 64))
	}
	return strings.Join(parts, " ")
}

var quotaNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$`)

// MaxQuotaValue bounds MaxGPUs and MaxJobs.
const MaxQuotaValue = 1_000_000

// Validate checks every field and returns an ECodeInvalid *Error naming the
// first that breaks a rule.
func (q *QuotaRule) Validate() error {
	switch q.Scope {
	case QuotaUser, QuotaQueue, QuotaTemplate:
	default:
		return Invalidf("scope", "%q is not a quota scope (user, queue, template)", q.Scope)
	}
	if !quotaNameRe.MatchString(q.Name) {
		return Invalidf("name", "must be 1-128 letters, digits, '.', '_', '@' or '-', starting with a letter or digit")
	}
	if q.MaxGPUs < NoLimit || q.MaxGPUs > MaxQuotaValue {
		return Invalidf("max_gpus", "must be -1 (no limit) or between 0 and %d", MaxQuotaValue)
	}
	if q.MaxJobs < NoLimit || q.MaxJobs > MaxQuotaValue {
		return Invalidf("max_jobs", "must be -1 (no limit) or between 0 and %d", MaxQuotaValue)
	}
	if q.Weight < 0 || q.Weight > 1000 || q.Weight != q.Weight {
		return Invalidf("weight", "must be between 0 (default 1) and 1000")
	}
	if q.Weight != 0 && q.Scope != QuotaUser {
		return Invalidf("weight", "only user rules carry a fair-share weight")
	}
	if q.MaxGPUs == NoLimit && q.MaxJobs == NoLimit && q.Weight == 0 {
		return Invalidf("max_gpus", "a rule must set max_gpus, max_jobs or weight")
	}
	return nil
}

// ParseQuotaID splits "SCOPE:NAME" and checks both parts. A malformed id
// returns an ECodeInvalid *Error naming "id", a bad part one naming "scope"
// or "name".
func ParseQuotaID(id string) (scope, name string, err error) {
	scope, name, ok := strings.Cut(id, ":")
	if !ok {
		return "", "", Invalidf("id", "%q is not SCOPE:NAME (e.g. user:alice, queue:gpu, template:jupyter)", id)
	}
	q := QuotaRule{Scope: scope, Name: name, MaxGPUs: 0, MaxJobs: NoLimit}
	if err := q.Validate(); err != nil {
		return "", "", err
	}
	return scope, name, nil
}

// ParseQuotaRule parses the CLI form: an id and limits such as
// "user:alice", "gpus<=8", "jobs<=4", "weight=2". Limits not given are
// NoLimit (weight 0). It returns an ECodeInvalid *Error naming the JSON
// field ("max_gpus", "max_jobs", "weight") of a bad limit, "limits" for one
// that is none of the three forms, and Validate's errors.
func ParseQuotaRule(id string, limits []string) (QuotaRule, error) {
	q := DefaultQuotaRule()
	var err error
	if q.Scope, q.Name, err = ParseQuotaID(id); err != nil {
		return q, err
	}
	seen := map[string]bool{}
	for _, l := range limits {
		var field, val string
		if k, v, ok := strings.Cut(l, "<="); ok && (k == "gpus" || k == "jobs") {
			field, val = "max_"+k, v
		} else if k, v, ok := strings.Cut(l, "="); ok && k == "weight" {
			field, val = "weight", v
		} else {
			return q, Invalidf("limits", "%q is not gpus<=N, jobs<=N or weight=W", l)
		}
		if seen[field] {
			return q, Invalidf(field, "%q: given twice", l)
		}
		seen[field] = true
		if field == "weight" {
			w, err := strconv.ParseFloat(val, 64)
			if err != nil {
				return q, Invalidf(field, "%q is not a number", val)
			}
			q.Weight = w
			continue
		}
		n, err := strconv.Atoi(val)
		if err != nil || n < 0 {
			return q, Invalidf(field, "%q is not a whole number ≥ 0", val)
		}
		if field == "max_gpus" {
			q.MaxGPUs = n
		} else {
			q.MaxJobs = n
		}
	}
	return q, q.Validate()
}
