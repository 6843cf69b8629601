package store_test

import (
	"path/filepath"
	"testing"

	"github.com/berth-dev/berth/postgres"
	"github.com/berth-dev/berth/postgres/pgtest"
	"github.com/berth-dev/berth/sqlite"
	"github.com/berth-dev/berth/store"
)

// drivers open a new, empty store of each driver, closed when t ends.
// PostgreSQL's needs TEST_DATABASE_URL (see pgtest).
var drivers = []struct {
	name string
	open func(t testing.TB) store.Store
}{
	{"sqlite", func(t testing.TB) store.Store {
		s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "berth.db"))
		return opened(t, s, err)
	}},
	{"postgres", func(t testing.TB) store.Store {
		s, err := postgres.Open(t.Context(), pgtest.NewDatabase(t))
		return opened(t, s, err)
	}},
}

// opened fails t if err, the error of opening s, is not nil, and closes s
// when t ends.
func opened(t testing.TB, s store.Store, err error) store.Store {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// onEachDriver runs test as a parallel subtest of t for each driver, with
// a function that opens a new, empty store of it.
func onEachDriver(t *testing.T, test func(t *testing.T, open func(t *testing.T) store.Store)) {
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			test(t, func(t *testing.T) store.Store { return d.open(t) })
		})
	}
}
