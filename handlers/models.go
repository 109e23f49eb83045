package handlers

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/poolgate/poolgate/handlers/gemini"
	"github.com/poolgate/poolgate/internal/chat"
)

// startTime stands in for model creation times, which workers don't report.
var startTime = time.Now().Unix()

type openAIModel struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	Name    string `json:"name,omitempty"`
	// Driver is poolgate's own field, in every protocol's listing: the
	// kind of worker that serves the model (chat.Model.Driver).
	Driver string `json:"driver,omitempty"`
}

type anthropicModel struct {
	Type        string `json:"type"`
	ID          string `json:"id"`
	DisplayName string `json:"display_name"`
	CreatedAt   string `json:"created_at"`
	Driver      string `json:"driver,omitempty"`
}

// The model listings are the edge's, not a protocol's: they read the
// pool, and one path answers in the shape of whichever protocol asks.

// models serves GET /v1/models in the OpenAI list shape, Anthropic's when
// the client sends anthropic-version (the Anthropic SDK's models.list), or
// Gemini's for a Google client (the Gemini SDKs' models.list on /v1).
func models(ml ModelLister) gin.HandlerFunc {
	return func(c *gin.Context) {
		ms := ml.Models()
		if gemini.IsRequest(c.Request) {
			gemini.WriteModels(c.Writer, ms)
			return
		}
		if c.GetHeader("anthropic-version") != "" {
			data := make([]anthropicModel, 0, len(ms))
			created := time.Unix(startTime, 0).UTC().Format(time.RFC3339)
			for _, m := range ms {
				data = append(data, anthropicModel{Type: "model", ID: m.ID, DisplayName: m.Name, CreatedAt: created, Driver: m.Driver})
			}
			var first, last *string
			if len(data) > 0 {
				first, last = &data[0].ID, &data[len(data)-1].ID
			}
			c.JSON(http.StatusOK, gin.H{"data": data, "has_more": false, "first_id": first, "last_id": last})
			return
		}
		data := make([]openAIModel, 0, len(ms))
		for _, m := range ms {
			data = append(data, openAIModel{ID: m.ID, Object: "model", Created: startTime, OwnedBy: "poolgate", Name: m.Name, Driver: m.Driver})
		}
		c.JSON(http.StatusOK, gin.H{"object": "list", "data": data})
	}
}

// writeOpenAIModel answers OpenAI's models.retrieve for id, or 404.
func writeOpenAIModel(c *gin.Context, ms []chat.Model, id string) {
	for _, m := range ms {
		if m.ID == id {
			c.JSON(http.StatusOK, openAIModel{ID: m.ID, Object: "model", Created: startTime, OwnedBy: "poolgate", Name: m.Name, Driver: m.Driver})
			return
		}
	}
	WriteError(c.Writer, c.Request, http.StatusNotFound, "model "+id+" is not one of the pool's models (GET /v1/models lists them)")
}

// geminiModels serves GET /v1beta/models, the Gemini API's list.
func geminiModels(ml ModelLister) gin.HandlerFunc {
	return func(c *gin.Context) { gemini.WriteModels(c.Writer, ml.Models()) }
}

// model serves GET .../models/{model}: Gemini's model under /v1beta and for
// Google's clients on /v1; OpenAI's model object for anyone else on /v1
// (GET /v1/models/{id} is OpenAI's models.retrieve too).
func model(ml ModelLister) gin.HandlerFunc {
	return func(c *gin.Context) {
		ms, name := ml.Models(), c.Param("name")
		if gemini.IsRequest(c.Request) {
			gemini.WriteModel(c.Writer, ms, name)
			return
		}
		writeOpenAIModel(c, ms, name[1:])
	}
}
