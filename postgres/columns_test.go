package postgres

import (
	"bytes"
	"reflect"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
)

// arrayParam finds the parameters of an unnest: $N::TYPE[].
var arrayParam = regexp.MustCompile(`\$(\d+)::([a-z ]+)\[\]`)

// pgArrayName is pgx's name of each column type's array.
var pgArrayName = map[string]string{"text": "_text", "json": "_json", "integer": "_int4", "bigint": "_int8",
	"double precision": "_float8", "boolean": "_bool", "bytea": "_bytea", "timestamptz": "_timestamptz"}

// TestTypedColumnsEncodeAsAny holds the typed columns a batch's arrays are
// sent as to the bytes pgx sends for the same values as []any, column by
// column, in columns holding NULLs, text PostgreSQL cannot hold, and
// integers of both widths; and checks that the text and integer columns
// of a job's path do go typed.
func TestTypedColumnsEncodeAsAny(t *testing.T) {
	var ids berth.IDGen
	now := time.Unix(1_700_000_000, 123).UTC()
	exit, idx := 3, 7
	b := &store.Batch{
		Jobs: []*berth.Job{
			{ID: ids.New(now), JobSpec: berth.JobSpec{Queue: "gpu", Name: "bad \xff\x00", Command: []string{"true"}}, State: berth.JobPending, CreatedAt: now},
			{ID: ids.New(now), JobSpec: berth.JobSpec{Queue: "q"}, ArrayIndex: &idx, State: berth.JobPending, CreatedAt: now, Attempts: 2},
		},
		JobUpdates: []store.JobUpdate{
			{ID: "j1", State: berth.JobSucceeded, ExitCode: &exit, Attempts: 1, StartedAt: now, FinishedAt: now},
			{ID: "j2", State: berth.JobRunning, Reason: "é"[:1], Attempts: 1 << 30, StartedAt: now},
		},
		Attempts: []*berth.Attempt{
			{ID: "a1", JobID: "j1", WorkerID: "w", Host: "h", GPUs: []int{0, 3}, State: berth.AttemptSucceeded, ExitCode: &exit, CreatedAt: now},
			{ID: "a2", JobID: "j2", WorkerID: "w", Host: "h", State: berth.AttemptRunning, CreatedAt: now, Port: 29500},
		},
		Progress: []store.AttemptProgress{{AttemptID: "a1", Progress: "0.5"}, {AttemptID: "a2", Progress: "\x00"}},
	}
	stmts, err := planBatch(b)
	if err != nil {
		t.Fatal(err)
	}
	m := pgtype.NewMap()
	typed := map[string]int{}
	for _, st := range stmts {
		params := arrayParam.FindAllStringSubmatch(st.query, -1)
		if len(params) == 0 {
			continue
		}
		if len(params) != len(st.args) {
			t.Fatalf("%s: %d array parameters, %d arguments", st.what, len(params), len(st.args))
		}
		for c, arg := range st.args {
			typ, ok := m.TypeForName(pgArrayName[params[c][2]])
			if !ok {
				t.Fatalf("%s: no pgx type for %s[]", st.what, params[c][2])
			}
			v := reflect.ValueOf(arg)
			asAny := make([]any, v.Len())
			for i := range asAny {
				asAny[i] = v.Index(i).Interface()
			}
			if _, isAny := arg.([]any); !isAny {
				typed[st.what+" "+params[c][2]]++
			}
			got, gerr := m.Encode(typ.OID, pgtype.BinaryFormatCode, arg, nil)
			want, werr := m.Encode(typ.OID, pgtype.BinaryFormatCode, asAny, nil)
			if (gerr == nil) != (werr == nil) || !bytes.Equal(got, want) {
				t.Errorf("%s column %d (%s[], %T): %x, %v; as []any %x, %v", st.what, c+1, params[c][2], arg, got, gerr, want, werr)
			}
		}
	}
	for _, w := range []string{"update jobs text", "update jobs integer", "update jobs bigint", "upsert attempts text", "insert jobs text"} {
		if typed[w] == 0 {
			t.Errorf("no %s column sent typed (typed: %v)", w, typed)
		}
	}
}
