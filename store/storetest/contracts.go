package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
)

// contractTests check store.ContractStore.
var contractTests = []test{
	{"Contracts", testContracts},
}

func testContracts(t *testing.T, s store.Store) {
	ctx := context.Background()
	if cs, err := s.Contracts(ctx); err != nil || len(cs) != 0 {
		t.Fatalf("Contracts of a new store = %v, %v; want none", cs, err)
	}
	a := &berth.ContractRecord{Name: "book-extract", Source: "name: book-extract\nprompt: |\n  ünï {{.Inputs.x}}\n",
		CreatedBy: "alice", CreatedAt: base, UpdatedAt: base}
	b := &berth.ContractRecord{Name: "a-first", Source: `{"name":"a-first"}`, CreatedBy: "bob",
		CreatedAt: base.Add(time.Second), UpdatedAt: base.Add(time.Second)}
	for _, c := range []*berth.ContractRecord{a, b} {
		if err := s.CreateContract(ctx, c); err != nil {
			t.Fatalf("CreateContract(%s): %v", c.Name, err)
		}
	}
	got, err := s.Contracts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkEqual(t, "Contracts, by name, every field kept", got, []*berth.ContractRecord{b, a})

	dup := *a
	dup.Source = "other"
	if err := s.CreateContract(ctx, &dup); berth.ErrorCode(err) != berth.ECodeConflict {
		t.Fatalf("CreateContract of a name already stored = %v; want conflict", err)
	}
	one, err := s.Contract(ctx, a.Name)
	if err != nil {
		t.Fatal(err)
	}
	checkEqual(t, "Contract after a refused create", one, a)

	// A replace changes the source and update time, keeping who made it
	// and when.
	repl := &berth.ContractRecord{Name: a.Name, Source: "replaced", CreatedBy: "mallory", CreatedAt: base.Add(time.Hour),
		UpdatedAt: base.Add(time.Minute)}
	if err := s.ReplaceContract(ctx, repl); err != nil {
		t.Fatal(err)
	}
	want := *a
	want.Source, want.UpdatedAt = "replaced", base.Add(time.Minute)
	one, err = s.Contract(ctx, a.Name)
	if err != nil {
		t.Fatal(err)
	}
	checkEqual(t, "Contract after ReplaceContract", one, &want)
	if err := s.ReplaceContract(ctx, &berth.ContractRecord{Name: "nope", Source: "x"}); berth.ErrorCode(err) != berth.ECodeNotFound {
		t.Errorf("ReplaceContract of an unknown name = %v; want not found", err)
	}

	if err := s.DeleteContract(ctx, b.Name); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteContract(ctx, b.Name); berth.ErrorCode(err) != berth.ECodeNotFound {
		t.Errorf("second DeleteContract = %v; want not found", err)
	}
	if _, err := s.Contract(ctx, b.Name); berth.ErrorCode(err) != berth.ECodeNotFound {
		t.Errorf("Contract of a deleted name = %v; want not found", err)
	}
	got, err = s.Contracts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkEqual(t, "Contracts after a delete", got, []*berth.ContractRecord{&want})
}
