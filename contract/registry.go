package contract

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
)

// LoadDir parses every contract file (*.yaml, *.yml, *.json) of dir, by
// name. A file that does not parse is an error naming it and the field at
// fault; two files with one contract name are an error naming both.
func LoadDir(dir string) (map[string]*Contract, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("contracts directory: %w", err)
	}
	out := map[string]*Contract{}
	for _, e := range entries {
		ext := strings.ToLower(filepath.Ext(e.Name()))
		if e.IsDir() || (ext != ".yaml" && ext != ".yml" && ext != ".json") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("contract file: %w", err)
		}
		c, err := Parse(path, data)
		if err != nil {
			return nil, err
		}
		if prev, ok := out[c.Name]; ok {
			return nil, berth.Invalidf("name", "contract %s is defined twice: in %s and in %s", c.Name, prev.Origin, path)
		}
		out[c.Name] = c
	}
	return out, nil
}

// Registry is the contracts a server serves: those of its --contracts
// directory, read once at start, and those stored through the API, read
// from the store on each use (so that servers sharing a store agree) and
// parsed again only when their source changed. A name is one or the
// other, never both. Its methods are safe for concurrent use.
type Registry struct {
	files map[string]*Contract
	store store.ContractStore

	mu     sync.Mutex
	parsed map[string]*storedContract // by name: the last parse of each stored source

	calls calls // the calls served, for the metrics
}

type storedContract struct {
	source string
	c      *Contract
}

// NewRegistry returns the registry of files (LoadDir's) and the contracts
// st stores (nil: none, and the API cannot store any). A stored contract
// that no longer parses, or whose name a file uses too, is an error
// naming both.
func NewRegistry(ctx context.Context, files map[string]*Contract, st store.ContractStore) (*Registry, error) {
	if files == nil {
		files = map[string]*Contract{}
	}
	r := &Registry{files: files, store: st, parsed: map[string]*storedContract{}}
	if st == nil {
		return r, nil
	}
	recs, err := st.Contracts(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the stored contracts: %w", err)
	}
	for _, rec := range recs {
		if f, ok := files[rec.Name]; ok {
			return nil, berth.Errorf(berth.ECodeConflict,
				"contract %s is defined in %s and was stored through the API by %s at %s: rename the file's contract or remove the stored one (berth contract rm %s)",
				rec.Name, f.Origin, rec.CreatedBy, rec.CreatedAt.Format(time.RFC3339), rec.Name)
		}
		if _, err := r.parse(rec); err != nil {
			return nil, fmt.Errorf("stored contract %s (remove it with berth contract rm %s): %w", rec.Name, rec.Name, err)
		}
	}
	return r, nil
}

// parse returns rec's contract, parsed again only if its source changed
// since the last parse.
func (r *Registry) parse(rec *berth.ContractRecord) (*Contract, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.parsed[rec.Name]; ok && p.source == rec.Source {
		return p.c, nil
	}
	c, err := Parse(OriginAPI, []byte(rec.Source))
	if err != nil {
		return nil, err
	}
	if c.Name != rec.Name {
		return nil, berth.Invalidf("name", "the stored contract %s names itself %s", rec.Name, c.Name)
	}
	r.parsed[rec.Name] = &storedContract{source: rec.Source, c: c}
	return c, nil
}

// Get returns contract name; an unknown name is ECodeNotFound.
func (r *Registry) Get(ctx context.Context, name string) (*Contract, error) {
	if c, ok := r.files[name]; ok {
		return c, nil
	}
	if r.store == nil {
		return nil, notFound(name)
	}
	rec, err := r.store.Contract(ctx, name)
	if err != nil {
		if berth.ErrorCode(err) == berth.ECodeNotFound {
			return nil, notFound(name)
		}
		return nil, err
	}
	return r.parse(rec)
}

func notFound(name string) error {
	return &berth.Error{Code: berth.ECodeNotFound, Field: "name", Message: "no contract " + name}
}

// list returns every contract, by name.
func (r *Registry) list(ctx context.Context) ([]*Contract, error) {
	var out []*Contract
	for _, c := range r.files {
		out = append(out, c)
	}
	if r.store != nil {
		recs, err := r.store.Contracts(ctx)
		if err != nil {
			return nil, err
		}
		for _, rec := range recs {
			if _, ok := r.files[rec.Name]; ok {
				continue // refused at start; stored since by a server without the file
			}
			c, err := r.parse(rec)
			if err != nil {
				return nil, fmt.Errorf("stored contract %s: %w", rec.Name, err)
			}
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b *Contract) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Listing returns every contract as listed (GET /v1/contracts and
// GET /api/v1/contracts), by name.
func (r *Registry) Listing(ctx context.Context) (*berth.ContractList, error) {
	cs, err := r.list(ctx)
	if err != nil {
		return nil, err
	}
	out := &berth.ContractList{Object: "list", Data: make([]*berth.ContractInfo, len(cs))}
	for i, c := range cs {
		out.Data[i] = c.Info()
	}
	return out, nil
}

// Put parses source, a contract document, and stores it: as a new
// contract when replacing is "", otherwise in place of the stored
// contract replacing, which the document must name. A document that does
// not parse is an invalid error naming the field; a name a file defines
// is ECodeConflict, as is creating a name stored already; replacing one
// not stored is ECodeNotFound.
func (r *Registry) Put(ctx context.Context, source []byte, by, replacing string) (*Contract, error) {
	if r.store == nil {
		return nil, berth.Errorf(berth.ECodeNotFound, "this server stores no contracts")
	}
	c, err := Parse(OriginAPI, source)
	if err != nil {
		return nil, err
	}
	if replacing != "" && c.Name != replacing {
		return nil, berth.Invalidf("name", "the document names contract %s, not %s", c.Name, replacing)
	}
	if f, ok := r.files[c.Name]; ok {
		return nil, &berth.Error{Code: berth.ECodeConflict, Field: "name",
			Message: fmt.Sprintf("contract %s is defined in the server's file %s; change the file instead", c.Name, f.Origin)}
	}
	now := time.Now().UTC()
	rec := &berth.ContractRecord{Name: c.Name, Source: string(source), CreatedBy: by, CreatedAt: now, UpdatedAt: now}
	if replacing != "" {
		err = r.store.ReplaceContract(ctx, rec)
	} else {
		err = r.store.CreateContract(ctx, rec)
	}
	if err != nil {
		return nil, err
	}
	return r.parse(rec)
}

// Delete deletes stored contract name. A name a file defines is
// ECodeConflict; one not stored is ECodeNotFound.
func (r *Registry) Delete(ctx context.Context, name string) error {
	if f, ok := r.files[name]; ok {
		return &berth.Error{Code: berth.ECodeConflict, Field: "name",
			Message: fmt.Sprintf("contract %s is defined in the server's file %s; remove the file instead", name, f.Origin)}
	}
	if r.store == nil {
		return notFound(name)
	}
	if err := r.store.DeleteContract(ctx, name); err != nil {
		return err
	}
	r.mu.Lock()
	delete(r.parsed, name)
	r.mu.Unlock()
	return nil
}
