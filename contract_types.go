package berth

import "time"

// ContractRecord is an extraction contract stored through the API
// (docs/contracts.md): its name and its document as posted (YAML or
// JSON), which package contract parses.
type ContractRecord struct {
	Name      string    `json:"name"`
	Source    string    `json:"source"`
	CreatedBy string    `json:"created_by"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}
