package contract

import (
	"fmt"
	"io"
	"slices"
	"sync"
)

// calls counts the calls of contracts by contract and result (ok or the
// failure's type), and the requests they sent to models, by contract.
type calls struct {
	mu       sync.Mutex
	results  map[[2]string]uint64
	attempts map[string]uint64
}

// count records res, the result of a call of contract name.
func (m *calls) count(name string, res *Result) {
	result := "ok"
	if res.Error != nil {
		result = res.Error.Type
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.results == nil {
		m.results, m.attempts = map[[2]string]uint64{}, map[string]uint64{}
	}
	m.results[[2]string{name, result}]++
	m.attempts[name] += uint64(res.Attempts)
}

// WriteMetrics writes the contracts' series in Prometheus' text format:
// berth_contract_calls_total{contract,result} and
// berth_contract_model_requests_total{contract}.
func (r *Registry) WriteMetrics(w io.Writer) {
	m := &r.calls
	m.mu.Lock()
	defer m.mu.Unlock()
	fmt.Fprintln(w, "# HELP berth_contract_calls_total Calls of extraction contracts since the server started, by contract and result (ok or the failure's type).")
	fmt.Fprintln(w, "# TYPE berth_contract_calls_total counter")
	keys := make([][2]string, 0, len(m.results))
	for k := range m.results {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b [2]string) int { return slices.Compare(a[:], b[:]) })
	for _, k := range keys {
		fmt.Fprintf(w, "berth_contract_calls_total{contract=%q,result=%q} %d\n", k[0], k[1], m.results[k])
	}
	fmt.Fprintln(w, "# HELP berth_contract_model_requests_total Requests the extraction contracts sent to models (a retry is a second one), by contract.")
	fmt.Fprintln(w, "# TYPE berth_contract_model_requests_total counter")
	names := make([]string, 0, len(m.attempts))
	for name := range m.attempts {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		fmt.Fprintf(w, "berth_contract_model_requests_total{contract=%q} %d\n", name, m.attempts[name])
	}
}
