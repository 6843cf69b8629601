package arbiter

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/internal/strict"
)

// Catalog is what the arbiter can swap a pool of workers to: pools by name
// (the workers with their labels) and models by key (the service that
// serves each, and on which pool). It is read from a file, changed through
// the API (each change written back to the file before it is answered),
// and safe for concurrent use.
type Catalog struct {
	path string // "": not kept in a file (changes live in memory)

	mu     sync.RWMutex
	pools  map[string]Pool
	models map[string]berth.CatalogModel
}

// catalogFile is a catalog's file: YAML, or JSON (which Berth writes).
type catalogFile struct {
	Pools  map[string]Pool               `json:"pools"`
	Models map[string]berth.CatalogModel `json:"models"`
}

// Pool is a set of workers, by label.
type Pool struct {
	Labels map[string]string `json:"labels"`
}

// LoadCatalog reads the catalog file at path (YAML or JSON); "" is an
// empty catalog kept in memory. Errors name the file and the entry.
func LoadCatalog(path string) (*Catalog, error) {
	c := &Catalog{path: path, pools: map[string]Pool{}, models: map[string]berth.CatalogModel{}}
	if path == "" {
		return c, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	var f catalogFile
	if err := strict.DecodeYAML(data, &f); err != nil && !errors.Is(err, strict.ErrEmptyYAML) { // an empty file is an empty catalog
		return nil, fmt.Errorf("catalog %s: %w", path, err)
	}
	if f.Pools != nil {
		c.pools = f.Pools
	}
	for key, m := range f.Models {
		if err := c.check(key, m); err != nil {
			return nil, fmt.Errorf("catalog %s: %w", path, err)
		}
		c.models[key] = m
	}
	return c, nil
}

// check validates model m under key against the pools. Caller holds mu
// (or owns c).
func (c *Catalog) check(key string, m berth.CatalogModel) error {
	if ValidScheduleID(key) != nil {
		return berth.Invalidf("model_key", "%q: must be 1-64 letters, digits, '_', '.' or '-'", key)
	}
	if _, ok := c.pools[m.Pool]; !ok {
		return berth.Invalidf("pool", "model %s: pool %q is not in the catalog's pools (%v)", key, m.Pool, slices.Sorted(maps.Keys(c.pools)))
	}
	if m.Template == "" && len(m.Command) == 0 {
		return berth.Invalidf("template", "model %s: give a template or a command", key)
	}
	return nil
}

// Model returns the model of key and its pool; an unknown key is
// ECodeNotFound naming the keys there are.
func (c *Catalog) Model(key string) (berth.CatalogModel, Pool, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	m, ok := c.models[key]
	if !ok {
		return berth.CatalogModel{}, Pool{}, &berth.Error{Code: berth.ECodeNotFound, Field: "model_key",
			Message: fmt.Sprintf("no model %q in the catalog (have: %v)", key, slices.Sorted(maps.Keys(c.models)))}
	}
	return m, c.pools[m.Pool], nil
}

// MarshalJSON writes the catalog as {"pools": …, "models": …}.
func (c *Catalog) MarshalJSON() ([]byte, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return json.Marshal(catalogFile{Pools: c.pools, Models: c.models})
}

// Put adds or replaces model key: it is checked (ECodeInvalid naming the
// field), then the catalog file is rewritten (as JSON) before the change
// is made, so that a restart keeps it; the file's error is returned.
func (c *Catalog) Put(key string, m berth.CatalogModel) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.check(key, m); err != nil {
		return err
	}
	models := maps.Clone(c.models)
	models[key] = m
	return c.save(models)
}

// Delete removes model key (ECodeNotFound when unknown), writing the file
// first as Put does.
func (c *Catalog) Delete(key string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.models[key]; !ok {
		return berth.Errorf(berth.ECodeNotFound, "no model %q in the catalog", key)
	}
	models := maps.Clone(c.models)
	delete(models, key)
	return c.save(models)
}

// save writes models (with the pools) to the catalog file, then makes them
// the catalog's. Caller holds mu.
func (c *Catalog) save(models map[string]berth.CatalogModel) error {
	if c.path != "" {
		data, err := json.MarshalIndent(catalogFile{Pools: c.pools, Models: models}, "", "  ")
		if err != nil {
			return err
		}
		tmp := c.path + ".tmp"
		if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
			return fmt.Errorf("catalog: %w", err)
		}
		if err := os.Rename(tmp, c.path); err != nil {
			return fmt.Errorf("catalog: %w", err)
		}
	}
	c.models = models
	return nil
}
