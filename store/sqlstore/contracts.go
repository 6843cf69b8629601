package sqlstore

import (
	"context"
	"fmt"

	"github.com/berth-dev/berth"
)

// StoredContracts implements store.ContractStore (the extraction contracts
// stored through the API) over a Reader's queries and a driver's
// ExecFunc; drivers embed it. Each write is one statement in a
// transaction of its own. Its methods are safe for concurrent use when
// the driver's functions are.
type StoredContracts struct {
	r    *Reader
	exec ExecFunc
}

// NewStoredContracts returns StoredContracts reading through r and writing with exec.
func NewStoredContracts(r *Reader, exec ExecFunc) *StoredContracts {
	return &StoredContracts{r: r, exec: exec}
}

// sql rewrites the "?" placeholders of query into the dialect's.
func (c *StoredContracts) sql(query string) string { return c.r.dialect.rewrite(query) }

const contractColumns = `name, source, created_by, created_at, updated_at`

// CreateContract adds rec; a name already there is ECodeConflict.
func (c *StoredContracts) CreateContract(ctx context.Context, rec *berth.ContractRecord) error {
	if rec.Name == "" {
		return berth.Invalidf("name", "a contract needs a name")
	}
	n, err := c.exec(ctx, c.sql(`INSERT INTO contracts (`+contractColumns+`) VALUES (?, ?, ?, ?, ?) ON CONFLICT (name) DO NOTHING`),
		rec.Name, rec.Source, rec.CreatedBy, nanos(rec.CreatedAt), nanos(rec.UpdatedAt))
	if err != nil {
		return fmt.Errorf("create contract %s: %w", rec.Name, err)
	}
	if n == 0 {
		return &berth.Error{Code: berth.ECodeConflict, Field: "name", Message: fmt.Sprintf("contract %s already exists", rec.Name)}
	}
	return nil
}

// ReplaceContract sets the source and update time of the stored contract
// rec.Name; an unknown name is ECodeNotFound.
func (c *StoredContracts) ReplaceContract(ctx context.Context, rec *berth.ContractRecord) error {
	n, err := c.exec(ctx, c.sql(`UPDATE contracts SET source = ?, updated_at = ? WHERE name = ?`),
		rec.Source, nanos(rec.UpdatedAt), rec.Name)
	if err != nil {
		return fmt.Errorf("replace contract %s: %w", rec.Name, err)
	}
	if n == 0 {
		return notFoundContract(rec.Name)
	}
	return nil
}

func notFoundContract(name string) error {
	return &berth.Error{Code: berth.ECodeNotFound, Field: "name", Message: fmt.Sprintf("no contract %s", name)}
}

// Contract returns one contract; an unknown name is ECodeNotFound.
func (c *StoredContracts) Contract(ctx context.Context, name string) (*berth.ContractRecord, error) {
	cs, err := collect(ctx, c.r, scanContract, c.sql(`SELECT `+contractColumns+` FROM contracts WHERE name = ?`), name)
	if err != nil {
		return nil, fmt.Errorf("contract %s: %w", name, err)
	}
	if len(cs) == 0 {
		return nil, notFoundContract(name)
	}
	return cs[0], nil
}

// Contracts returns every stored contract, by name.
func (c *StoredContracts) Contracts(ctx context.Context) ([]*berth.ContractRecord, error) {
	cs, err := collect(ctx, c.r, scanContract, `SELECT `+contractColumns+` FROM contracts ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list contracts: %w", err)
	}
	return cs, nil
}

func scanContract(row scanner) (*berth.ContractRecord, error) {
	var rec berth.ContractRecord
	var created, updated int64
	if err := row.Scan(&rec.Name, &rec.Source, &rec.CreatedBy, &created, &updated); err != nil {
		return nil, err
	}
	rec.CreatedAt, rec.UpdatedAt = fromNanos(created), fromNanos(updated)
	return &rec, nil
}

// DeleteContract deletes contract name; an unknown name is ECodeNotFound.
func (c *StoredContracts) DeleteContract(ctx context.Context, name string) error {
	n, err := c.exec(ctx, c.sql(`DELETE FROM contracts WHERE name = ?`), name)
	if err != nil {
		return fmt.Errorf("delete contract %s: %w", name, err)
	}
	if n == 0 {
		return notFoundContract(name)
	}
	return nil
}
