package gateway

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
)

// Model is an entry of GET /v1/models: OpenAI's model object, with
// Berth's phase of the model and its number of ready replicas.
type Model struct {
	ID       string `json:"id"`
	Object   string `json:"object"` // "model"
	Created  int64  `json:"created"`
	OwnedBy  string `json:"owned_by"`
	Phase    string `json:"phase"` // Phase*
	Replicas int    `json:"replicas"`
}

// ModelList is the answer of GET /v1/models.
type ModelList struct {
	Object string  `json:"object"` // "list"
	Data   []Model `json:"data"`
}

// models answers GET /v1/models: the models the caller may use, ready or
// on their way there, by id.
func (g *Gateway) models(w http.ResponseWriter, r *http.Request) {
	models, err := g.pool.snapshot(r.Context())
	if err != nil {
		writeError(w, asError(err))
		return
	}
	caller := CallerOf(r)
	list := ModelList{Object: "list", Data: []Model{}}
	for _, m := range models {
		if caller.Allows(m.id) {
			list.Data = append(list.Data, modelEntry(m))
		}
	}
	slices.SortFunc(list.Data, func(a, b Model) int { return strings.Compare(a.ID, b.ID) })
	writeJSON(w, list)
}

// model answers GET /v1/models/{model}.
func (g *Gateway) model(w http.ResponseWriter, r *http.Request) {
	models, err := g.pool.snapshot(r.Context())
	if err != nil {
		writeError(w, asError(err))
		return
	}
	id := r.PathValue("model")
	m := models[id]
	if m == nil || !CallerOf(r).Allows(id) {
		writeError(w, &Error{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "model_not_found", Param: "model",
			Message: "The model `" + id + "` does not exist or you do not have access to it"})
		return
	}
	writeJSON(w, modelEntry(m))
}

func modelEntry(m *model) Model {
	e := Model{ID: m.id, Object: "model", OwnedBy: "berth", Phase: m.phase, Replicas: len(m.replicas)}
	if !m.since.IsZero() {
		e.Created = m.since.Unix()
	}
	return e
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
