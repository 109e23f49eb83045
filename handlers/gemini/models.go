package gemini

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/poolgate/poolgate/handlers/apierr"
	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/internal/chat"
)

// modelInfo is a model in the Gemini API's shape.
type modelInfo struct {
	Name                       string   `json:"name"`
	BaseModelID                string   `json:"baseModelId"`
	Version                    string   `json:"version"`
	DisplayName                string   `json:"displayName"`
	SupportedGenerationMethods []string `json:"supportedGenerationMethods"`
	// Driver is poolgate's own: the kind of worker that serves the model.
	Driver string `json:"driver,omitempty"`
}

var methods = []string{MethodGenerate, MethodStream, MethodCount}

func info(m chat.Model) modelInfo {
	name := m.Name
	if name == "" {
		name = m.ID
	}
	return modelInfo{Name: "models/" + m.ID, BaseModelID: m.ID, Version: "1", DisplayName: name, SupportedGenerationMethods: methods,
		Driver: m.Driver}
}

// WriteModels answers models.list with the pool's models, all on one page,
// and models.get for the name r's path names ("models/{id}" or the id)
// with the pool's model of that id, or NOT_FOUND (relay.Lister). A name the
// pool does not list may still be served by generateContent (through the
// aliases or the default model), but the gateway cannot describe it.
func (h *Handler) WriteModels(w http.ResponseWriter, r *http.Request, ms []chat.Model) {
	if name := r.PathValue("name"); name != "" {
		writeModel(w, ms, name)
		return
	}
	out := struct {
		Models []modelInfo `json:"models"`
	}{Models: make([]modelInfo, 0, len(ms))}
	for _, m := range ms {
		out.Models = append(out.Models, info(m))
	}
	b, _ := json.Marshal(out) // plain strings: cannot fail
	httpx.WriteJSON(w, http.StatusOK, b)
}

func writeModel(w http.ResponseWriter, ms []chat.Model, name string) {
	id := strings.TrimPrefix(strings.TrimPrefix(name, "/"), "models/")
	for _, m := range ms {
		if m.ID == id {
			b, _ := json.Marshal(info(m))
			httpx.WriteJSON(w, http.StatusOK, b)
			return
		}
	}
	p := apierr.ForStatus(http.StatusNotFound, "model "+id+" is not one of the pool's models (GET /v1beta/models lists them); "+
		"generateContent may still serve it through the model aliases or the default model (docs/routing.md)")
	WriteProblem(w, &p)
}
